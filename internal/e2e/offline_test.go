package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

func (e *env) zcard(uid, platform string) int64 {
	e.t.Helper()
	n, err := e.rdb.ZCard(context.Background(), e.keys.Offline(uid, platform)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) waitZcard(uid, platform string, want int64) {
	e.t.Helper()
	testutil.WaitFor(e.t, 20*time.Second, func() error {
		if got := e.zcard(uid, platform); got != want {
			return fmt.Errorf("%s/%s offline set holds %d, want %d", uid, platform, got, want)
		}
		return nil
	})
}

// pushOffline pushes n NEED_OFFLINE messages "<prefix><i>" to uid on
// platform, one push each, and returns their seqs.
func (e *env) pushOffline(uid, platform, prefix string, n int) []int64 {
	e.t.Helper()
	seqs := make([]int64, n)
	for i := range n {
		seqs[i] = e.pushText(&pushpb.PushRequest{Uids: []string{uid}, MsgOptions: optOffline,
			PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{platform}}}, fmt.Sprint(prefix, i))
	}
	return seqs
}

func seqsOf(d *device) []int64 {
	var out []int64
	for _, m := range d.received() {
		out = append(out, m.GetSeq())
	}
	return out
}

// 120 stored messages reach a reconnecting session oldest first, in pages of
// 50, and each is deleted only after its ACK. A session that leaves after the
// first page gets the other 70 on its next connect and never the first 50
// again.
func TestOfflineReplayInPagesDeletedOnlyAfterAck(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, withPlatforms("ios:offline=1h/500,android,web"), redisOpt)
		seqs := e.pushOffline("bob", "ios", "m", 120)
		e.waitZcard("bob", "ios", 120)

		first := e.dial("bob", "ios", false)
		got := first.waitCount(t, 50)
		if !slices.Equal(seqsOf(first)[:50], seqs[:50]) {
			t.Fatalf("first page = %v, want the 50 oldest %v", seqsOf(first)[:50], seqs[:50])
		}
		first.mu.Lock()
		firstBatch := first.batches[0]
		first.mu.Unlock()
		if firstBatch != 50 {
			t.Fatalf("first page had %d messages, want 50", firstBatch)
		}
		// Nothing is deleted before the ACK: the boat is waiting for it.
		if n := e.zcard("bob", "ios"); n != 120 {
			t.Fatalf("%d stored before any ACK, want 120", n)
		}
		page := make([]int64, 50)
		for i, m := range got[:50] {
			page[i] = m.GetSeq()
		}
		if err := first.Ack(page...); err != nil {
			t.Fatal(err)
		}
		e.waitZcard("bob", "ios", 70)
		for _, s := range seqs[:50] {
			if e.rdb.Exists(context.Background(), e.keys.Body("bob", s), e.keys.Count("bob", s)).Val() != 0 {
				t.Fatalf("body or count of ACKed seq %d still stored", s)
			}
		}
		first.Close()

		// The rest on the next connect, in order, never the first 50 again.
		second := e.dial("bob", "ios", true)
		second.waitReady(t)
		rest := seqsOf(second)
		if !slices.Equal(rest, seqs[50:]) {
			t.Fatalf("second session got %d messages %v, want the other 70 %v", len(rest), rest, seqs[50:])
		}
		second.mu.Lock()
		batches := slices.Clone(second.batches)
		second.mu.Unlock()
		if !slices.Equal(batches, []int{50, 20}) {
			t.Fatalf("pages of the replay = %v, want [50 20]", batches)
		}
		e.waitZcard("bob", "ios", 0)
		if n := e.rdb.Exists(context.Background(), e.keys.Offline("bob", "ios")).Val(); n != 0 {
			t.Fatal("empty offline set still exists")
		}
	})
}

// startHeldCarrier starts boat and station, and a carrier that reaches Redis
// through a proxy: while the proxy is held, carrier takes tasks from Kafka but
// cannot look up a session until Release, so the test decides which tasks it
// processes only once a session exists.
func startHeldCarrier(t *testing.T, opts ...option) (*env, *testutil.Proxy) {
	t.Helper()
	e := start(t, append(opts, withServices("boat", "station"))...)
	px := testutil.StartProxy(t, e.redis.Addr)
	e.startExtraWith(func(c *app.ClusterConfig) { c.Backends.RedisAddrs = []string{px.Addr()} }, "carrier")
	return e, px
}

// A push racing a reconnect: with messages already stored, tasks queued
// before and after the session's SendOfflineToSession task, all processed
// only once the session exists (carrier held), are delivered exactly once and
// in seq order: the ones ahead of the replay are stored (the session is not
// ready: boat's not-ready guard) and replayed after the stored ones, the ones
// behind it go live. Without the guard the ones ahead go live first, before
// the older stored messages.
func TestPushRacingReconnectDeliveredOnceInOrder(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e, px := startHeldCarrier(t, queueOpt, queueOpt)
		stored := e.pushOffline("dave", "web", "stored", 5)
		e.waitZcard("dave", "web", 5)

		px.Hold()
		before := e.pushOffline("dave", "web", "before", 5)
		d := e.dial("dave", "web", true) // its SendOfflineToSession task queues behind `before`
		after := e.pushOffline("dave", "web", "after", 5)
		px.Release()

		d.waitReady(t)
		want := slices.Concat(stored, before, after)
		d.waitCount(t, len(want))
		e.waitZcard("dave", "web", 0) // nothing stranded in the store
		if s := seqsOf(d); !slices.Equal(s, want) {
			t.Fatalf("received %v, want each of %v once, in order", s, want)
		}
	})
}

