package timewheel

import (
	"context"
	"fmt"
	"github.com/gomsg/gomsg/internal/testutil"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testTick = 10 * time.Millisecond

// clock drives a wheel by hand and remembers how many ticks have passed, so
// callbacks can record the tick they fired on. Callbacks run on the goroutine
// that calls advance, so no locking is needed.
type clock struct {
	w   *Wheel
	now int
}

func (c *clock) advance(n int) {
	for range n {
		c.now++
		c.w.advance()
	}
}

func TestExpiryTick(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		slots    int
		before   int // ticks advanced before Add, so the cursor is not at 0
		d        time.Duration
		wantTick int // absolute tick the entry must fire on
	}{
		{name: "three ticks fires on third advance", slots: 8, d: 3 * testTick, wantTick: 3},
		{name: "rounded up to next tick", slots: 8, d: 2*testTick + 1, wantTick: 3},
		{name: "one tick", slots: 8, d: testTick, wantTick: 1},
		{name: "sub-tick", slots: 8, d: time.Nanosecond, wantTick: 1},
		{name: "zero fires at next tick", slots: 8, d: 0, wantTick: 1},
		{name: "negative fires at next tick", slots: 8, d: -time.Hour, wantTick: 1},
		{name: "one less than a turn", slots: 8, d: 7 * testTick, wantTick: 7},
		{name: "exactly one turn", slots: 8, d: 8 * testTick, wantTick: 8},
		{name: "one more than a turn", slots: 8, d: 9 * testTick, wantTick: 9},
		{name: "wrap-around by rounds", slots: 8, d: 20 * testTick, wantTick: 20},
		{name: "many rounds", slots: 8, d: 1000 * testTick, wantTick: 1000},
		{name: "single slot", slots: 1, d: 5 * testTick, wantTick: 5},
		{name: "cursor mid-wheel", slots: 8, before: 5, d: 3 * testTick, wantTick: 8},
		{name: "cursor mid-wheel wraps", slots: 8, before: 6, d: 20 * testTick, wantTick: 26},
		{name: "cursor after full turns", slots: 8, before: 17, d: 8 * testTick, wantTick: 25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &clock{w: New(testTick, tt.slots)}
			c.advance(tt.before)
			var fired []int
			c.w.Add(tt.d, func() { fired = append(fired, c.now) })

			c.advance(tt.wantTick - tt.before - 1)
			if len(fired) != 0 || c.w.Len() != 1 {
				t.Fatalf("at tick %d: fired at %v, Len %d; want not fired yet, Len 1", c.now, fired, c.w.Len())
			}
			c.advance(1)
			if !slices.Equal(fired, []int{tt.wantTick}) || c.w.Len() != 0 {
				t.Fatalf("at tick %d: fired at %v, Len %d; want fired at [%d], Len 0", c.now, fired, c.w.Len(), tt.wantTick)
			}
			c.advance(3 * tt.slots)
			if len(fired) != 1 {
				t.Fatalf("fired at %v; want exactly once", fired)
			}
		})
	}
}

