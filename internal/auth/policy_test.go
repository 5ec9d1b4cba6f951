package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/authpb"
)

func TestJWTRequiresExp(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef0123456789abcdef"
	forever, _ := Mint(secret, "alice", "ios", 0)
	if _, err := NewJWT(secret, true).Authenticate(context.Background(), forever); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("token without exp, exp required: %v, want ErrInvalidToken", err)
	}
	if id, err := NewJWT(secret, false).Authenticate(context.Background(), forever); err != nil || id.UID != "alice" {
		t.Fatalf("token without exp, exp not required: %+v %v", id, err)
	}
}

func TestJWTSecretPolicy(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("s", MinJWTSecret)
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte(long+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, nil, 0o600)
	cases := []struct {
		name, secret, file string
		dev                bool
		want               string // error substring; "" ok
	}{
		{"long enough", long, "", false, ""},
		{"short", strings.Repeat("s", MinJWTSecret-1), "", false, "--jwt-secret: 31 bytes"},
		{"dev secret outside dev", DevJWTSecret, "", false, "--jwt-secret: the public dev secret"},
		{"none", "", "", false, "--jwt-secret: must be set"},
		{"dev secret in dev", DevJWTSecret, "", true, ""},
		{"short in dev", "x", "", true, ""},
		{"from file", "", file, false, ""},
		{"file beats the dev default", DevJWTSecret, file, false, ""},
		{"both", long, file, false, "set one, not both"},
		{"missing file", "", filepath.Join(dir, "nope"), false, "--jwt-secret-file"},
		{"empty file", "", empty, false, "--jwt-secret-file"},
	}
	for _, c := range cases {
		got, err := JWTSecret(c.secret, c.file, c.dev)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if c.file != "" && got != long {
				t.Errorf("%s: secret %q, want the file's without the newline", c.name, got)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// The internal token is checked in a tap: calls without it, or with a wrong
// one, are Unauthenticated and never reach the handler; health stays open.
func TestInternalServerOption(t *testing.T) {
	t.Parallel()
	const token = "internal-token-0123456789"
	var calls, failures atomic.Int64
	var mu sync.Mutex
	var refused []string // each refusal's log fields, as "reason method peer"
	srv := grpc.NewServer(InternalServerOption(token, func(ctx context.Context, info *tap.Info, reason string) {
		failures.Add(1)
		var f []string
		for _, field := range RefusalFields(ctx, info, reason) {
			f = append(f, field.String)
		}
		mu.Lock()
		refused = append(refused, strings.Join(f, " "))
		mu.Unlock()
	}))
	authpb.RegisterAuthServer(srv, countingAuth{calls: &calls})
	healthpb.RegisterHealthServer(srv, health.NewServer()) // SERVING
	conn := testutil.ServeGRPC(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, tok := range map[string]string{"none": "", "wrong": "internal-token-0123456780", "prefix": "internal-token"} {
		_, err := authpb.NewAuthClient(WithBearer(conn, tok)).Authenticate(ctx, &authpb.AuthenticateRequest{Token: "x"})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s token: %v, want Unauthenticated", name, err)
		}
	}
	if calls.Load() != 0 || failures.Load() != 3 {
		t.Fatalf("handler calls %d (want 0), failures %d (want 3)", calls.Load(), failures.Load())
	}
	// What is logged of each: why, what was called, by whom — never the token.
	mu.Lock()
	slices.Sort(refused)
	mu.Unlock()
	for i, want := range []string{"invalid", "invalid", "missing"} {
		f := strings.Fields(refused[i])
		if len(f) != 3 || f[0] != want || f[1] != "/gomsg.auth.Auth/Authenticate" || !strings.HasPrefix(f[2], "127.0.0.1:") {
			t.Errorf("refusal logged as %q, want %s, the method and the caller's address", refused[i], want)
		}
		if strings.Contains(refused[i], "internal-token") {
			t.Errorf("refusal logged the token it was sent: %q", refused[i])
		}
	}
	if _, err := authpb.NewAuthClient(WithBearer(conn, token)).Authenticate(ctx, &authpb.AuthenticateRequest{Token: "x"}); err != nil || calls.Load() != 1 {
		t.Fatalf("right token: %v, calls %d", err, calls.Load())
	}
	// Per-RPC credentials (carrier's boat connections) carry it too.
	conn2, err := grpc.NewClient(conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()), BearerDialOption(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn2.Close() })
	if _, err := authpb.NewAuthClient(conn2).Authenticate(ctx, &authpb.AuthenticateRequest{Token: "x"}); err != nil {
		t.Fatalf("dial option: %v", err)
	}
	if r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a token: %v %v, want SERVING", r, err)
	}
}

type countingAuth struct {
	authpb.UnimplementedAuthServer
	calls *atomic.Int64
}

func (c countingAuth) Authenticate(context.Context, *authpb.AuthenticateRequest) (*authpb.AuthenticateResponse, error) {
	c.calls.Add(1)
	return &authpb.AuthenticateResponse{Uid: "u", Platform: "p"}, nil
}
