package clusterchaos

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/testutil"
)

const (
	reshardWorkers  = 4 // load goroutines
	usersPerWorker  = 2
	ackLag          = 5  // a message is ACKed this many writes of its user later
	readEvery       = 20 // a user's lists are read back every this many steps
	keepSessionEach = 10 // one session in this many stays recorded
	sessionBoat     = "boat-1"
)

// ackedOn names the platforms whose clients ACK seq: every fourth message
// on web, every eighth on both, so bodies end up shared by two lists, by
// one, or by none.
func ackedOn(seq int64) []string {
	switch {
	case seq%8 == 0:
		return platforms
	case seq%4 == 0:
		return []string{"web"}
	}
	return nil
}

// reshardUser is one user of the reshard load. Only the load goroutine
// owning it touches its plain fields until the load has stopped; the
// test follows its progress through the atomics.
type reshardUser struct {
	placed
	acked        atomic.Int64 // writes acknowledged
	failedWrites atomic.Int64 // Write calls that returned an error
	failedCalls  atomic.Int64 // calls of any kind that returned an error

	seqs []int64 // acknowledged writes, in order
	// retried are the seqs whose Write failed before one held. They are
	// never ACKed, so both lists must hold them at the end.
	retried  map[int64]bool
	deleted  map[string]map[int64]bool // per platform, seqs ACKed with Delete
	sessions map[string]bool           // sids recorded and not removed
}

// want is what each platform list of u must hold: every acknowledged seq
// not ACKed on that platform, in order.
func (u *reshardUser) want() map[string][]int64 {
	out := map[string][]int64{}
	for _, p := range platforms {
		out[p] = []int64{}
		for _, seq := range u.seqs {
			if !u.deleted[p][seq] {
				out[p] = append(out[p], seq)
			}
		}
	}
	return out
}

// reshardLoad runs workers, each stepping through its own users: write a
// message to both platforms, ACK an older one, add a session, list, remove
// it, list, and now and then read the lists back. Every call is retried
// until it works, and what the store answers is checked against what the
// worker knows it holds.
type reshardLoad struct {
	t    *testing.T
	offl *offline.Store
	sess *session.Store
	base int64 // timestamps are base+seq: a user's messages sort by seq
	seq  atomic.Int64
	sid  atomic.Int64
	workers
}

func startReshardLoad(t *testing.T, offl *offline.Store, sess *session.Store, users []*reshardUser) *reshardLoad {
	l := &reshardLoad{t: t, offl: offl, sess: sess, base: time.Now().UnixMilli()}
	l.start(t, reshardWorkers, func(w int) {
		l.run(users[w*usersPerWorker : (w+1)*usersPerWorker])
	})
	return l
}

func (l *reshardLoad) run(users []*reshardUser) {
	for n := 0; ; n++ {
		select {
		case <-l.stop:
			return
		default:
		}
		if !l.step(users[n%len(users)], n/len(users)) {
			return // given up: the test fails with the call's error
		}
	}
}

// call runs f through retry.
func (l *reshardLoad) call(u *reshardUser, op, what string, f func(ctx context.Context) error) bool {
	return retry(&l.fails, op, u.uid+" "+what, func(ctx context.Context) error {
		err := f(ctx)
		if err != nil {
			u.failedCalls.Add(1)
		}
		return err
	})
}

func (l *reshardLoad) step(u *reshardUser, n int) bool {
	seq := l.seq.Add(1)
	if !l.call(u, "write", fmt.Sprintf("seq %d", seq), func(ctx context.Context) error {
		_, err := l.offl.Write(ctx, u.uid, itemsFor(u.uid, seq, l.base+seq))
		if err != nil {
			u.failedWrites.Add(1)
			u.retried[seq] = true
		}
		return err
	}) {
		return false
	}
	u.seqs = append(u.seqs, seq)
	u.acked.Add(1)

	if k := len(u.seqs) - 1 - ackLag; k >= 0 && !u.retried[u.seqs[k]] {
		old := u.seqs[k]
		for _, p := range ackedOn(old) {
			if !l.call(u, "delete", fmt.Sprintf("%s seq %d", p, old), func(ctx context.Context) error {
				return l.offl.Delete(ctx, u.uid, p, []int64{old})
			}) {
				return false
			}
			u.deleted[p][old] = true
		}
	}

	sess := session.Session{Sid: strconv.FormatInt(l.sid.Add(1), 10), Platform: "ios", BoatID: sessionBoat}
	if !l.call(u, "session add", sess.Sid, func(ctx context.Context) error {
		_, err := l.sess.Add(ctx, u.uid, sess, session.Caps{}, false)
		return err
	}) {
		return false
	}
	u.sessions[sess.Sid] = true
	if !l.checkSessions(u) {
		return false
	}
	if n%keepSessionEach != 0 {
		if !l.call(u, "session remove", sess.Sid, func(ctx context.Context) error {
			return l.sess.Remove(ctx, u.uid, sess)
		}) {
			return false
		}
		delete(u.sessions, sess.Sid)
		if !l.checkSessions(u) {
			return false
		}
	}

	if n%readEvery == 0 {
		return l.checkRead(u)
	}
	return true
}

