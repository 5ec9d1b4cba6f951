package discovery

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/idgen"
	"github.com/gomsg/gomsg/internal/testutil"
)

func nodeOf(id int64) int { return int(id>>12) & idgen.MaxNode }

// minter calls Next on a generator every millisecond and records the moment
// after its last success and the first failure after a success.
type minter struct {
	mu       sync.Mutex
	lastOK   time.Time
	lastNode int
	fenced   time.Time // first ErrFenced after lastOK
}

func startMinter(t *testing.T, gen *idgen.Generator) *minter {
	m := &minter{lastNode: -1}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			id, err := gen.Next()
			at := time.Now()
			m.mu.Lock()
			switch {
			case err == nil:
				m.lastOK, m.lastNode, m.fenced = at, nodeOf(id), time.Time{}
			case !errors.Is(err, idgen.ErrFenced):
				t.Errorf("Next: %v", err)
			case m.fenced.IsZero():
				m.fenced = at
			}
			m.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	return m
}

func (m *minter) state() (lastOK time.Time, node int, fenced time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastOK, m.lastNode, m.fenced
}

func runMember(t *testing.T, m *Member) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Leave(lctx)
	})
}

// TestFenceWhenCutOffFromEtcd: a member cut off from etcd (a proxy between
// them drops every connection) stops minting ids within TTL − margin of its
// last answered keepalive, before etcd expires its lease; a second member that
// claims the freed node id mints its first id only after the first member's
// last one. When the connection is back, the first member joins again under
// another node id and mints again.
func TestFenceWhenCutOffFromEtcd(t *testing.T) {
	t.Parallel()
	endpoint := testutil.StartEtcd(t)
	px := testutil.StartProxy(t, endpoint)
	cliA := testutil.EtcdClient(t, px.Addr())
	cliB := testutil.EtcdClient(t, endpoint)
	ctx := context.Background()
	const ttl = 6 * time.Second
	a, err := Join(ctx, cliA, zaptest.NewLogger(t), "/fence", "a", "", "", ttl)
	if err != nil {
		t.Fatal(err)
	}
	runMember(t, a)
	ma := startMinter(t, a.IDs())
	testutil.WaitFor(t, 5*time.Second, func() error {
		if last, _, _ := ma.state(); last.IsZero() {
			return testutil.Errorf("member a minted nothing")
		}
		return nil
	})
	_, nodeA, _ := ma.state()

	cut := time.Now()
	px.Cut()
	// Fenced at most TTL − margin after the last answered keepalive, which
	// was sent at most one keepalive interval before the cut.
	// TTL 6 s: keepalives every 1 s, deadline 4 s after each was sent.
	const bound = 4*time.Second + 300*time.Millisecond
	testutil.WaitFor(t, ttl, func() error {
		if _, _, fenced := ma.state(); fenced.IsZero() {
			return testutil.Errorf("member a still mints %s after the cut", time.Since(cut))
		}
		return nil
	})
	_, _, fenced := ma.state()
	if fenced.Sub(cut) > bound {
		t.Fatalf("member a fenced %s after the cut, want at most %s", fenced.Sub(cut), bound)
	}

	// Member b claims node ids until it gets a's, freed when a's lease expires.
	var b *Member
	var firstB time.Time
	testutil.WaitFor(t, 3*ttl, func() error {
		m, err := Join(ctx, cliB, zaptest.NewLogger(t), "/fence", "b", "", "", ttl)
		if err != nil {
			return err
		}
		at := time.Now()
		id, err := m.IDs().Next()
		if err != nil {
			return err
		}
		if nodeOf(id) != nodeA {
			_ = m.Leave(ctx)
			return testutil.Errorf("member b got node %d, waiting for a's %d", nodeOf(id), nodeA)
		}
		b, firstB = m, at
		return nil
	})
	t.Cleanup(func() { _ = b.Leave(ctx) })
	lastA, lastNode, _ := ma.state()
	if lastNode != nodeA || !lastA.Before(firstB) {
		t.Fatalf("member a minted under node %d at %s, not before member b's first id under it at %s",
			lastNode, lastA.Format(time.StampMicro), firstB.Format(time.StampMicro))
	}
	if firstB.Sub(lastA) < time.Second {
		t.Errorf("member a's last id only %s before member b's first", firstB.Sub(lastA))
	}

	// Connection back: a learns its lease is gone, joins again under another
	// node id, and mints again.
	px.Restore()
	testutil.WaitFor(t, 3*ttl, func() error {
		last, node, _ := ma.state()
		if !last.After(firstB) {
			return testutil.Errorf("member a does not mint again")
		}
		if node == nodeA {
			t.Fatalf("member a mints under node %d, held by member b", node)
		}
		return nil
	})
}

// TestFenceOnLostLease: when etcd says the member's lease is gone, the member
// mints nothing from its next keepalive on — long before the deadline — and
// stays fenced while it cannot join again (its key is held by another), then
// mints again once it has joined. After Leave it mints nothing.
func TestFenceOnLostLease(t *testing.T) {
	t.Parallel()
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	const ttl = 6 * time.Second
	key := BoatKey("/lost", "boat-1")
	a, err := Join(ctx, cli, zaptest.NewLogger(t), "/lost", "boat", key, "addr", ttl)
	if err != nil {
		t.Fatal(err)
	}
	runMember(t, a)
	ma := startMinter(t, a.IDs())
	testutil.WaitFor(t, 5*time.Second, func() error {
		if last, _, _ := ma.state(); last.IsZero() {
			return testutil.Errorf("member minted nothing")
		}
		return nil
	})
	// Another process takes the key (re-joining must wait), then a's lease goes.
	other, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, key, "other", clientv3.WithLease(other.ID)); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	if _, err := cli.Revoke(ctx, a.lease); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, ttl, func() error {
		if _, _, fenced := ma.state(); fenced.IsZero() {
			return testutil.Errorf("member still mints %s after its lease was revoked", time.Since(revoked))
		}
		return nil
	})
	_, _, fenced := ma.state()
	if bound := 1500 * time.Millisecond; fenced.Sub(revoked) > bound {
		t.Fatalf("member fenced %s after its lease was revoked, want at most %s", fenced.Sub(revoked), bound)
	}
	// Still fenced past the old claim's deadline while the key is taken.
	testutil.WaitFor(t, 2*ttl, func() error {
		if time.Since(revoked) < ttl {
			return testutil.Errorf("waiting past the old deadline")
		}
		return nil
	})
	// (Until its next keepalive it cannot know: ids minted up to then are
	// the bound stated in the README for a revoked lease.)
	if last, _, stillFenced := ma.state(); !last.Before(fenced) || stillFenced.IsZero() {
		t.Fatalf("member minted at %s, after it was fenced at %s", last.Format(time.StampMicro), fenced.Format(time.StampMicro))
	}
	if _, err := cli.Revoke(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 2*ttl, func() error {
		if last, _, _ := ma.state(); !last.After(fenced) {
			return testutil.Errorf("member does not mint again after joining")
		}
		return nil
	})
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.IDs().Next(); !errors.Is(err, idgen.ErrFenced) {
		t.Fatalf("Next after Leave: %v, want ErrFenced", err)
	}
}
