package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
)

// countHook counts what reaches Redis: pipelines, and how often each key was
// read by an HGETALL in a pipeline or alone. With hold set, each pipeline and
// lone HGETALL waits until hold is closed.
type countHook struct {
	hold    chan struct{}
	entered chan struct{} // gets a value for each that reaches the hook

	mu        sync.Mutex
	pipelines int
	piped     map[string]int
	single    map[string]int
}

func newCountHook(hold bool) *countHook {
	h := &countHook{entered: make(chan struct{}, 1000), piped: map[string]int{}, single: map[string]int{}}
	if hold {
		h.hold = make(chan struct{})
	}
	return h
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hgetall" {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.single[fmt.Sprint(cmd.Args()[1])]++
		h.mu.Unlock()
		h.entered <- struct{}{}
		if h.hold != nil {
			<-h.hold
		}
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var keys []string
		for _, cmd := range cmds {
			if cmd.Name() == "hgetall" {
				keys = append(keys, fmt.Sprint(cmd.Args()[1]))
			}
		}
		if len(keys) == 0 { // a new connection's handshake, say
			return next(ctx, cmds)
		}
		h.mu.Lock()
		h.pipelines++
		for _, k := range keys {
			h.piped[k]++
		}
		h.mu.Unlock()
		h.entered <- struct{}{}
		if h.hold != nil {
			<-h.hold
		}
		return next(ctx, cmds)
	}
}

// counts returns the pipelines of HGETALLs seen and the HGETALLs of keys sent in
// pipelines and alone.
func (h *countHook) counts() (pipelines int, piped, single map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pipelines, clone(h.piped), clone(h.single)
}

func clone(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// listFixture is a store on rdb with users seeded users and, when hook is
// set, a counting hook (holding pipelines when hold); keys names the keys
// the hook counts.
type listFixture struct {
	rdb  redis.UniversalClient
	keys rkeys.Layout
	s    *Store
	want map[string][]Session
	h    *countHook
}

func newListFixture(t *testing.T, rdb redis.UniversalClient, users int, hook, hold bool) listFixture {
	t.Helper()
	f := listFixture{rdb: rdb, keys: rkeys.Of(rdb), s: New(rdb)}
	f.want = seedUsers(t, f.s, users)
	if hook {
		f.h = newCountHook(hold)
		f.rdb.AddHook(f.h)
	}
	return f
}

// seedUsers records i%4 sessions for user u<i>, i < n, and returns what List
// must return for each.
func seedUsers(tb testing.TB, s *Store, n int) map[string][]Session {
	tb.Helper()
	want := make(map[string][]Session, n)
	var refs []Ref
	var plats []string
	for i := range n {
		uid := fmt.Sprint("u", i)
		want[uid] = []Session{}
		for j := range i % 4 {
			sid := fmt.Sprint(1000 + j)
			refs = append(refs, Ref{UID: uid, Sid: sid})
			plats = append(plats, "ios")
			want[uid] = append(want[uid], Session{Sid: sid, Platform: "ios", BoatID: "b1"})
		}
	}
	if err := s.AddMany(context.Background(), "b1", refs, plats); err != nil {
		tb.Fatal(err)
	}
	return want
}

type listed struct {
	uid      string
	sessions []Session
	err      error
}

// listAll calls List for each uid on its own goroutine, all released at
// once, and returns the channel their results arrive on.
func listAll(ctx context.Context, s *Store, uids []string) <-chan listed {
	out := make(chan listed, len(uids))
	start := make(chan struct{})
	for _, uid := range uids {
		go func() {
			<-start
			all, err := s.List(ctx, uid)
			out <- listed{uid, all, err}
		}()
	}
	close(start)
	return out
}

func collectListed(tb testing.TB, ch <-chan listed, n int) map[string]listed {
	tb.Helper()
	return testutil.Collect(tb, ch, n, 20*time.Second, func(r listed) string { return r.uid })
}

func uidsOf(from, to int) []string {
	var uids []string
	for i := from; i < to; i++ {
		uids = append(uids, fmt.Sprint("u", i))
	}
	return uids
}

func checkListed(tb testing.TB, got map[string]listed, want map[string][]Session) {
	tb.Helper()
	for uid, r := range got {
		if r.err != nil {
			tb.Fatalf("List(%s): %v", uid, r.err)
		}
		if !slices.Equal(r.sessions, want[uid]) {
			tb.Fatalf("List(%s) = %+v, want %+v", uid, r.sessions, want[uid])
		}
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	eachLayout(t, []scenario{
		{"concurrent calls", testListConcurrent},
		{"gathers while a pipeline is in flight", testListGathersWhilePipelineInFlight},
		{"per key error", testListPerKeyError},
		{"cancel while a pipeline is in flight", testListCancelWhilePipelineInFlight},
	})
}

// Many concurrent List calls each get exactly their own user's sessions,
// from far fewer round trips than calls, each hash read once per call.
// (A lone HGETALL is a round trip of its own, a pipeline is one; go-redis
// splits a cluster's by node after the hook counted it.)
func testListConcurrent(t *testing.T, rdb redis.UniversalClient) {
	f := newListFixture(t, rdb, 500, true, false)
	s, want, h := f.s, f.want, f.h

	uids := uidsOf(0, 500)
	checkListed(t, collectListed(t, listAll(context.Background(), s, uids), 500), want)

	pipelines, piped, single := h.counts()
	for _, uid := range uids {
		if n := piped[f.keys.Sessions(uid)] + single[f.keys.Sessions(uid)]; n != 1 {
			t.Fatalf("%s read %d times, want once", f.keys.Sessions(uid), n)
		}
	}
	if trips := pipelines + len(single); trips > 250 {
		t.Fatalf("%d round trips (%d pipelines, %d lone HGETALLs) for 500 concurrent calls, want well below 500",
			trips, pipelines, len(single))
	}
	t.Logf("500 concurrent calls: %d pipelines, %d lone HGETALLs", pipelines, len(single))
}

// startHeld makes a List call for u0 whose HGETALL is held in the hook,
// then calls List for uids with ctx, and waits until they all wait for the
// next pipeline.
func startHeld(t *testing.T, ctx context.Context, s *Store, h *countHook, uids []string) (first, rest <-chan listed) {
	t.Helper()
	first = listAll(context.Background(), s, []string{"u0"})
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("List(u0) sent nothing within 10s")
	}
	rest = listAll(ctx, s, uids)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := s.lists.Queued(); n != len(uids) {
			return testutil.Errorf("%d List calls queued, want %d", n, len(uids))
		}
		return nil
	})
	return first, rest
}

