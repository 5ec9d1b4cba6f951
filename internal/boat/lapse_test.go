package boat

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// TestPartitionedBoatStopsServing: a boat cut off from etcd (a proxy between
// them drops every connection) stops serving before etcd can expire its
// lease: health NOT_SERVING, its session kicked with SERVER_DRAINING, new
// streams refused Unavailable. While another process holds its id after the
// lease expired it keeps refusing, even with etcd reachable again; once the
// id is free it joins again and serves.
func TestPartitionedBoatStopsServing(t *testing.T) {
	t.Parallel()
	endpoint := testutil.StartEtcd(t)
	px := testutil.StartProxy(t, endpoint)
	cli := testutil.EtcdClient(t, px.Addr())
	direct := testutil.EtcdClient(t, endpoint)
	const ttl = 3 * time.Second
	// The refusal loop below opens a connection a round, each held to the
	// test's end: well over --max-connections-per-ip's default.
	tb := startBoat(t, cli, func(c *Config) { c.LeaseTTL = ttl; c.MaxConnectionsPerIP = 1 << 20 })
	c := tb.connect(t, "u1")
	key := discovery.BoatKey("/t", "b1")

	cut := time.Now()
	px.Cut()
	testutil.WaitFor(t, 2*ttl, func() error {
		if st := tb.health(); st != healthpb.HealthCheckResponse_NOT_SERVING {
			return testutil.Errorf("boat is %s %s after the cut", st, time.Since(cut))
		}
		return nil
	})
	stopped := time.Since(cut)
	kick := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetKickout() != nil }).GetKickout()
	if kick.GetReason() != msgpb.KickoutReason_SERVER_DRAINING {
		t.Fatalf("kickout %v, want SERVER_DRAINING", kick.GetReason())
	}
	refused := func() error {
		_, err := open(t, tb.ClientAddr(), "u2")
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "etcd registration") {
			return testutil.Errorf("new stream: %v, want Unavailable (registration lapsed)", err)
		}
		return nil
	}
	if err := refused(); err != nil {
		t.Fatal(err)
	}

	// etcd expires the lease; another process takes the id.
	testutil.WaitFor(t, 3*ttl, func() error {
		resp, err := direct.Get(context.Background(), key)
		if err != nil {
			return err
		}
		if len(resp.Kvs) > 0 {
			return testutil.Errorf("boat key still registered %s after the cut", time.Since(cut))
		}
		return nil
	})
	expired := time.Since(cut)
	t.Logf("lease TTL %s: boat stopped serving %s after the cut, etcd expired its key %s after it (%s before)",
		ttl, stopped.Round(10*time.Millisecond), expired.Round(10*time.Millisecond), (expired - stopped).Round(10*time.Millisecond))
	if stopped >= ttl || stopped >= expired {
		t.Fatalf("boat stopped serving %s after the cut, not before its lease (TTL %s) expired at %s", stopped, ttl, expired)
	}
	other, err := direct.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Put(context.Background(), key, "other", clientv3.WithLease(other.ID)); err != nil {
		t.Fatal(err)
	}
	px.Restore()
	// Still refusing while the id is held elsewhere: the boat reaches etcd
	// again (its lease is gone) and waits for the key.
	deadline := time.Now().Add(2 * ttl)
	for time.Now().Before(deadline) {
		if st := tb.health(); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("boat is %s while its id is held by another process", st)
		}
		if err := refused(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := direct.Revoke(context.Background(), other.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 3*ttl, func() error {
		if st := tb.health(); st != healthpb.HealthCheckResponse_SERVING {
			return testutil.Errorf("boat is %s after its id was freed", st)
		}
		return nil
	})
	tb.connect(t, "u3")
}

