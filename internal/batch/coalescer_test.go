package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/testutil"
)

// fetcher is a test Fetch that records the keys of every fetch and answers
// key*10. While hold is open, each fetch waits for it to close.
type fetcher struct {
	mu      sync.Mutex
	batches [][]int
	hold    chan struct{}
	started chan []int // gets the keys of each fetch, when non-nil
}

func newFetcher() *fetcher { return &fetcher{hold: make(chan struct{})} }

func (f *fetcher) fetch(_ context.Context, keys []int) ([]int, []error) {
	f.mu.Lock()
	f.batches = append(f.batches, slices.Clone(keys))
	f.mu.Unlock()
	if f.started != nil {
		f.started <- slices.Clone(keys)
	}
	<-f.hold
	vals := make([]int, len(keys))
	for i, k := range keys {
		vals[i] = k * 10
	}
	return vals, nil
}

func (f *fetcher) seen() [][]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

// waitFor polls cond until it holds or 5s pass.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type result struct {
	key, val int
	err      error
}

// doAll calls Do for each key on its own goroutine and sends each result
// to the returned channel.
func doAll(ctx context.Context, c *Coalescer[int, int], keys ...int) <-chan result {
	out := make(chan result, len(keys))
	for _, k := range keys {
		go func() {
			v, err := c.Do(ctx, k)
			out <- result{k, v, err}
		}()
	}
	return out
}

func collect(tb testing.TB, ch <-chan result, n int) map[int]result {
	tb.Helper()
	return testutil.Collect(tb, ch, n, 5*time.Second, func(r result) int { return r.key })
}

func keys(from, to int) []int {
	var ks []int
	for k := from; k < to; k++ {
		ks = append(ks, k)
	}
	return ks
}

// A lone call is fetched at once; the calls made while that fetch is in
// flight go together in the next one, at most max keys each.
func TestGathersWhileFetchInFlight(t *testing.T) {
	t.Parallel()
	f := newFetcher()
	f.started = make(chan []int, 10)
	c := New(4, f.fetch)

	first := doAll(context.Background(), c, 0)
	if got := <-f.started; !slices.Equal(got, []int{0}) {
		t.Fatalf("first fetch = %v, want [0] (sent at once, alone)", got)
	}
	rest := doAll(context.Background(), c, keys(1, 11)...)
	waitFor(t, "10 calls queued", func() bool { return c.Queued() == 10 })
	close(f.hold)

	if r := collect(t, first, 1)[0]; r.val != 0 || r.err != nil {
		t.Fatalf("Do(0) = %d, %v", r.val, r.err)
	}
	for k, r := range collect(t, rest, 10) {
		if r.val != k*10 || r.err != nil {
			t.Fatalf("Do(%d) = %d, %v; want %d", k, r.val, r.err, k*10)
		}
	}
	batches := f.seen()
	sizes := []int{}
	var all []int
	for _, b := range batches[1:] {
		sizes = append(sizes, len(b))
		all = append(all, b...)
	}
	if !slices.Equal(sizes, []int{4, 4, 2}) {
		t.Fatalf("fetches after the first carried %v keys, want [4 4 2] (max 4)", sizes)
	}
	slices.Sort(all)
	if !slices.Equal(all, keys(1, 11)) {
		t.Fatalf("keys fetched after the first = %v, want each of 1..10 once", all)
	}
}

// A queued caller whose context ends returns at once with its error, and
// its key is left out of the next fetch, whether it heads the queue or not;
// the others get their values.
func TestQueuedCallerGoes(t *testing.T) {
	t.Parallel()
	f := newFetcher()
	f.started = make(chan []int, 10)
	c := New(0, f.fetch)

	first := doAll(context.Background(), c, 0)
	<-f.started
	ctx, cancel := context.WithCancel(context.Background())
	var gone, stays []<-chan result
	for k := 1; k <= 4; k++ {
		if k%2 == 1 {
			gone = append(gone, doAll(ctx, c, k))
		} else {
			stays = append(stays, doAll(context.Background(), c, k))
		}
		waitFor(t, fmt.Sprintf("call %d queued", k), func() bool { return c.Queued() == k })
	}

	cancel()
	for _, ch := range gone {
		for k, r := range collect(t, ch, 1) {
			if !errors.Is(r.err, context.Canceled) {
				t.Fatalf("Do(%d) after cancel = %d, %v; want context.Canceled", k, r.val, r.err)
			}
		}
	}
	close(f.hold)
	collect(t, first, 1)
	for _, ch := range stays {
		for k, r := range collect(t, ch, 1) {
			if r.val != k*10 || r.err != nil {
				t.Fatalf("Do(%d) = %d, %v; want %d", k, r.val, r.err, k*10)
			}
		}
	}
	if b := f.seen(); len(b) != 2 || !slices.Equal(b[1], []int{2, 4}) {
		t.Fatalf("fetches = %v, want [[0] [2 4]] (the gone callers' keys not fetched)", b)
	}
}

