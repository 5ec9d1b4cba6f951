package apikey

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// countingCodec is the proto codec counting the messages it decodes.
type countingCodec struct{ decoded *atomic.Int64 }

func (countingCodec) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }
func (countingCodec) Name() string                  { return "proto" }
func (c countingCodec) Unmarshal(data []byte, v any) error {
	c.decoded.Add(1)
	return proto.Unmarshal(data, v.(proto.Message))
}

var _ encoding.Codec = countingCodec{}

type pushStub struct {
	pushpb.UnimplementedPushServer
	calls *atomic.Int64
}

func (p pushStub) Push(context.Context, *pushpb.PushRequest) (*pushpb.PushResponse, error) {
	p.calls.Add(1)
	return &pushpb.PushResponse{}, nil
}

func testGuard(t *testing.T, failures *atomic.Int64) *Guard {
	t.Helper()
	s, err := NewStore(Config{Keys: Line("pusher", []Scope{Push}, "") + ";" + Line("reader", []Scope{Online}, "")}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return &Guard{Keys: s, OnFail: func(string) { failures.Add(1) }, ScopeOf: func(m string) (Scope, bool) {
		switch m {
		case "/gomsg.push.Push/Push", "/v1/push":
			return Push, false
		case "/open":
			return "", true
		}
		return All, false
	}}
}

// The tap refuses a keyless call before its message is decoded: a 2 MiB
// push never reaches the codec or the handler.
func TestTapRefusesBeforeDecoding(t *testing.T) {
	t.Parallel()
	var decoded, calls, failures atomic.Int64
	g := testGuard(t, &failures)
	srv := grpc.NewServer(g.ServerOption(),
		grpc.ForceServerCodec(countingCodec{decoded: &decoded}))
	pushpb.RegisterPushServer(srv, pushStub{calls: &calls})
	c := pushpb.NewPushClient(testutil.ServeGRPC(t, srv))
	body, _ := anypb.New(wrapperspb.String(strings.Repeat("x", 2<<20)))
	big := &pushpb.PushRequest{Uids: []string{"u"}, MsgBodies: []*anypb.Any{body}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	with := func(v string) context.Context { return metadata.AppendToOutgoingContext(ctx, "authorization", v) }

	for name, cctx := range map[string]context.Context{
		"no key": ctx, "unknown key": with("Bearer nope"), "not bearer": with("pusher"), "empty bearer": with("Bearer "),
	} {
		if _, err := c.Push(cctx, big); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated", name, err)
		}
	}
	if _, err := c.Push(with("Bearer reader"), big); status.Code(err) != codes.PermissionDenied {
		t.Errorf("key without the push scope: %v, want PermissionDenied", err)
	}
	if n := decoded.Load(); n != 0 {
		t.Fatalf("refused calls were decoded %d times, want 0", n)
	}
	if calls.Load() != 0 || failures.Load() != 5 {
		t.Fatalf("handler calls %d (want 0), failures counted %d (want 5)", calls.Load(), failures.Load())
	}
	if _, err := c.Push(with("Bearer pusher"), big); err != nil {
		t.Fatalf("valid key: %v", err)
	}
	if decoded.Load() != 1 || calls.Load() != 1 {
		t.Fatalf("valid call: decoded %d, handled %d, want 1 and 1", decoded.Load(), calls.Load())
	}
}

// bodyWatch records whether the body was read.
type bodyWatch struct {
	io.Reader
	read *atomic.Bool
}

func (b bodyWatch) Read(p []byte) (int, error) { b.read.Store(true); return b.Reader.Read(p) }

func TestHTTPRefusesBeforeReadingBody(t *testing.T) {
	t.Parallel()
	var failures, handled atomic.Int64
	g := testGuard(t, &failures)
	h := g.HTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	for _, tc := range []struct {
		path, authz string
		want        int
	}{
		{"/v1/push", "", http.StatusUnauthorized},
		{"/v1/push", "Bearer nope", http.StatusUnauthorized},
		{"/v1/push", "Basic cHVzaGVy", http.StatusUnauthorized},
		{"/v1/push", "Bearer reader", http.StatusForbidden},
		{"/v1/other", "Bearer pusher", http.StatusForbidden},
		{"/open", "", http.StatusOK},
		{"/v1/push", "Bearer pusher", http.StatusOK},
	} {
		var read atomic.Bool
		req := httptest.NewRequest(http.MethodPost, tc.path, bodyWatch{strings.NewReader(`{"uids":["u"]}`), &read})
		if tc.authz != "" {
			req.Header.Set("Authorization", tc.authz)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s %q: %d, want %d", tc.path, tc.authz, rec.Code, tc.want)
		}
		if tc.want != http.StatusOK && read.Load() {
			t.Errorf("%s %q: refused but the body was read", tc.path, tc.authz)
		}
		if tc.want == http.StatusUnauthorized && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %q: WWW-Authenticate %q", tc.path, tc.authz, rec.Header().Get("WWW-Authenticate"))
		}
		if tc.want != http.StatusOK && !strings.Contains(rec.Body.String(), `"code":`) {
			t.Errorf("%s %q: body %q, want a {code, message} error", tc.path, tc.authz, rec.Body.String())
		}
	}
	if handled.Load() != 2 || failures.Load() != 5 {
		t.Fatalf("handled %d (want 2), failures %d (want 5)", handled.Load(), failures.Load())
	}
}

