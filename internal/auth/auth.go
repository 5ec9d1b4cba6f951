// Package auth turns a device token into the user and platform it belongs to:
// a built-in HS256 JWT verifier, or the business's own authpb.Auth service.
package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/client/token"
	"github.com/gomsg/gomsg/internal/room"
	"github.com/gomsg/gomsg/pb/authpb"
)

// ErrInvalidToken means the token is missing, malformed, expired or rejected.
var ErrInvalidToken = errors.New("invalid token")

// ErrUnavailable means the external auth service could not be asked.
var ErrUnavailable = errors.New("auth service unavailable")

// Identity is who a token belongs to.
type Identity struct {
	UID      string
	Platform string
	// Rooms are the rooms the session may join: room names, or prefixes
	// ending in '*' ("match-*"), or a lone "*" for every room; they have
	// passed room.CheckPatterns. Empty: none.
	Rooms []string
}

// Authenticator checks a token.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// Claims are the JWT claims gomsg reads: the public token package's, which
// backends mint tokens with.
type Claims = token.Claims

// JWT verifies HS256 tokens signed with a shared secret.
type JWT struct {
	v *token.Verifier
}

// NewJWT returns a verifier for secret. With requireExp a token without an
// `exp` claim is refused (a token that never expires cannot be revoked).
func NewJWT(secret string, requireExp bool) *JWT {
	return &JWT{v: token.NewVerifier(secret, requireExp)}
}

// Authenticate implements Authenticator: the token package's checks, then
// the rooms claim's patterns.
func (j *JWT) Authenticate(_ context.Context, tok string) (Identity, error) {
	c, err := j.v.Verify(tok)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrInvalidToken, strings.TrimPrefix(err.Error(), token.ErrInvalid.Error()+": "))
	}
	if err := room.CheckPatterns(c.Rooms); err != nil {
		return Identity{}, fmt.Errorf("%w: rooms claim: %v", ErrInvalidToken, err)
	}
	return Identity{UID: c.UID, Platform: c.Platform, Rooms: c.Rooms}, nil
}

// Mint signs a token for uid on platform valid for ttl (0: no expiry;
// negative: already expired) that may join rooms (room names or patterns,
// see Identity.Rooms; Mint does not check them, so tests can mint bad
// ones). The example client and the tests use it; production tokens come
// from the business's own login.
func Mint(secret, uid, platform string, ttl time.Duration, rooms ...string) (string, error) {
	c := Claims{UID: uid, Platform: platform, Rooms: rooms}
	now := time.Now()
	c.IssuedAt = jwt.NewNumericDate(now)
	if ttl != 0 {
		c.ExpiresAt = jwt.NewNumericDate(now.Add(ttl))
	}
	return token.Sign(secret, c)
}

// Remote asks the business's authpb.Auth service.
type Remote struct {
	client authpb.AuthClient
}

// NewRemote uses an established connection to the auth service.
func NewRemote(conn grpc.ClientConnInterface) *Remote {
	return &Remote{client: authpb.NewAuthClient(conn)}
}

// Authenticate implements Authenticator.
func (r *Remote) Authenticate(ctx context.Context, token string) (Identity, error) {
	if token == "" {
		return Identity{}, fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	resp, err := r.client.Authenticate(ctx, &authpb.AuthenticateRequest{Token: token})
	switch status.Code(err) {
	case codes.OK:
	case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument:
		return Identity{}, fmt.Errorf("%w: %s", ErrInvalidToken, status.Convert(err).Message())
	case codes.Canceled, codes.DeadlineExceeded:
		return Identity{}, err
	default:
		return Identity{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if resp.GetUid() == "" || resp.GetPlatform() == "" {
		return Identity{}, fmt.Errorf("%w: auth service returned no uid or platform", ErrInvalidToken)
	}
	if err := room.CheckPatterns(resp.GetRooms()); err != nil {
		return Identity{}, fmt.Errorf("%w: auth service returned bad rooms: %v", ErrInvalidToken, err)
	}
	return Identity{UID: resp.GetUid(), Platform: resp.GetPlatform(), Rooms: resp.GetRooms()}, nil
}