// Many reconnects under concurrent pushes: no message is lost, duplicated,
// reordered or stranded. In each round some messages are stored while the
// user is offline, some are taken by a held carrier before the new session
// exists and processed after it does (ahead of its replay), and more race
// the connect.
func TestReconnectsUnderLoadLoseNothing(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e, px := startHeldCarrier(t, queueOpt, queueOpt)
		const rounds = 6
		var want, all []int64
		// covered counts the pushed seqs that reached a session or the store.
		covered := func(extra []int64) int {
			members, err := e.rdb.ZRange(context.Background(), e.keys.Offline("erin", "android"), 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			have := map[int64]bool{}
			for _, s := range slices.Concat(all, extra) {
				have[s] = true
			}
			for _, m := range members {
				s, _ := strconv.ParseInt(m, 10, 64)
				have[s] = true
			}
			n := 0
			for _, s := range want {
				if have[s] {
					n++
				}
			}
			return n
		}
		for r := range rounds {
			// Offline: stored.
			zc := e.zcard("erin", "android")
			stored := e.pushOffline("erin", "android", fmt.Sprint("r", r, "s"), 3)
			e.waitZcard("erin", "android", zc+3)
			// Taken before the session exists, processed after it does.
			px.Hold()
			held := e.pushOffline("erin", "android", fmt.Sprint("r", r, "h"), 3)
			done := make(chan []int64)
			go func() { done <- e.pushOffline("erin", "android", fmt.Sprint("r", r, "l"), 10) }()
			d := e.dial("erin", "android", true)
			px.Release()
			racing := <-done
			want = slices.Concat(want, stored, held, racing)
			d.waitReady(t)
			// Everything pushed so far has reached a session or the store.
			testutil.WaitFor(t, 20*time.Second, func() error {
				if n := covered(seqsOf(d)); n < len(want) {
					return fmt.Errorf("round %d: %d of %d received or stored", r, n, len(want))
				}
				return nil
			})
			all = append(all, seqsOf(d)...)
			d.Close()
			// The session is gone before the next round pushes: nothing is
			// delivered to a closing stream.
			testutil.WaitFor(t, 20*time.Second, func() error {
				if n := e.rdb.HLen(context.Background(), e.keys.Sessions("erin")).Val(); n != 0 {
					return fmt.Errorf("round %d: erin still has %d sessions", r, n)
				}
				return nil
			})
		}
		final := e.dial("erin", "android", true)
		final.waitReady(t)
		e.waitZcard("erin", "android", 0)
		all = append(all, seqsOf(final)...)
		seen := make(map[int64]int)
		for _, s := range all {
			seen[s]++
		}
		lost, dup := 0, 0
		for _, s := range want {
			switch seen[s] {
			case 0:
				lost++
			case 1:
			default:
				dup++
			}
		}
		t.Logf("pushed %d, delivered %d, lost %d, duplicated %d", len(want), len(all), lost, dup)
		if lost > 0 || dup > 0 {
			t.Fatalf("%d messages lost, %d duplicated", lost, dup)
		}
		if len(all) != len(want) {
			t.Fatalf("delivered %d messages, want %d", len(all), len(want))
		}
		if !slices.IsSorted(all) {
			t.Fatalf("delivery order is not seq order: %v", all)
		}
	})
}

// Expired stored messages are never delivered.
func TestExpiredOfflineMessagesNotDelivered(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, withPlatforms("ios:offline=1s/100,web:offline=1h/100"), redisOpt)
		old := e.pushOffline("frank", "ios", "old", 3)
		e.waitZcard("frank", "ios", 3)
		testutil.WaitFor(t, 10*time.Second, func() error { // all three past their 1s expiry
			alive := strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)
			if n := e.rdb.ZCount(context.Background(), e.keys.Offline("frank", "ios"), alive, "+inf").Val(); n != 0 {
				return fmt.Errorf("%d of %v not expired yet", n, old)
			}
			return nil
		})
		fresh := e.pushOffline("frank", "ios", "fresh", 1)
		d := e.dial("frank", "ios", true)
		d.waitReady(t)
		if got := seqsOf(d); !slices.Equal(got, fresh) {
			t.Fatalf("received %v, want only the unexpired %v", got, fresh)
		}
		e.waitZcard("frank", "ios", 0)
	})
}

// The trim to max count keeps the newest messages.
func TestOfflineMaxCountKeepsNewest(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, withPlatforms("ios:offline=1h/5,web"), redisOpt)
		seqs := e.pushOffline("gina", "ios", "m", 8)
		e.waitZcard("gina", "ios", 5)
		d := e.dial("gina", "ios", true)
		d.waitReady(t)
		if got := seqsOf(d); !slices.Equal(got, seqs[3:]) {
			t.Fatalf("received %v, want the 5 newest %v", got, seqs[3:])
		}
		for _, s := range seqs[:3] {
			if e.rdb.Exists(context.Background(), e.keys.Body("gina", s)).Val() != 0 {
				t.Fatalf("trimmed seq %d's body still stored", s)
			}
		}
	})
}