func TestStopPreventsFiring(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		slots     int
		d         time.Duration
		stopAfter int // ticks advanced before Stop
		neighbors int // other entries in the same slot, which must still fire
	}{
		{name: "before any tick", slots: 8, d: 3 * testTick},
		{name: "one tick before due", slots: 8, d: 3 * testTick, stopAfter: 2},
		{name: "while counting rounds", slots: 8, d: 20 * testTick, stopAfter: 12},
		{name: "zero delay", slots: 8, d: 0},
		{name: "among neighbors in one slot", slots: 4, d: 3 * testTick, stopAfter: 1, neighbors: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &clock{w: New(testTick, tt.slots)}
			var stoppedRan, neighborsRan int
			for range tt.neighbors / 2 {
				c.w.Add(tt.d, func() { neighborsRan++ })
			}
			timer := c.w.Add(tt.d, func() { stoppedRan++ })
			for range tt.neighbors - tt.neighbors/2 {
				c.w.Add(tt.d, func() { neighborsRan++ })
			}
			c.advance(tt.stopAfter)

			if got := c.w.Len(); got != tt.neighbors+1 {
				t.Fatalf("Len before Stop = %d, want %d", got, tt.neighbors+1)
			}
			if !timer.Stop() {
				t.Fatal("Stop of a pending entry = false, want true")
			}
			if got := c.w.Len(); got != tt.neighbors {
				t.Fatalf("Len after Stop = %d, want %d", got, tt.neighbors)
			}
			if timer.Stop() {
				t.Fatal("second Stop = true, want false")
			}
			c.advance(4 * 20 * tt.slots)
			if stoppedRan != 0 {
				t.Fatalf("stopped entry ran %d times, want 0", stoppedRan)
			}
			if neighborsRan != tt.neighbors || c.w.Len() != 0 {
				t.Fatalf("neighbors ran %d times, Len %d; want %d, 0", neighborsRan, c.w.Len(), tt.neighbors)
			}
		})
	}
}

func TestStopAfterFire(t *testing.T) {
	t.Parallel()
	c := &clock{w: New(testTick, 8)}
	ran := 0
	timer := c.w.Add(testTick, func() { ran++ })
	c.advance(1)
	if ran != 1 {
		t.Fatalf("ran %d times, want 1", ran)
	}
	if timer.Stop() {
		t.Fatal("Stop after fire = true, want false")
	}
	if got := c.w.Len(); got != 0 {
		t.Fatalf("Len = %d, want 0", got)
	}
	if (*Timer)(nil).Stop() {
		t.Fatal("Stop of a nil Timer = true, want false")
	}
}

// TestManyInOneSlot puts entries due at ticks 3, 11 and 19 of an 8-slot wheel
// in the same slot, stops some from the middle of the list, and checks that
// each tick fires exactly its own entries, in the order they were added.
func TestManyInOneSlot(t *testing.T) {
	t.Parallel()
	const slots, perTick = 8, 1000
	dueTicks := []int{3, 11, 19}
	c := &clock{w: New(testTick, slots)}

	type key struct{ tick, i int }
	var fired []key
	var firedAt []int
	want := map[int][]key{}
	for i := range perTick {
		for _, due := range dueTicks { // interleave the rounds in the list
			k := key{due, i}
			timer := c.w.Add(time.Duration(due)*testTick, func() {
				fired = append(fired, k)
				firedAt = append(firedAt, c.now)
			})
			if i%3 == 1 {
				if !timer.Stop() {
					t.Fatalf("Stop %v = false, want true", k)
				}
				continue
			}
			want[due] = append(want[due], k)
		}
	}
	total := 0
	for _, due := range dueTicks {
		total += len(want[due])
	}
	if got := c.w.Len(); got != total {
		t.Fatalf("Len = %d, want %d", got, total)
	}

	for _, due := range dueTicks {
		fired, firedAt = nil, nil
		c.advance(due - c.now)
		if !slices.Equal(fired, want[due]) {
			t.Fatalf("tick %d fired %d entries %v..., want %d entries %v...",
				due, len(fired), fired[:min(3, len(fired))], len(want[due]), want[due][:3])
		}
		for _, at := range firedAt {
			if at != due {
				t.Fatalf("entry due at tick %d fired at tick %d", due, at)
			}
		}
		total -= len(want[due])
		if got := c.w.Len(); got != total {
			t.Fatalf("after tick %d Len = %d, want %d", due, got, total)
		}
	}
}

