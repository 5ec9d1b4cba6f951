// Package token mints and verifies gomsg device tokens: the HS256 JWTs a
// device presents when it connects, signed with the secret station verifies
// them with (--jwt-secret). A business backend mints one for a signed-in
// user and hands it to the app:
//
//	tok, err := token.Mint(secret, "alice", "ios", []string{"news", "match-*"}, 24*time.Hour)
//
// Station reads the claims defined here and nothing else: uid, platform,
// rooms, and the registered exp (required unless station runs with
// --jwt-require-exp=false), nbf and iat, with 5 s of leeway for clocks.
// Station also checks what it alone knows: that the platform is one of its
// --platforms and that every rooms pattern is a valid room name or prefix.
package token

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Claims are a device token's claims.
type Claims struct {
	// UID is the user the device belongs to.
	UID string `json:"uid"`
	// Platform is the device's platform, one of station's --platforms
	// (e.g. ios, android, web).
	Platform string `json:"platform"`
	// Rooms are the rooms the session may join: room names, prefixes
	// ending in '*' ("match-*"), or a lone "*" for every room. Empty: none.
	Rooms []string `json:"rooms,omitempty"`
	jwt.RegisteredClaims
}

// Leeway is how far the clocks of the minting backend and of station may
// disagree on exp and nbf.
const Leeway = 5 * time.Second

// MinSecret is the shortest secret station accepts (256 bits, the hash's
// size; RFC 7518 §3.2).
const MinSecret = 32

// ErrInvalid is what Verify's errors are (errors.Is): the token is
// malformed, signed otherwise, expired, not yet valid, or lacks a claim.
var ErrInvalid = errors.New("invalid device token")

// Mint signs a token for uid on platform, allowed into rooms, valid for ttl
// from now. ttl must be positive: a token that never expires cannot be
// revoked short of rotating the secret.
func Mint(secret, uid, platform string, rooms []string, ttl time.Duration) (string, error) {
	switch {
	case len(secret) < MinSecret:
		return "", fmt.Errorf("token: the secret has %d bytes, station wants at least %d", len(secret), MinSecret)
	case uid == "":
		return "", errors.New("token: uid is empty")
	case platform == "":
		return "", errors.New("token: platform is empty")
	case ttl <= 0:
		return "", fmt.Errorf("token: ttl %s: must be positive", ttl)
	}
	now := time.Now()
	c := Claims{UID: uid, Platform: platform, Rooms: rooms, RegisteredClaims: jwt.RegisteredClaims{
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl))}}
	return Sign(secret, c)
}

// Sign signs c as it is, without Mint's checks (tests use it for tokens
// station must refuse).
func Sign(secret string, c Claims) (string, error) {
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
}

// Verifier checks tokens signed with one secret, as station does.
type Verifier struct {
	secret []byte
	parser *jwt.Parser
}

// NewVerifier returns a verifier for secret. With requireExpiry a token
// without exp is refused (station's default, --jwt-require-exp).
func NewVerifier(secret string, requireExpiry bool) *Verifier {
	opts := []jwt.ParserOption{jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithLeeway(Leeway)}
	if requireExpiry {
		opts = append(opts, jwt.WithExpirationRequired())
	}
	return &Verifier{secret: []byte(secret), parser: jwt.NewParser(opts...)}
}

// Verify returns tok's claims when it is an HS256 token signed with the
// verifier's secret, within its exp and nbf (Leeway), with uid and platform
// set; otherwise an error that errors.Is ErrInvalid.
func (v *Verifier) Verify(tok string) (*Claims, error) {
	if tok == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalid)
	}
	var c Claims
	if _, err := v.parser.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return v.secret, nil }); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if c.UID == "" || c.Platform == "" {
		return nil, fmt.Errorf("%w: uid and platform claims are required", ErrInvalid)
	}
	return &c, nil
}

// Verify checks tok with secret as station does by default (exp required):
// see Verifier.Verify.
func Verify(secret, tok string) (*Claims, error) {
	return NewVerifier(secret, true).Verify(tok)
}