// TestSessionHeldWhileLapsingIsRefused: the registration lapses after Loop
// checked it and before the new session is held, so lapse() kicks every
// session but this one. The check after holding it refuses it: it must not
// be left serving while another process may hold the boat's id.
func TestSessionHeldWhileLapsingIsRefused(t *testing.T) {
	t.Parallel()
	var once sync.Once
	tb := startBoatWith(t, boatOpts{hold: func(b *Boat) { once.Do(b.lapse) }})
	c, err := open(t, tb.ClientAddr(), "u1")
	if err == nil {
		t.Fatalf("session %s connected and served while the registration lapsed (%d held), want the stream refused Unavailable",
			c.sid, tb.Sessions())
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "etcd registration") {
		t.Fatalf("stream opened while the registration lapsed: %v, want Unavailable (registration lapsed)", err)
	}
	if n := tb.Sessions(); n != 0 {
		t.Fatalf("boat holds %d sessions after refusing the only one", n)
	}
	if got := promtest.ToFloat64(tb.metrics.Connects.WithLabelValues("unavailable")); got != 1 {
		t.Fatalf("connects{unavailable} %v, want 1", got)
	}
	tb.hold()
	tb.connect(t, "u2")
}

// TestLapseKicksAndHoldServes: lapse stops serving at once — health
// NOT_SERVING, every session kicked with SERVER_DRAINING, new streams refused
// Unavailable — and hold serves again; each runs once per change.
func TestLapseKicksAndHoldServes(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	c1, c2 := tb.connect(t, "u1"), tb.connect(t, "u2")
	tb.lapse()
	tb.lapse() // once per change
	if st := tb.health(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("boat is %s after its registration lapsed", st)
	}
	for _, c := range []*client{c1, c2} {
		k := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetKickout() != nil }).GetKickout()
		if k.GetReason() != msgpb.KickoutReason_SERVER_DRAINING || k.GetMessage() != kickMessage(msgpb.KickoutReason_SERVER_DRAINING) {
			t.Fatalf("kickout %v, want SERVER_DRAINING", k)
		}
		if _, err := c.stream.Recv(); err == nil {
			t.Fatal("stream goes on after the kickout")
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := tb.Sessions(); n != 0 {
			return testutil.Errorf("%d sessions held", n)
		}
		return nil
	})
	if _, err := open(t, tb.ClientAddr(), "u3"); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "etcd registration") {
		t.Fatalf("new stream while lapsed: %v, want Unavailable (registration lapsed)", err)
	}
	if got := promtest.ToFloat64(tb.metrics.Kickouts.WithLabelValues("SERVER_DRAINING")); got != 2 {
		t.Fatalf("kickouts{SERVER_DRAINING} %v, want 2", got)
	}
	tb.hold()
	tb.hold()
	if st := tb.health(); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("boat is %s once its registration is held again", st)
	}
	tb.connect(t, "u4")
}

// TestResumeRecordsHeldSessionsAgain: after re-registering, every connected
// session that has not ended goes back to not ready and is sent to station
// again, in batches of --disconnect-batch; one still connecting or already
// kicked is left out.
func TestResumeRecordsHeldSessionsAgain(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.DisconnectBatch = 2 })
	want := map[string]bool{}
	var held []*session
	for i := range 4 {
		c := tb.connect(t, "u"+string(rune('a'+i)))
		if err := tb.FinishReplay(context.Background(), c.sid); err != nil {
			t.Fatal(err)
		}
		want[c.sid] = true
		held = append(held, tb.sessions.get(c.sid))
	}
	connecting := newSession("connecting", 1)
	kicked := newSession("kicked", 1)
	close(kicked.connected)
	kicked.kick(msgpb.KickoutReason_BY_REQUEST)
	for _, s := range []*session{connecting, kicked} {
		tb.sessions.put(s)
		t.Cleanup(func() { tb.sessions.remove(s.sid) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tb.resume(ctx)
	got := tb.station.resumed()
	if len(got) != 2 || len(got[0]) != 2 || len(got[1]) != 2 {
		t.Fatalf("resume calls %v, want two batches of 2", got)
	}
	for _, batch := range got {
		for _, sid := range batch {
			if !want[sid] {
				t.Fatalf("resumed %s, want only the held sessions %v", sid, want)
			}
			delete(want, sid)
		}
	}
	for _, s := range held {
		if s.ready.Load() {
			t.Fatalf("session %s still ready after resume: live messages would skip its replay", s.sid)
		}
	}
	// Station down: resume gives up when ctx ends.
	tb.station.down.Store(true)
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() { tb.resume(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("resume still retrying 5s after its context ended")
	}
	tb.station.down.Store(false)
}
