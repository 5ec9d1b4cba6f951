package discovery

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/idgen"
	"github.com/gomsg/gomsg/internal/testutil"
)

// claimEvent is one hook call: lapse or hold, when, and whether the member
// could mint an id at that moment.
type claimEvent struct {
	lapse bool
	at    time.Time
	mints bool
}

type claimLog struct {
	mu     sync.Mutex
	events []claimEvent
}

func (l *claimLog) hook(m *Member, lapse bool) func() {
	return func() {
		_, err := m.IDs().Next()
		if err != nil && !errors.Is(err, idgen.ErrFenced) {
			panic(err)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.events = append(l.events, claimEvent{lapse: lapse, at: time.Now(), mints: err == nil})
	}
}

func (l *claimLog) get() []claimEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]claimEvent(nil), l.events...)
}

func (l *claimLog) waitFor(t *testing.T, n int, timeout time.Duration) []claimEvent {
	t.Helper()
	testutil.WaitFor(t, timeout, func() error {
		if got := len(l.get()); got < n {
			return testutil.Errorf("%d claim events, waiting for %d", got, n)
		}
		return nil
	})
	return l.get()
}

// TestWatchFollowsTheClaim: lapse runs when the member, cut off from etcd,
// reaches the deadline its id generator is fenced at (before etcd can expire
// the lease), hold when a keepalive is answered again under the same lease;
// lapse runs when etcd says the lease is gone and hold once the member joined
// again. They alternate, the generator agrees with each, and after Leave
// neither runs.
func TestWatchFollowsTheClaim(t *testing.T) {
	t.Parallel()
	endpoint := testutil.StartEtcd(t)
	px := testutil.StartProxy(t, endpoint)
	cli := testutil.EtcdClient(t, px.Addr())
	direct := testutil.EtcdClient(t, endpoint)
	ctx := context.Background()
	const ttl = 6 * time.Second
	m, err := Join(ctx, cli, zaptest.NewLogger(t), "/watch", "boat", BoatKey("/watch", "b"), "addr", ttl)
	if err != nil {
		t.Fatal(err)
	}
	var log claimLog
	m.Watch(log.hook(m, true), log.hook(m, false))
	runMember(t, m)
	if got := log.get(); len(got) != 0 {
		t.Fatalf("claim events %v on a held claim", got)
	}
	m.mu.Lock()
	lease := m.lease
	m.mu.Unlock()

	// Cut: lapse at the fencing deadline, TTL − TTL/3 after the last
	// answered keepalive (sent at most TTL/6 before the cut).
	cut := time.Now()
	px.Cut()
	ev := log.waitFor(t, 1, ttl)
	if !ev[0].lapse || ev[0].mints {
		t.Fatalf("first event %+v, want a lapse with the generator fenced", ev[0])
	}
	if after := ev[0].at.Sub(cut); after < ttl/2-100*time.Millisecond || after > ttl-fenceMargin(ttl)+300*time.Millisecond {
		t.Fatalf("lapse %s after the cut, want between TTL/2 and TTL−TTL/3 (%s)", after, ttl-fenceMargin(ttl))
	}
	// Back before etcd expired the lease: held again under the same lease.
	px.Restore()
	ev = log.waitFor(t, 2, ttl)
	if ev[1].lapse || !ev[1].mints {
		t.Fatalf("second event %+v, want a hold with the generator minting", ev[1])
	}
	m.mu.Lock()
	same := m.lease == lease
	m.mu.Unlock()
	if !same {
		t.Fatal("member joined again, want the same lease kept alive")
	}

	// The lease revoked: lapse at the next keepalive, hold after joining again.
	if _, err := direct.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	ev = log.waitFor(t, 4, 2*ttl)
	if !ev[2].lapse || ev[2].mints || ev[3].lapse || !ev[3].mints {
		t.Fatalf("events %+v, want lapse (fenced) then hold (minting)", ev[2:])
	}
	if len(ev) != 4 {
		t.Fatalf("events %+v, want 4", ev)
	}

	if err := m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	// No expiry fires after Leave: past the last deadline, still 4 events.
	testutil.WaitFor(t, 2*ttl, func() error {
		if time.Since(ev[3].at) < ttl {
			return testutil.Errorf("waiting past the last deadline")
		}
		return nil
	})
	if got := log.get(); len(got) != 4 {
		t.Fatalf("events %+v after Leave, want the 4 before it", got)
	}
}