// checkSessions asserts List returns exactly the sessions u holds.
func (l *reshardLoad) checkSessions(u *reshardUser) bool {
	var got []session.Session
	if !l.call(u, "session list", "", func(ctx context.Context) (err error) {
		got, err = l.sess.List(ctx, u.uid)
		return err
	}) {
		return false
	}
	sids := make([]string, 0, len(got))
	for _, s := range got {
		sids = append(sids, s.Sid)
	}
	want := make([]string, 0, len(u.sessions))
	for sid := range u.sessions {
		want = append(want, sid)
	}
	slices.Sort(sids)
	slices.Sort(want)
	if !slices.Equal(sids, want) {
		l.t.Errorf("%s: List gave sessions %v, want %v", u.uid, sids, want)
	}
	return true
}

// checkRead asserts each list of u reads back as the worker wrote and
// ACKed it (the first page, which is all of it for most users).
func (l *reshardLoad) checkRead(u *reshardUser) bool {
	want := u.want()
	for _, p := range platforms {
		var got []int64
		if !l.call(u, "read", p, func(ctx context.Context) error {
			msgs, err := l.offl.Read(ctx, u.uid, p, time.Now(), expiry, 1000)
			got = got[:0]
			for _, m := range msgs {
				got = append(got, m.Seq)
				if string(m.Body) != bodyOf(u.uid, m.Seq) {
					l.t.Errorf("%s/%s seq %d: Read body %q during the load", u.uid, p, m.Seq, m.Body)
				}
			}
			return err
		}) {
			return false
		}
		w := want[p][:min(len(want[p]), 1000)]
		if !slices.Equal(got, w) {
			l.t.Errorf("%s/%s during the load: Read gave %d messages, want %d; %s",
				u.uid, p, len(got), len(w), firstDiff(got, w))
		}
	}
	return true
}