// While a fetch is in flight, a caller of it (not the leader running it)
// whose context ends returns at once; the leader's context ending does not
// cancel the fetch the others wait on.
func TestCallersOfFetchInFlight(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 10)
	release := make(chan struct{}, 10)
	c := New(0, func(ctx context.Context, keys []int) ([]int, []error) {
		started <- struct{}{}
		<-release
		vals := make([]int, len(keys))
		errs := make([]error, len(keys))
		for i, k := range keys {
			vals[i], errs[i] = k*10, ctx.Err()
		}
		return vals, errs
	})
	blocker := doAll(context.Background(), c, 0)
	<-started
	leadCtx, cancelLead := context.WithCancel(context.Background())
	lead := doAll(leadCtx, c, 1) // first queued: runs the next fetch
	waitFor(t, "call 1 queued", func() bool { return c.Queued() == 1 })
	stays := doAll(context.Background(), c, 2)
	waitFor(t, "call 2 queued", func() bool { return c.Queued() == 2 })
	goneCtx, cancelGone := context.WithCancel(context.Background())
	gone := doAll(goneCtx, c, 3)
	waitFor(t, "call 3 queued", func() bool { return c.Queued() == 3 })
	release <- struct{}{}
	collect(t, blocker, 1)
	<-started // the fetch of [1 2 3] is in flight

	cancelGone()
	if r := collect(t, gone, 1)[3]; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Do(3) = %d, %v; want context.Canceled while its fetch is in flight", r.val, r.err)
	}
	cancelLead()
	release <- struct{}{}
	if r := collect(t, stays, 1)[2]; r.val != 20 || r.err != nil {
		t.Fatalf("Do(2) = %d, %v; want 20 (the fetch was cancelled with its leader's context)", r.val, r.err)
	}
	if r := collect(t, lead, 1)[1]; r.val != 10 || r.err != nil {
		t.Fatalf("Do(1), the leader = %d, %v; want 10", r.val, r.err)
	}
}

// A caller made leader just as its context ends passes the lead on, so the
// callers behind it are not stranded. The two happen together, so this
// repeats until both orders have been seen many times.
func TestLeadPassedOnByGoneCaller(t *testing.T) {
	t.Parallel()
	for round := range 300 {
		started := make(chan struct{}, 10)
		release := make(chan struct{})
		c := New(0, func(_ context.Context, keys []int) ([]int, []error) {
			started <- struct{}{}
			<-release
			vals := make([]int, len(keys))
			for i, k := range keys {
				vals[i] = k * 10
			}
			return vals, nil
		})
		first := doAll(context.Background(), c, 0)
		<-started
		ctx, cancel := context.WithCancel(context.Background())
		next := doAll(ctx, c, 1)
		waitFor(t, "call 1 queued", func() bool { return c.Queued() == 1 })
		behind := doAll(context.Background(), c, 2)
		waitFor(t, "call 2 queued", func() bool { return c.Queued() == 2 })
		go cancel()
		close(release)
		collect(t, first, 1)
		collect(t, next, 1)
		if r := collect(t, behind, 1)[2]; r.val != 20 || r.err != nil {
			t.Fatalf("round %d: Do(2) = %d, %v; want 20", round, r.val, r.err)
		}
	}
}

