package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/authpb"
)

func TestJWT(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-s3cret-s3cret-s3cret-s3cret"
	good, _ := Mint(secret, "alice", "ios", time.Minute)
	expired, _ := Mint(secret, "alice", "ios", -time.Minute)
	wrongKey, _ := Mint("other", "alice", "ios", time.Minute)
	noPlatform, _ := Mint(secret, "alice", "", time.Minute)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, Claims{UID: "alice", Platform: "ios"}).SignedString(jwt.UnsafeAllowNoneSignatureType)

	v := NewJWT(secret, true)
	id, err := v.Authenticate(context.Background(), good)
	if err != nil || id != (Identity{"alice", "ios"}) {
		t.Fatalf("good token: %+v, %v", id, err)
	}
	for name, tok := range map[string]string{
		"empty": "", "garbage": "abc.def", "expired": expired, "wrong key": wrongKey,
		"no platform": noPlatform, "alg none": none,
	} {
		if _, err := v.Authenticate(context.Background(), tok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: err = %v, want ErrInvalidToken", name, err)
		}
	}
}

type fakeAuth struct {
	authpb.UnimplementedAuthServer
}

func (fakeAuth) Authenticate(_ context.Context, r *authpb.AuthenticateRequest) (*authpb.AuthenticateResponse, error) {
	switch r.Token {
	case "ok":
		return &authpb.AuthenticateResponse{Uid: "bob", Platform: "android"}, nil
	case "down":
		return nil, status.Error(codes.Internal, "db down")
	}
	return nil, status.Error(codes.Unauthenticated, "unknown token")
}

// TestRemote runs a real gRPC Auth server (the business side is the part a
// test has to stand in for) and checks how its answers map.
// Clocks of the token issuer and of gomsg may differ by a few seconds: a
// token expired 2s ago still passes (5s leeway), one expired 8s ago not.
func TestJWTLeeway(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-s3cret-s3cret-s3cret-s3cret"
	v := NewJWT(secret, true)
	recent, _ := Mint(secret, "alice", "ios", -2*time.Second)
	if _, err := v.Authenticate(context.Background(), recent); err != nil {
		t.Fatalf("token expired 2s ago: %v, want accepted within the leeway", err)
	}
	old, _ := Mint(secret, "alice", "ios", -8*time.Second)
	if _, err := v.Authenticate(context.Background(), old); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("token expired 8s ago: %v, want ErrInvalidToken", err)
	}
}

func TestRemote(t *testing.T) {
	t.Parallel()
	srv := grpc.NewServer()
	authpb.RegisterAuthServer(srv, fakeAuth{})
	r := NewRemote(testutil.ServeGRPC(t, srv))
	ctx := context.Background()
	if id, err := r.Authenticate(ctx, "ok"); err != nil || id != (Identity{"bob", "android"}) {
		t.Fatalf("ok: %+v %v", id, err)
	}
	if _, err := r.Authenticate(ctx, "nope"); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("nope: %v, want ErrInvalidToken", err)
	}
	if _, err := r.Authenticate(ctx, "down"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("down: %v, want ErrUnavailable", err)
	}
}
