package auth

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/client/token"
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
	if err != nil || id.UID != "alice" || id.Platform != "ios" || id.Rooms != nil {
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
	case "rooms":
		return &authpb.AuthenticateResponse{Uid: "bob", Platform: "android", Rooms: []string{"lobby", "match-*"}}, nil
	case "bad-rooms":
		return &authpb.AuthenticateResponse{Uid: "bob", Platform: "android", Rooms: []string{"lobby", "a b"}}, nil
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
	if id, err := r.Authenticate(ctx, "ok"); err != nil || id.UID != "bob" || id.Platform != "android" || id.Rooms != nil {
		t.Fatalf("ok: %+v %v", id, err)
	}
	if _, err := r.Authenticate(ctx, "nope"); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("nope: %v, want ErrInvalidToken", err)
	}
	if _, err := r.Authenticate(ctx, "down"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("down: %v, want ErrUnavailable", err)
	}
	if id, err := r.Authenticate(ctx, "rooms"); err != nil || !slices.Equal(id.Rooms, []string{"lobby", "match-*"}) {
		t.Fatalf("rooms: %+v %v, want the rooms the service returned", id, err)
	}
	if id, err := r.Authenticate(ctx, "bad-rooms"); !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "bad rooms") ||
		!strings.Contains(err.Error(), `"a b"`) {
		t.Fatalf("bad-rooms: %+v %v, want ErrInvalidToken naming the rooms", id, err)
	}
}

// A token's rooms claim reaches the identity as minted; a claim that fails
// room.CheckPatterns refuses the whole token, with a message naming the
// claim.
func TestJWTRooms(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-s3cret-s3cret-s3cret-s3cret"
	v := NewJWT(secret, true)
	ctx := context.Background()
	good := [][]string{nil, {"lobby"}, {"lobby", "match-*", "*"}, {strings.Repeat("r", 128)}, make([]string, 64)}
	for i := range good[4] {
		good[4][i] = "r" + strings.Repeat("x", i)
	}
	for _, rooms := range good {
		tok, _ := Mint(secret, "alice", "ios", time.Minute, rooms...)
		id, err := v.Authenticate(ctx, tok)
		if err != nil || id.UID != "alice" || !slices.Equal(id.Rooms, rooms) {
			t.Fatalf("rooms %q: %+v, %v; want them accepted", rooms, id, err)
		}
	}
	too := make([]string, 65)
	for i := range too {
		too[i] = "r"
	}
	bad := map[string][]string{
		"empty room":  {"lobby", ""},
		"space":       {"a b"},
		"star inside": {"a*b"},
		"two stars":   {"a**"},
		"long":        {strings.Repeat("r", 129)},
		"control":     {"a\x01"},
		"65 patterns": too,
		"non-ascii":   {"caf\u00e9"},
	}
	for name, rooms := range bad {
		tok, _ := Mint(secret, "alice", "ios", time.Minute, rooms...)
		id, err := v.Authenticate(ctx, tok)
		if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), "rooms claim") {
			t.Errorf("%s %q: %+v, %v; want ErrInvalidToken naming the rooms claim", name, rooms, id, err)
		}
	}
}

// Station's verifier and the public token package agree: a token minted by
// the package is accepted with its claims, and the tokens station refuses
// for their signature, time or claims are refused by token.Verify too.
func TestPublicTokenPackageAgrees(t *testing.T) {
	t.Parallel()
	const secret = "agree-test-secret-at-least-32-bytes-long"
	station := NewJWT(secret, true)
	tok, err := token.Mint(secret, "ann", "web", []string{"lobby", "match-*"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	id, err := station.Authenticate(context.Background(), tok)
	if err != nil || id.UID != "ann" || id.Platform != "web" || !slices.Equal(id.Rooms, []string{"lobby", "match-*"}) {
		t.Fatalf("station on a minted token: %+v, %v", id, err)
	}
	expired, _ := Mint(secret, "ann", "web", -time.Minute)
	noExp, _ := Mint(secret, "ann", "web", 0)
	noUID, _ := Mint(secret, "", "web", time.Hour)
	other, _ := Mint(strings.Repeat("o", 32), "ann", "web", time.Hour)
	for name, tok := range map[string]string{"expired": expired, "no exp": noExp, "no uid": noUID, "another secret": other} {
		if _, err := station.Authenticate(context.Background(), tok); !errors.Is(err, ErrInvalidToken) {
			t.Fatalf("%s: station accepted it (%v): the test token is not one station refuses", name, err)
		}
		if _, err := token.Verify(secret, tok); !errors.Is(err, token.ErrInvalid) {
			t.Errorf("%s: station refuses it, token.Verify: %v", name, err)
		}
	}
}
