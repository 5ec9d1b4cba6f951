package boat

import (
	"context"
	"strings"
	"testing"
	"time"

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
	tb := startBoat(t, cli, func(c *Config) { c.LeaseTTL = ttl })
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
