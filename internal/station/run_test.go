package station

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// Run leases a node id from etcd and serves the Push API over gRPC and
// HTTP/JSON and the internal API until its context ends.
func TestRunServes(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) {
		c.PushHTTPAddr = "127.0.0.1:0"
		c.APIKeys = apiKeys(t)
		c.LeaseTTL = 5 * time.Second
		c.ShutdownGrace = time.Second
	})
	r.s.ids = nil // Run must lease its own
	r.s.etcd = testutil.EtcdClient(t, testutil.StartEtcd(t))
	if err := r.s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.s.Run(ctx) }()

	dial := func(addr string) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	station := stationpb.NewStationClient(dial(r.s.InternalAddr()))
	push := pushpb.NewPushClient(dial(r.s.PushAddr()))
	callCtx, callCancel := context.WithTimeout(ctx, 20*time.Second)
	defer callCancel()
	// The node id is leased once Run joined etcd: poll until a push passes.
	keyed := metadata.AppendToOutgoingContext(callCtx, "authorization", "Bearer "+allKey)
	var seqs []int64
	testutil.WaitFor(t, 20*time.Second, func() error {
		resp, err := push.Push(keyed, &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "hi")}})
		seqs = resp.GetSeqs()
		return err
	})
	if len(seqs) != 1 || seqs[0] == 0 {
		t.Fatalf("push over gRPC: seqs %v", seqs)
	}
	if _, err := push.Push(callCtx, &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "hi")}}); err == nil {
		t.Fatal("push without a key accepted")
	}
	cr, err := station.Connect(callCtx, &stationpb.ConnectRequest{Token: r.token("bob", "ios"), BoatId: testBoat, Sid: "1"})
	if err != nil || cr.GetUid() != "bob" {
		t.Fatalf("connect over gRPC: %v, %v", cr, err)
	}
	req, _ := http.NewRequestWithContext(callCtx, "POST", "http://"+r.s.PushHTTPAddr()+"/v1/push", strings.NewReader(okPush))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+allKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("push over HTTP: %d", resp.StatusCode)
	}
	if keys, _ := r.tasks(); !slices.Equal(keys, []string{"ann", "bob", "ann"}) {
		t.Fatalf("tasks keyed %v, want ann's push, bob's replay, ann's push", keys)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil after its context ended", err)
		}
		// Run left etcd: its lease is revoked, its keys are gone at once
		// (not after the lease's TTL).
		resp, err := r.s.etcd.Get(context.Background(), r.s.cfg.EtcdPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != 0 {
			t.Fatalf("after Run: %v keys under %s (%v), want none", resp.Count, r.s.cfg.EtcdPrefix, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// Listen names the listener it could not bind; without --push-http-addr
// there is no HTTP listener.
func TestListen(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, c := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.PushGRPCAddr = busy.Addr().String() }, "station push listener: "},
		{func(c *Config) { c.InternalAddr = busy.Addr().String() }, "station internal listener: "},
		{func(c *Config) { c.PushHTTPAddr = busy.Addr().String() }, "station push http listener: "},
	} {
		s := validator(t, func(cfg *Config) {
			cfg.PushGRPCAddr, cfg.InternalAddr = "127.0.0.1:0", "127.0.0.1:0"
			c.change(cfg)
		})
		err := s.Listen()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Fatalf("Listen() = %v, want %q…", err, c.want)
		}
		for _, ln := range []net.Listener{s.pushLn, s.internalLn, s.httpLn} {
			if ln != nil {
				ln.Close()
			}
		}
	}
	// Run listens unless Listen ran, and fails as Listen does.
	s := validator(t, func(cfg *Config) { cfg.PushGRPCAddr, cfg.InternalAddr = "127.0.0.1:0", busy.Addr().String() })
	if err := s.Run(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "station internal listener: ") {
		t.Fatalf("Run() = %v, want the internal listener's error", err)
	}
	s.pushLn.Close()
	s = validator(t, func(cfg *Config) { cfg.PushGRPCAddr, cfg.InternalAddr = "127.0.0.1:0", "127.0.0.1:0" })
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	defer s.pushLn.Close()
	defer s.internalLn.Close()
	if s.PushHTTPAddr() != "" || s.PushAddr() == s.InternalAddr() || strings.HasSuffix(s.PushAddr(), ":0") {
		t.Fatalf("addresses %q %q %q", s.PushAddr(), s.InternalAddr(), s.PushHTTPAddr())
	}
}