// Refusals are logged with the caller's address and the key's name (or the
// start of its hash: never the key), at most FailureLogBurst at once; a
// flood is counted in full but logged at a bounded rate, and the next line
// says how many were left out.
func TestGuardLogsRefusalsRateLimited(t *testing.T) {
	t.Parallel()
	s, err := NewStore(Config{Keys: Line("reader-key", []Scope{Online}, "reporting")}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	var failures atomic.Int64
	g := &Guard{Keys: s, Log: zap.New(core), OnFail: func(string) { failures.Add(1) },
		ScopeOf: func(string) (Scope, bool) { return Push, false }}
	h := g.HTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	call := func(authz string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/push", strings.NewReader("{}"))
		req.RemoteAddr = "192.0.2.7:41000"
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
	}

	call("Bearer a-key-nobody-configured")
	call("Bearer reader-key")
	call("")
	entries := logs.TakeAll()
	if len(entries) != 3 {
		t.Fatalf("%d log lines for 3 refusals, want 3: %v", len(entries), entries)
	}
	unknown := Hash("a-key-nobody-configured")
	for i, want := range []map[string]string{
		{"reason": "invalid", "peer": "192.0.2.7:41000", "method": "/v1/push", "key_sha256_prefix": hex.EncodeToString(unknown[:4])},
		{"reason": "scope", "peer": "192.0.2.7:41000", "key": "reporting"},
		{"reason": "missing", "peer": "192.0.2.7:41000"},
	} {
		e := entries[i]
		if e.Level != zap.WarnLevel {
			t.Errorf("line %d at %s, want WARN", i, e.Level)
		}
		fields := e.ContextMap()
		for k, v := range want {
			if fields[k] != v {
				t.Errorf("line %d: %s = %v, want %q (%v)", i, k, fields[k], v, fields)
			}
		}
		for k, v := range fields {
			if s, ok := v.(string); ok && (strings.Contains(s, "a-key-nobody-configured") || strings.Contains(s, "reader-key")) {
				t.Errorf("line %d: field %s holds the presented key: %q", i, k, s)
			}
		}
	}

	// A flood: every refusal counted, few logged.
	const flood = 500
	for range flood {
		call("Bearer wrong")
	}
	if n := failures.Load(); n != 3+flood {
		t.Fatalf("%d refusals counted, want %d", n, 3+flood)
	}
	logged := logs.TakeAll()
	if len(logged) > FailureLogBurst+2 || len(logged) == 0 {
		t.Fatalf("%d lines logged for %d refusals, want between 1 and %d", len(logged), flood, FailureLogBurst+2)
	}
	// Once the rate allows a line again, it says how many were left out.
	var left int64
	testutil.WaitFor(t, 5*time.Second, func() error {
		call("Bearer wrong")
		for _, e := range logs.TakeAll() {
			if n, ok := e.ContextMap()["not_logged_before"].(int64); ok {
				left = n
				return nil
			}
		}
		return errors.New("no line with not_logged_before yet")
	})
	if left < int64(flood-len(logged)-2) {
		t.Fatalf("not_logged_before %d, want at least %d", left, flood-len(logged)-2)
	}
}