func TestCallbackMayAddAndStop(t *testing.T) {
	t.Parallel()
	c := &clock{w: New(testTick, 4)}
	firedAt := map[string]int{}
	record := func(name string) func() { return func() { firedAt[name] = c.now } }

	var sibling, later *Timer
	var siblingStop, laterStop bool
	c.w.Add(2*testTick, func() {
		firedAt["parent"] = c.now
		// Due at the same tick and already collected: too late to stop.
		siblingStop = sibling.Stop()
		// Still pending: stopped for good.
		laterStop = later.Stop()
		c.w.Add(0, record("child-now"))
		c.w.Add(2*testTick, record("child-two"))
		c.w.Add(10*testTick, record("child-rounds"))
	})
	sibling = c.w.Add(2*testTick, record("sibling"))
	later = c.w.Add(5*testTick, record("later"))

	c.advance(20)
	want := map[string]int{
		"parent":       2,
		"sibling":      2,
		"child-now":    3, // not in the advance that ran the parent
		"child-two":    4,
		"child-rounds": 12,
	}
	if fmt.Sprint(firedAt) != fmt.Sprint(want) {
		t.Fatalf("fired at %v, want %v", firedAt, want)
	}
	if siblingStop || !laterStop {
		t.Fatalf("Stop from callback: sibling %v, later %v; want false, true", siblingStop, laterStop)
	}
	if got := c.w.Len(); got != 0 {
		t.Fatalf("Len = %d, want 0", got)
	}
}

// TestConcurrentAddStop runs the wheel on a real 1ms ticker while many
// goroutines add entries and others stop half of them, some racing with the
// entry falling due. Every entry must end either stopped (Stop returned true)
// and never run, or run exactly once with Stop returning false.
func TestConcurrentAddStop(t *testing.T) {
	t.Parallel()
	const adders, perAdder, stoppers = 16, 500, 4
	w := New(time.Millisecond, 32)
	runCtx(t, w)

	type entry struct {
		timer   *Timer
		runs    atomic.Int32
		stopped atomic.Bool // Stop was called and returned true
		tried   atomic.Bool // Stop was called
	}
	entries := make([]entry, adders*perAdder)
	toStop := make(chan int, 64)

	var stopWG sync.WaitGroup
	for range stoppers {
		stopWG.Go(func() {
			for i := range toStop {
				e := &entries[i]
				e.tried.Store(true)
				e.stopped.Store(e.timer.Stop())
			}
		})
	}
	var addWG sync.WaitGroup
	for a := range adders {
		addWG.Go(func() {
			r := rand.New(rand.NewPCG(uint64(a), 1))
			for j := range perAdder {
				i := a*perAdder + j
				e := &entries[i]
				d := time.Duration(r.IntN(20)) * time.Millisecond
				if j%4 == 0 {
					d = 0 // due at the next tick: Stop races with firing
				}
				e.timer = w.Add(d, func() { e.runs.Add(1) })
				if j%2 == 0 {
					toStop <- i
				}
			}
		})
	}
	addWG.Wait()
	close(toStop)
	stopWG.Wait()

	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := w.Len(); n != 0 {
			return fmt.Errorf("%d entries outstanding", n)
		}
		for i := range entries {
			e := &entries[i]
			if !e.stopped.Load() && e.runs.Load() == 0 {
				return fmt.Errorf("entry %d not stopped and not run", i)
			}
		}
		return nil
	})
	// Nothing is outstanding, so nothing can run from here on.
	stoppedCount := 0
	for i := range entries {
		e := &entries[i]
		runs, stopped := e.runs.Load(), e.stopped.Load()
		switch {
		case stopped && runs != 0:
			t.Errorf("entry %d: Stop returned true but it ran %d times", i, runs)
		case !stopped && runs != 1:
			t.Errorf("entry %d: ran %d times, want exactly 1 (Stop tried: %v)", i, runs, e.tried.Load())
		}
		if stopped {
			stoppedCount++
		}
	}
	if stoppedCount == 0 {
		t.Error("no Stop succeeded; the test exercised nothing")
	}
	t.Logf("%d entries, %d stopped before firing", len(entries), stoppedCount)
}

func TestRunExitsOnCancel(t *testing.T) {
	t.Parallel()
	w := New(time.Millisecond, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()

	fired := make(chan struct{})
	w.Add(2*time.Millisecond, func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("entry did not fire while Run was running")
	}
	assertPanics(t, "second concurrent Run", func() { w.Run(ctx) })

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx was cancelled")
	}
}