// TestReshardUnderLoadLosesNothing moves every slot its users live on from
// one master to another, a few keys per MIGRATE, while workers write,
// ACK, read and record sessions for those users, and checks that nothing
// acknowledged is lost or left half done: each list holds exactly its
// acknowledged, un-ACKed messages in order with their bodies, each count
// equals the lists holding its body, each session list is what was added
// and not removed. Every call that failed during the move was retried until
// it worked (the stores' contract).
func TestReshardUnderLoadLosesNothing(t *testing.T) {
	c := testutil.StartRedisCluster(t, 3, 0)
	rdb, seen := newClient(t, c)
	before := slotOwners(t, c.Nodes[0])
	all := masters(t, c, before)
	if len(all) != 3 {
		t.Fatalf("%d masters serve slots, want 3", len(all))
	}
	src, dst := all[0], all[1]

	var users []*reshardUser
	for _, p := range usersOn(t, c, src, reshardWorkers*usersPerWorker, "r") {
		users = append(users, &reshardUser{placed: p,
			deleted:  map[string]map[int64]bool{"ios": {}, "web": {}},
			retried:  map[int64]bool{},
			sessions: map[string]bool{}})
	}
	l := startReshardLoad(t, offline.New(rdb), session.New(rdb), users)

	// Give every slot keys before it moves, so the move has some to carry.
	testutil.WaitFor(t, 20*time.Second, func() error {
		for _, u := range users {
			if n := u.acked.Load(); n < 20 {
				return fmt.Errorf("%s has %d messages, want 20 before the reshard", u.uid, n)
			}
		}
		return nil
	})

	refused0 := refusals(t, all)
	start := time.Now()
	moved := map[int]int{}
	during := map[int]int64{}
	for i, u := range users {
		r0 := seen.user(u.uid)
		moved[u.slot] = migrateSlot(t, c, u.slot, src, dst, all, func(round int) {
			// Let the nodes answer two more commands on the user's keys,
			// the second sent after this MIGRATE: the load works on the
			// slot while its keys are split.
			n := seen.user(u.uid)
			testutil.WaitFor(t, 10*time.Second, func() error {
				if got := seen.user(u.uid); got < n+2 {
					return fmt.Errorf("%s: %d replies since the last MIGRATE, want 2", u.uid, got-n)
				}
				return nil
			})
			if i == 0 && round == 1 {
				// One slot stays split until a call on it fails: longer
				// than the store waits out a migration (a Write), as a
				// reshard of a big slot would. The load must retry that
				// call until it holds. Which call the split catches is
				// the scheduler's choice: a worker caught in a session
				// add (which does not wait a migration out) retries
				// that and never reaches the Write.
				w, f := u.failedWrites.Load(), u.failedCalls.Load()
				testutil.WaitFor(t, 30*time.Second, func() error {
					if u.failedCalls.Load() == f {
						return fmt.Errorf("%s: no call failed while its slot %d stays split", u.uid, u.slot)
					}
					return nil
				})
				t.Logf("%s: the split slot failed %d calls, %d of them Writes", u.uid, u.failedCalls.Load()-f, u.failedWrites.Load()-w)
			}
		})
		during[u.slot] = seen.user(u.uid) - r0
	}
	t.Logf("moved %d slots from %s to %s in %s; keys moved per slot %v; replies to commands on each slot during its move %v",
		len(users), src.Addr, dst.Addr, time.Since(start).Round(time.Millisecond), moved, during)

	// The load goes on against the new owner before it stops.
	marks := make([]int64, len(users))
	for i, u := range users {
		marks[i] = u.acked.Load()
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		for i, u := range users {
			if n := u.acked.Load() - marks[i]; n < 10 {
				return fmt.Errorf("%s: %d writes after the reshard, want 10", u.uid, n)
			}
		}
		return nil
	})
	l.halt()

	// The move was real: each user's slot changed owner in every master's
	// view, its keys went with it, and the load was redirected on its way.
	slots := make([]int, len(users))
	for i, u := range users {
		slots[i] = u.slot
	}
	t.Logf("CLUSTER SLOTS: slots %v served by %s before, by %s after", slots, before[slots[0]], slotOwners(t, dst)[slots[0]])
	for _, m := range all {
		after := slotOwners(t, m)
		for _, u := range users {
			if before[u.slot] != src.Addr || after[u.slot] != dst.Addr {
				t.Errorf("slot %d of %s: owner %s before, %s after as %s sees it; want %s then %s",
					u.slot, u.uid, before[u.slot], after[u.slot], m.Addr, src.Addr, dst.Addr)
			}
		}
	}
	for _, u := range users {
		if moved[u.slot] == 0 {
			t.Errorf("slot %d of %s: MIGRATE carried no key", u.slot, u.uid)
		}
		if during[u.slot] < 2 {
			t.Errorf("slot %d of %s: %d replies to commands on it while it moved", u.slot, u.uid, during[u.slot])
		}
		if n := keysInSlot(t, src, u.slot); n != 0 {
			t.Errorf("slot %d of %s: %d keys left on the old owner", u.slot, u.uid, n)
		}
		if n := keysInSlot(t, dst, u.slot); n == 0 {
			t.Errorf("slot %d of %s: no key on the new owner", u.slot, u.uid)
		}
	}
	refused := refusals(t, all)
	for k, v := range refused0 {
		refused[k] -= v
	}
	t.Logf("masters refused commands during and after the reshard (INFO errorstats): %v", refused)
	if refused["ASK"] == 0 {
		t.Errorf("no command was answered ASK: none reached a slot whose keys were split")
	}

	l.fails.report(t)
	for _, g := range l.fails.gaveUp {
		t.Errorf("gave up retrying %s", g)
	}

	writes, acks := 0, 0
	for _, u := range users {
		writes += len(u.seqs)
		for _, p := range platforms {
			acks += len(u.deleted[p])
		}
		var sids []string
		if !retry(&l.fails, "session list", u.uid, func(ctx context.Context) error {
			got, err := l.sess.List(ctx, u.uid)
			sids = sids[:0]
			for _, s := range got {
				sids = append(sids, s.Sid)
			}
			return err
		}) {
			t.Fatalf("%s: list sessions after the reshard failed", u.uid)
		}
		want := make([]string, 0, len(u.sessions))
		for sid := range u.sessions {
			want = append(want, sid)
		}
		slices.Sort(sids)
		slices.Sort(want)
		if !slices.Equal(sids, want) {
			t.Errorf("%s: sessions after the reshard %v, want %v", u.uid, sids, want)
		}
		got := drainStored(t, rdb, l.offl, u.uid, u.seqs)
		for p, want := range u.want() {
			if !slices.Equal(got[p], want) {
				t.Errorf("%s/%s after the reshard: Read gave %d messages, want %d; %s",
					u.uid, p, len(got[p]), len(want), firstDiff(got[p], want))
			}
		}
	}
	t.Logf("%d users: %d messages written, %d list entries ACKed", len(users), writes, acks)
}
