package apikey

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// keyRecorder is a Push server recording the key each call was admitted
// with.
type keyRecorder struct {
	pushpb.UnimplementedPushServer
	keys chan *Key
}

func (k keyRecorder) Push(ctx context.Context, _ *pushpb.PushRequest) (*pushpb.PushResponse, error) {
	k.keys <- FromContext(ctx)
	return &pushpb.PushResponse{}, nil
}

// A call admitted over gRPC carries the key that admitted it (per-key
// quotas count against it), and a refused one is logged with the caller's
// address.
func TestTapCarriesTheKeyAndLogsThePeer(t *testing.T) {
	t.Parallel()
	s, err := NewStore(Config{Keys: Line("pusher", []Scope{Push}, "backend")}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	g := &Guard{Keys: s, Log: zap.New(core), ScopeOf: func(string) (Scope, bool) { return Push, false }}
	rec := keyRecorder{keys: make(chan *Key, 1)}
	srv := grpc.NewServer(g.ServerOption())
	pushpb.RegisterPushServer(srv, rec)
	c := pushpb.NewPushClient(testutil.ServeGRPC(t, srv))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := c.Push(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer pusher"), &pushpb.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	if k := <-rec.keys; k == nil || k.Name != "backend" {
		t.Fatalf("the handler saw key %+v, want the key named backend", k)
	}
	if _, err := c.Push(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong"), &pushpb.PushRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("unknown key: %v, want Unauthenticated", err)
	}
	entries := logs.TakeAll()
	if len(entries) != 1 {
		t.Fatalf("%d log lines for one refusal: %v", len(entries), entries)
	}
	if peer, _ := entries[0].ContextMap()["peer"].(string); peer == "" {
		t.Fatalf("refusal logged without the caller's address: %v", entries[0].ContextMap())
	}
}

// A call admitted over HTTP carries the key that admitted it; an open path
// carries none.
func TestHTTPCarriesTheKey(t *testing.T) {
	t.Parallel()
	s, err := NewStore(Config{Keys: Line("pusher", []Scope{Push}, "backend")}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	g := &Guard{Keys: s, ScopeOf: func(p string) (Scope, bool) { return Push, p == "/open" }}
	var seen []*Key
	h := g.HTTP(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { seen = append(seen, FromContext(r.Context())) }))
	for _, path := range []string{"/v1/push", "/open"} {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer pusher")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	if len(seen) != 2 || seen[0] == nil || seen[0].Name != "backend" || seen[1] != nil {
		t.Fatalf("keys seen %+v, want the key named backend, then none", seen)
	}
}