// Run never fires an entry early: one due in n ticks fires no sooner than n
// ticks after Run started (it may fire late on a loaded machine). Entries
// added before Run make that start known: it is after t0.
func TestRunNeverFiresEarly(t *testing.T) {
	t.Parallel()
	const tick = 50 * time.Millisecond
	w := New(tick, 4)
	type firing struct {
		n  int
		at time.Time
	}
	fired := make(chan firing, 8)
	ns := []int{2, 3, 5, 7, 9}
	for _, n := range ns {
		w.Add(time.Duration(n)*tick, func() { fired <- firing{n, time.Now()} })
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	defer func() { cancel(); <-ran }()
	t0 := time.Now()
	go func() {
		defer close(ran)
		w.Run(ctx)
	}()
	for range ns {
		select {
		case f := <-fired:
			if got := f.at.Sub(t0); got < time.Duration(f.n)*tick {
				t.Errorf("entry due in %d ticks (%s) fired after %s", f.n, time.Duration(f.n)*tick, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("entries did not fire")
		}
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		tick  time.Duration
		slots int
	}{
		{"zero tick", 0, 8},
		{"negative tick", -time.Second, 8},
		{"zero slots", time.Second, 0},
		{"negative slots", time.Second, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			assertPanics(t, "New", func() { New(tt.tick, tt.slots) })
		})
	}
	assertPanics(t, "Add(nil)", func() { New(time.Second, 8).Add(time.Second, nil) })
}

// TestMemoryPerEntry checks that 100,000 outstanding entries cost a small,
// bounded amount of heap each and no goroutines. It does not call t.Parallel
// so that no other test allocates while it measures.
func TestMemoryPerEntry(t *testing.T) {
	const entries = 100_000
	goroutines := runtime.NumGoroutine()
	perEntry, w := heapPerEntry(entries)
	if got := w.Len(); got != entries {
		t.Fatalf("Len = %d, want %d", got, entries)
	}
	if got := runtime.NumGoroutine(); got > goroutines {
		t.Fatalf("goroutines grew from %d to %d while adding %d entries", goroutines, got, entries)
	}
	t.Logf("%.1f bytes per outstanding entry", perEntry)
	if perEntry > 100 {
		t.Fatalf("%.1f bytes per outstanding entry, want at most 100", perEntry)
	}
}

// heapPerEntry adds n entries with spread deadlines and one shared callback
// (so only the wheel's own cost is counted) and returns the live heap growth
// per entry.
func heapPerEntry(n int) (float64, *Wheel) {
	fn := func() {}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := New(time.Second, 512)
	for i := range n {
		w.Add(time.Duration(i%3600)*time.Second, fn)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(w)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n), w
}

// runCtx runs w until the test ends and waits for Run to return.
func runCtx(tb testing.TB, w *Wheel) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitFor polls cond until it returns nil or the timeout passes.
func assertPanics(tb testing.TB, what string, f func()) {
	tb.Helper()
	defer func() {
		if recover() == nil {
			tb.Errorf("%s did not panic", what)
		}
	}()
	f()
}

// advance keeps its callback buffer between ticks (no allocation per tick)
// but not one grown past maxKeptDue by a burst, which would pin its memory.
func TestDueBufferKeptButBounded(t *testing.T) {
	t.Parallel()
	w := New(testTick, 8)
	fire := func(n int) {
		ran := 0
		for range n {
			w.Add(testTick, func() { ran++ })
		}
		w.advance()
		if ran != n {
			t.Fatalf("%d of %d callbacks ran", ran, n)
		}
	}
	fire(100)
	if c := cap(w.due); c < 100 {
		t.Fatalf("buffer of capacity %d kept after 100 callbacks, want at least 100", c)
	}
	fire(3 * maxKeptDue)
	if c := cap(w.due); c > maxKeptDue {
		t.Fatalf("buffer of capacity %d kept after a burst of %d, want at most %d", c, 3*maxKeptDue, maxKeptDue)
	}
}