// The fetch's context ends at the latest deadline of its callers, and has
// none when one of them has none.
func TestFetchDeadline(t *testing.T) {
	t.Parallel()
	now := time.Now()
	cases := []struct {
		name      string
		deadlines []time.Duration // 0: no deadline
		want      time.Duration   // 0: no deadline
	}{
		{"all have one", []time.Duration{time.Hour, 3 * time.Hour, 2 * time.Hour}, 3 * time.Hour},
		{"one has none", []time.Duration{time.Hour, 0, 2 * time.Hour}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var calls []*call[int, int]
			for _, d := range tc.deadlines {
				ctx := context.Background()
				if d != 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithDeadline(ctx, now.Add(d))
					t.Cleanup(cancel)
				}
				calls = append(calls, &call[int, int]{ctx: ctx})
			}
			ctx, cancel := fetchContext(calls)
			defer cancel()
			got, ok := ctx.Deadline()
			switch {
			case tc.want == 0 && ok:
				t.Fatalf("fetch deadline %s, want none", got.Sub(now))
			case tc.want != 0 && (!ok || !got.Equal(now.Add(tc.want))):
				t.Fatalf("fetch deadline %s (set: %v), want %s", got.Sub(now), ok, tc.want)
			}
		})
	}
}

// Each caller gets the error of its own key.
func TestPerKeyErrors(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	c := New(0, func(_ context.Context, keys []int) ([]int, []error) {
		started <- struct{}{}
		<-release
		vals := make([]int, len(keys))
		errs := make([]error, len(keys))
		for i, k := range keys {
			if k%2 == 1 {
				errs[i] = fmt.Errorf("odd %d", k)
			} else {
				vals[i] = k * 10
			}
		}
		return vals, errs
	})
	first := doAll(context.Background(), c, 0)
	<-started
	ch := doAll(context.Background(), c, keys(1, 20)...)
	waitFor(t, "calls queued", func() bool { return c.Queued() == 19 })
	close(release)
	got := collect(t, ch, 19)
	got[0] = collect(t, first, 1)[0]
	for k, r := range got {
		if k%2 == 1 && (r.err == nil || r.err.Error() != fmt.Sprintf("odd %d", k)) {
			t.Fatalf("Do(%d) err = %v, want its own", k, r.err)
		}
		if k%2 == 0 && (r.err != nil || r.val != k*10) {
			t.Fatalf("Do(%d) = %d, %v", k, r.val, r.err)
		}
	}
}

// A fetch that breaks its contract gives every caller an error instead of
// a panic or a value of another key.
func TestFetchWrongLength(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		vals int
		errs int // -1: nil
	}{{"few values", 1, -1}, {"few errors", 2, 1}, {"many values", 3, -1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{}, 10)
			release := make(chan struct{})
			c := New(0, func(_ context.Context, keys []int) ([]int, []error) {
				started <- struct{}{}
				<-release
				if len(keys) == 1 { // a right answer for the lone first call
					return []int{keys[0] * 10}, nil
				}
				var errs []error
				if tc.errs >= 0 {
					errs = make([]error, tc.errs)
				}
				return make([]int, tc.vals), errs
			})
			first := doAll(context.Background(), c, 1)
			<-started
			ch := doAll(context.Background(), c, 2, 3)
			waitFor(t, "calls queued", func() bool { return c.Queued() == 2 })
			close(release)
			if r := collect(t, first, 1)[1]; r.val != 10 || r.err != nil {
				t.Fatalf("Do(1) = %d, %v", r.val, r.err)
			}
			for k, r := range collect(t, ch, 2) {
				if r.err == nil || !strings.Contains(r.err.Error(), "for 2 keys") {
					t.Fatalf("Do(%d) = %d, %v; want the contract error", k, r.val, r.err)
				}
			}
		})
	}
}

// The lead ends when the queue is empty: a later lone call is fetched at
// once, alone.
func TestLeadEnds(t *testing.T) {
	t.Parallel()
	f := newFetcher()
	close(f.hold)
	c := New(3, f.fetch)
	for round := range 3 {
		for k, r := range collect(t, doAll(context.Background(), c, keys(0, 50)...), 50) {
			if r.val != k*10 || r.err != nil {
				t.Fatalf("round %d: Do(%d) = %d, %v", round, k, r.val, r.err)
			}
		}
		c.mu.Lock()
		leading, queued := c.leading, len(c.queue)
		c.mu.Unlock()
		if leading || queued != 0 {
			t.Fatalf("round %d: after every call returned, leading %v with %d queued", round, leading, queued)
		}
		n := len(f.seen())
		if v, err := c.Do(context.Background(), 99); v != 990 || err != nil {
			t.Fatalf("lone Do(99) = %d, %v", v, err)
		}
		if b := f.seen(); len(b) != n+1 || !slices.Equal(b[n], []int{99}) {
			t.Fatalf("lone call's fetch = %v, want [99]", b[n:])
		}
	}
}
