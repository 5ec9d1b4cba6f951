package clusterchaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/testutil"
)

const (
	failoverWorkers        = 4
	failoverUsersPerWorker = 2
	// fenceEvery is how many acknowledged writes the fence waits for
	// before it fences again.
	fenceEvery = 40
	// fenceTimeout bounds one WAIT; a WAIT that times out fences nothing.
	fenceTimeout = time.Second
)

// ack is one write of the failover load that returned nil.
type ack struct {
	uid string
	seq int64
	// idx is its place in the order writes were acknowledged.
	idx int
	// sent is when the Write call that succeeded began: a call begun
	// after the master was killed cannot have been served by it.
	sent time.Time
	// failed is how many calls for this seq failed before it.
	failed int
}

// ledger is the acknowledged writes, in the order they were acknowledged.
type ledger struct {
	mu   sync.Mutex
	acks []ack
}

func (l *ledger) add(a ack) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a.idx = len(l.acks)
	l.acks = append(l.acks, a)
}

func (l *ledger) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// since counts, per uid, the acks of writes begun at or after t.
func (l *ledger) since(t time.Time) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, a := range l.acks {
		if !a.sent.Before(t) {
			out[a.uid]++
		}
	}
	return out
}

// fence is a point up to which acknowledged writes are known replicated:
// WAIT on the master answered that its replica had every write the master
// served before the fence's own write, and so every write acknowledged
// before that.
type fence struct {
	acked int // writes acknowledged before the fence (ledger idx < acked)
	at    time.Time
}

// fences records replication fences on one master.
type fences struct {
	mu   sync.Mutex
	done []fence
	// tried counts fence attempts, failed counts those whose WAIT saw no
	// replica in time or whose master did not answer.
	tried, failed int
}

func (f *fences) last() (fence, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.done) == 0 {
		return fence{}, 0
	}
	return f.done[len(f.done)-1], len(f.done)
}