// Calls made while a List is in flight go together in the next pipelines,
// at most 128 keys each.
func testListGathersWhilePipelineInFlight(t *testing.T, rdb redis.UniversalClient) {
	f := newListFixture(t, rdb, 200, true, true)
	s, want, h := f.s, f.want, f.h

	first, rest := startHeld(t, context.Background(), s, h, uidsOf(1, 200))
	close(h.hold)
	checkListed(t, collectListed(t, first, 1), want)
	checkListed(t, collectListed(t, rest, 199), want)

	pipelines, piped, single := h.counts()
	if pipelines != 2 || len(single) != 1 || single[f.keys.Sessions("u0")] != 1 {
		t.Fatalf("%d pipelines and lone HGETALLs of %v, want u0's alone, then 2 pipelines (128, 71 keys)",
			pipelines, single)
	}
	for _, uid := range uidsOf(1, 200) {
		if n := piped[f.keys.Sessions(uid)]; n != 1 {
			t.Fatalf("%s read %d times in pipelines, want once", f.keys.Sessions(uid), n)
		}
	}
}

// A failed round trip fails every caller waiting on it with ErrUnavailable;
// none hangs. On a cluster every master is stopped.
func TestListRedisDown(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		start func(t *testing.T) (rdb redis.UniversalClient, stop func())
	}{
		{"standalone", func(t *testing.T) (redis.UniversalClient, func()) {
			r := testutil.StartRedis(t)
			return r.Client(t), r.Stop
		}},
		{"cluster", func(t *testing.T) (redis.UniversalClient, func()) {
			c := testutil.StartRedisCluster(t, 3, 0)
			return c.Client(t), func() {
				for _, n := range c.Nodes {
					n.Stop()
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rdb, stop := c.start(t)
			f := newListFixture(t, rdb, 0, true, true)
			first, rest := startHeld(t, context.Background(), f.s, f.h, uidsOf(1, 100))
			stop()
			close(f.h.hold)
			for _, got := range []map[string]listed{collectListed(t, first, 1), collectListed(t, rest, 99)} {
				for uid, l := range got {
					if !errors.Is(l.err, ErrUnavailable) {
						t.Fatalf("List(%s) with Redis down = %v, %v; want ErrUnavailable", uid, l.sessions, l.err)
					}
				}
			}
		})
	}
}

// A key whose HGETALL fails fails only its own caller, also when go-redis
// split the pipeline by cluster node.
func testListPerKeyError(t *testing.T, rdb redis.UniversalClient) {
	f := newListFixture(t, rdb, 50, false, false)
	s, want := f.s, f.want
	if err := rdb.Set(context.Background(), f.keys.Sessions("u7"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	h := newCountHook(true)
	rdb.AddHook(h)

	first, rest := startHeld(t, context.Background(), s, h, uidsOf(1, 50))
	close(h.hold)
	checkListed(t, collectListed(t, first, 1), want)
	got := collectListed(t, rest, 49)
	if !errors.Is(got["u7"].err, ErrUnavailable) {
		t.Fatalf("List(u7) of a string key = %v, %v; want ErrUnavailable (WRONGTYPE)", got["u7"].sessions, got["u7"].err)
	}
	delete(got, "u7")
	checkListed(t, got, want)
}

// Callers waiting for the next pipeline whose context ends return at once
// with its error while a slow pipeline is in flight; later calls work.
func testListCancelWhilePipelineInFlight(t *testing.T, rdb redis.UniversalClient) {
	f := newListFixture(t, rdb, 10, true, true)
	s, want, h := f.s, f.want, f.h

	ctx, cancel := context.WithCancel(context.Background())
	first, rest := startHeld(t, ctx, s, h, uidsOf(1, 5))
	cancel()
	for uid, l := range collectListed(t, rest, 4) {
		if !errors.Is(l.err, context.Canceled) {
			t.Fatalf("List(%s) after cancel = %v, %v; want context.Canceled", uid, l.sessions, l.err)
		}
	}
	close(h.hold)
	checkListed(t, collectListed(t, first, 1), want)
	checkListed(t, collectListed(t, listAll(context.Background(), s, uidsOf(0, 10)), 10), want)
	_, piped, single := h.counts()
	for _, uid := range uidsOf(1, 5) {
		if n := piped[f.keys.Sessions(uid)] + single[f.keys.Sessions(uid)]; n != 1 {
			t.Fatalf("%s read %d times, want once: by the last calls, not for the cancelled ones", f.keys.Sessions(uid), n)
		}
	}
}

// BenchmarkListParallel calls List from 128 goroutines per CPU (carrier
// runs 256 workers), each HGETALL sent alone as before, and gathered into
// pipelines.
func BenchmarkListParallel(b *testing.B) { benchList(b, 128) }

// BenchmarkListSerial is one caller at a time: what gathering costs when
// there is nothing to gather.
func BenchmarkListSerial(b *testing.B) { benchList(b, 0) }

// benchList calls List one HGETALL per call and pipelined, from parallelism
// goroutines per CPU (0: one caller).
func benchList(b *testing.B, parallelism int) {
	for _, bc := range []struct {
		name  string
		batch int
	}{{"one-per-call", 1}, {"pipelined", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			s := New(testutil.StartRedis(b).Client(b), WithListBatch(bc.batch))
			seedUsers(b, s, 1000)
			runList(b, s, parallelism)
		})
	}
}

// BenchmarkListLayouts is session look-ups as production runs them (List
// with its coalescer, 128 callers per CPU) on a standalone server, on a
// cluster of one master (the cluster client's cost alone) and of three
// (whose pipelines go-redis splits by node), reported as lists/s. Each
// server is started once per run, outside the timed sub-benchmark, which
// runs several times to find b.N, and stopped before the next one starts.
func BenchmarkListLayouts(b *testing.B) {
	for _, bc := range []struct {
		name  string
		start func(b *testing.B) (redis.UniversalClient, func())
	}{
		{"standalone", func(b *testing.B) (redis.UniversalClient, func()) {
			r := testutil.StartRedis(b)
			return r.Client(b), r.Stop
		}},
		{"cluster-1", func(b *testing.B) (redis.UniversalClient, func()) { return startCluster(b, 1) }},
		{"cluster-3", func(b *testing.B) (redis.UniversalClient, func()) { return startCluster(b, 3) }},
	} {
		rdb, stop := bc.start(b)
		s := New(rdb)
		seedUsers(b, s, 1000)
		b.Run(bc.name, func(b *testing.B) {
			runList(b, s, 128)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lists/s")
		})
		stop()
	}
}

func startCluster(b *testing.B, masters int) (redis.UniversalClient, func()) {
	c := testutil.StartRedisCluster(b, masters, 0)
	return c.Client(b), func() {
		for _, n := range c.Nodes {
			n.Stop()
		}
	}
}

// runList calls List for the 1000 users of seedUsers from parallelism
// goroutines per CPU (0: one caller).
func runList(b *testing.B, s *Store, parallelism int) {
	ctx := context.Background()
	list := func(i int) bool {
		if _, err := s.List(ctx, fmt.Sprint("u", i%1000)); err != nil {
			b.Error(err)
			return false
		}
		return true
	}
	b.ReportAllocs()
	if parallelism == 0 {
		b.ResetTimer()
		for i := range b.N {
			if !list(i) {
				return
			}
		}
		return
	}
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next() && list(i); i++ {
		}
	})
}