// run fences on master until stop is closed, each time once another
// fenceEvery writes were acknowledged. Its fence write goes to key, which
// must hash to a slot master serves: the replication stream is ordered,
// so a replica that has the fence's write has every write before it. (WAIT
// alone would not do: it waits for the replication offset of the caller's
// own last write, and this connection writes nothing else.)
func (f *fences) run(master *redis.Client, key string, led *ledger, stop <-chan struct{}) {
	ctx := context.Background()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	next := 0
	for {
		// Wait for the next batch of writes, polling.
		for led.len() < next {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		acked := led.len()
		next = acked + fenceEvery
		replicas, err := func() (int64, error) {
			if err := master.Incr(ctx, key).Err(); err != nil {
				return 0, err
			}
			return master.Do(ctx, "WAIT", 1, fenceTimeout.Milliseconds()).Int64()
		}()
		f.mu.Lock()
		f.tried++
		if err == nil && replicas >= 1 {
			f.done = append(f.done, fence{acked: acked, at: time.Now()})
		} else {
			f.failed++
		}
		f.mu.Unlock()
	}
}

// failoverLoad runs workers writing messages for their own users, each
// Write retried until it works, recording each acknowledgement.
type failoverLoad struct {
	offl *offline.Store
	led  ledger
	base int64
	seq  atomic.Int64
	workers
}

func startFailoverLoad(t *testing.T, offl *offline.Store, uids []string) *failoverLoad {
	l := &failoverLoad{offl: offl, base: time.Now().UnixMilli()}
	l.start(t, failoverWorkers, func(w int) {
		l.run(uids[w*failoverUsersPerWorker : (w+1)*failoverUsersPerWorker])
	})
	return l
}

func (l *failoverLoad) run(uids []string) {
	for n := 0; ; n++ {
		select {
		case <-l.stop:
			return
		default:
		}
		uid := uids[n%len(uids)]
		seq := l.seq.Add(1)
		var sent time.Time
		failed := 0
		if !retry(&l.fails, "write", fmt.Sprintf("%s seq %d", uid, seq), func(ctx context.Context) error {
			sent = time.Now()
			_, err := l.offl.Write(ctx, uid, itemsFor(uid, seq, l.base+seq))
			if err != nil {
				failed++
			}
			return err
		}) {
			return // given up: the test fails with the call's error
		}
		l.led.add(ack{uid: uid, seq: seq, sent: sent, failed: failed})
	}
}

// TestFailoverUnderLoadLosesOnlyUnfencedWrites kills (SIGKILL) the master
// of every slot its users live on while workers write offline messages for
// them, each failed Write retried until it works. Replication is
// asynchronous, so a write the master acknowledged may die with it; what
// the test pins down is which: while the load runs, a fence (a write on
// the master, then WAIT 1) marks the writes known to be on the replica.
// After the replica is promoted and the load has gone on, every
// acknowledged write must be present except those acknowledged after the
// last fence by calls begun before the kill — the only ones the master
// may have taken with it; in particular every write that failed and was
// retried must be present. The store must work after the failover, and
// the killed node, restarted, must rejoin as a replica.
func TestFailoverUnderLoadLosesOnlyUnfencedWrites(t *testing.T) {
	c := testutil.StartRedisCluster(t, 3, 1)
	rdb, _ := newClient(t, c)
	owners := slotOwners(t, c.Nodes[0])
	victim := masters(t, c, owners)[0]
	placedUsers := usersOn(t, c, victim, failoverWorkers*failoverUsersPerWorker, "f")
	uids := make([]string, len(placedUsers))
	for i, p := range placedUsers {
		uids[i] = p.uid
	}
	offl := offline.New(rdb)
	l := startFailoverLoad(t, offl, uids)

	var fs fences
	stopFences := make(chan struct{})
	fenced := make(chan struct{})
	fenceKey := fmt.Sprintf("clusterchaos/{u:%s}/fence", uids[0])
	fenceClient := direct(t, victim)
	go func() {
		defer close(fenced)
		fs.run(fenceClient, fenceKey, &l.led, stopFences)
	}()
	stopFencing := sync.OnceFunc(func() { close(stopFences); <-fenced })
	t.Cleanup(stopFencing)

	// Kill the master in the middle of a fence batch, after a few fences.
	testutil.WaitFor(t, 20*time.Second, func() error {
		last, n := fs.last()
		if n < 3 {
			return fmt.Errorf("%d fences, want 3 before the kill", n)
		}
		if got := l.led.len(); got < last.acked+fenceEvery/2 {
			return fmt.Errorf("%d writes acknowledged, want %d: half a batch past the last fence", got, last.acked+fenceEvery/2)
		}
		return nil
	})
	victim.Stop()
	killed := time.Now()
	stopFencing()
	lastFence, nFences := fs.last()

	// The replica takes over every slot of the victim.
	var promoted string
	testutil.WaitFor(t, 30*time.Second, func() error {
		seen := map[string]bool{}
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			owners := slotOwners(t, n)
			for _, p := range placedUsers {
				if o := owners[p.slot]; o == "" || o == victim.Addr {
					return fmt.Errorf("%s sees slot %d of %s served by %q", n.Addr, p.slot, p.uid, o)
				}
				seen[owners[p.slot]] = true
			}
		}
		if len(seen) != 1 {
			return fmt.Errorf("the users' slots are served by %v, want one new master", seen)
		}
		for o := range seen {
			promoted = o
		}
		return nil
	})
	promotedAt := time.Now()

	// The load goes on against the promoted replica before it stops.
	testutil.WaitFor(t, 30*time.Second, func() error {
		after := l.led.since(promotedAt)
		for _, uid := range uids {
			if after[uid] < 10 {
				return fmt.Errorf("%s: %d writes begun after the promotion acknowledged, want 10", uid, after[uid])
			}
		}
		return nil
	})
	l.halt()

	l.fails.report(t)
	for _, g := range l.fails.gaveUp {
		t.Errorf("gave up retrying %s", g)
	}

	acks := l.led.acks
	firstAfterKill := time.Time{}
	retried, before, window := 0, 0, 0
	for _, a := range acks {
		if a.failed > 0 {
			retried++
		}
		if a.sent.Before(killed) {
			before++
			if a.idx >= lastFence.acked {
				window++
			}
		} else if firstAfterKill.IsZero() {
			firstAfterKill = a.sent
		}
	}
	t.Logf("%d writes acknowledged, %d begun before the kill; %d fences (%d tried, %d timed out or failed), "+
		"the last %s before the kill covering %d writes; promotion %s after the kill, new master %s; "+
		"%d writes failed at least once and were retried",
		len(acks), before, nFences, fs.tried, fs.failed, killed.Sub(lastFence.at).Round(time.Millisecond),
		lastFence.acked, promotedAt.Sub(killed).Round(time.Millisecond), promoted, retried)
	if retried == 0 {
		t.Errorf("no write failed: the load did not reach the master while it was down")
	}

	// What survived: (a) everything acknowledged before the last fence,
	// (b) every retried write, (c) nothing else missing but writes
	// acknowledged after the last fence by calls begun before the kill.
	bySeq := map[string][]int64{}
	for _, a := range acks {
		bySeq[a.uid] = append(bySeq[a.uid], a.seq)
	}
	present := map[string]map[int64]int{}
	for _, uid := range uids {
		present[uid] = map[int64]int{}
		for _, list := range drainStored(t, rdb, offl, uid, bySeq[uid]) {
			for _, seq := range list {
				present[uid][seq]++
			}
		}
	}
	lost := 0
	for _, a := range acks {
		n := present[a.uid][a.seq]
		if n == len(platforms) {
			continue
		}
		lost++
		mayBeLost := a.idx >= lastFence.acked && a.sent.Before(killed)
		switch {
		case mayBeLost:
			t.Logf("lost as allowed: %s seq %d, in %d of %d lists, acknowledged (#%d) after the last fence (#%d) by a call begun %s before the kill",
				a.uid, a.seq, n, len(platforms), a.idx, lastFence.acked, killed.Sub(a.sent))
		case a.idx < lastFence.acked:
			t.Errorf("(a) %s seq %d in %d of %d lists: acknowledged (#%d) before the last fence (#%d)",
				a.uid, a.seq, n, len(platforms), a.idx, lastFence.acked)
		case a.failed > 0:
			t.Errorf("(b) %s seq %d in %d of %d lists: failed %d times, then acknowledged by a call begun %s after the kill",
				a.uid, a.seq, n, len(platforms), a.failed, a.sent.Sub(killed))
		default:
			t.Errorf("(c) %s seq %d in %d of %d lists: acknowledged by a call begun %s after the kill",
				a.uid, a.seq, n, len(platforms), a.sent.Sub(killed))
		}
	}
	t.Logf("%d acknowledged writes may have been lost (after the last fence, begun before the kill); lost: %d",
		window, lost)
	t.Logf("writes resumed %s after the kill", firstAfterKill.Sub(killed).Round(time.Millisecond))

	// (d) The store works on the promoted replica, and the killed node
	// comes back as its replica.
	roundTrip(t, offl, uids[0], l.seq.Add(1), l.base)
	if err := victim.Restart(); err != nil {
		t.Fatalf("restart the killed master: %v", err)
	}
	back := direct(t, victim)
	testutil.WaitFor(t, 30*time.Second, func() error {
		if err := c.Healthy(len(c.Nodes)); err != nil {
			return err
		}
		info, err := back.Info(context.Background(), "replication").Result()
		if err != nil {
			return fmt.Errorf("%s: info replication: %w", victim.Addr, err)
		}
		if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") ||
			!strings.Contains(info, "master_port:"+promoted[strings.LastIndex(promoted, ":")+1:]) {
			return fmt.Errorf("the restarted node is not a replica of %s in sync: %s", promoted, info)
		}
		return nil
	})
	roundTrip(t, offl, uids[1], l.seq.Add(1), l.base)
}

// roundTrip writes one message for uid and reads it back: the store
// serves the user's slot.
func roundTrip(t *testing.T, offl *offline.Store, uid string, seq, base int64) {
	t.Helper()
	ctx := context.Background()
	var msgs []offline.Message
	if !retry(&failures{}, "write", uid, func(ctx context.Context) error {
		_, err := offl.Write(ctx, uid, itemsFor(uid, seq, base+seq))
		return err
	}) {
		t.Fatalf("%s: a write after the failover did not succeed within %s", uid, retryFor)
	}
	for _, p := range platforms {
		var err error
		msgs, err = offl.Read(ctx, uid, p, time.Now(), expiry, 1000)
		if err != nil {
			t.Fatalf("%s/%s: read after the failover: %v", uid, p, err)
		}
		if len(msgs) != 1 || msgs[0].Seq != seq || string(msgs[0].Body) != bodyOf(uid, seq) {
			t.Errorf("%s/%s: read after the failover gave %v, want seq %d alone", uid, p, msgs, seq)
		}
	}
}
