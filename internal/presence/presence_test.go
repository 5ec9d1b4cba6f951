package presence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/pb/presencepb"
)

// flaky is a Publisher that refuses writes while down, and records the
// records it accepted, in order.
type flaky struct {
	mu    sync.Mutex
	down  bool
	calls int
	got   []queue.Record
}

func (f *flaky) Publish(_ context.Context, recs ...queue.Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return fmt.Errorf("%w: broker down", queue.ErrUnavailable)
	}
	f.got = append(f.got, recs...)
	return nil
}

func (f *flaky) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

func (f *flaky) sids(t *testing.T) []string {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.got))
	for i, r := range f.got {
		var ev presencepb.Event
		if err := proto.Unmarshal(r.Value, &ev); err != nil {
			t.Fatal(err)
		}
		if r.Key != ev.GetUid() || r.Topic != "presence" {
			t.Fatalf("record %d keyed %q on %q, want keyed by its uid %q on presence", i, r.Key, r.Topic, ev.GetUid())
		}
		out[i] = ev.GetSid()
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func event(uid, sid string) *presencepb.Event {
	return &presencepb.Event{Uid: uid, Sid: sid, Kind: presencepb.Kind_CONNECTED}
}

func run(t *testing.T, e *Emitter) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx)
	}()
	return func() { cancel(); <-done }
}

// While Kafka refuses writes the events wait; once it takes them again they
// are all written, in the order they were emitted, none twice; past the
// buffer's bound the newest are dropped and counted.
func TestEmitterKeepsOrderThroughOutageAndCountsOverflow(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	pub := &flaky{down: true}
	e := New(Config{Topic: "presence", Buffer: 10, Batch: 3, Retry: backoff.Policy{Min: time.Millisecond, Max: 5 * time.Millisecond}},
		pub, zaptest.NewLogger(t), m)
	stop := run(t, e)
	defer stop()
	for i := range 12 {
		e.Emit(event("u", fmt.Sprint(i)))
	}
	waitFor(t, "retries while Kafka is down", func() bool {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		return pub.calls >= 3
	})
	if got := testutil.ToFloat64(m.PresenceDropped.WithLabelValues("overflow")); got != 2 {
		t.Fatalf("dropped overflow = %v, want 2 (12 emitted into a buffer of 10)", got)
	}
	pub.setDown(false)
	waitFor(t, "the buffer to drain", func() bool { return e.Len() == 0 })
	want := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}
	if got := pub.sids(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("written %v, want %v (in emit order, each once)", got, want)
	}
	if got := testutil.ToFloat64(m.PresenceEvents.WithLabelValues("connected")); got != 10 {
		t.Fatalf("events written = %v, want 10", got)
	}
}

// What is still buffered when Run stops (Kafka down past the flush grace)
// is dropped and counted as shutdown.
func TestEmitterCountsWhatShutdownLeaves(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	pub := &flaky{down: true}
	e := New(Config{Topic: "presence", FlushGrace: 50 * time.Millisecond, Retry: backoff.Policy{Min: time.Millisecond, Max: time.Millisecond}},
		pub, zaptest.NewLogger(t), m)
	stop := run(t, e)
	e.Emit(event("u", "1"), event("u", "2"))
	stop()
	if got := testutil.ToFloat64(m.PresenceDropped.WithLabelValues("shutdown")); got != 2 {
		t.Fatalf("dropped at shutdown = %v, want 2", got)
	}
	if e.Len() != 0 {
		t.Fatalf("%d events left buffered after Run returned", e.Len())
	}
}

// An empty topic is presence off: a nil emitter whose Lock and Emit do
// nothing.
func TestNilEmitterIsOff(t *testing.T) {
	t.Parallel()
	e := New(Config{}, &flaky{}, zaptest.NewLogger(t), metrics.New())
	if e != nil {
		t.Fatal("New with no topic returned an emitter")
	}
	unlock, err := e.Lock(context.Background(), "u")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	e.Emit(event("u", "1"))
}

// Lock excludes callers of the same uid, not of others, gives up when its
// context ends, and forgets a uid once nobody holds or waits for it.
func TestLock(t *testing.T) {
	t.Parallel()
	e := New(Config{Topic: "presence"}, &flaky{}, zaptest.NewLogger(t), metrics.New())
	ctx := context.Background()
	unlockA, err := e.Lock(ctx, "a", "b", "a")
	if err != nil {
		t.Fatal(err)
	}
	// Another uid is free.
	unlockC, err := e.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	unlockC()
	// The same uid waits, and gives up with its context.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := e.Lock(short, "c", "b"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held uid = %v, want DeadlineExceeded", err)
	}
	// c, taken by the call that gave up, was released.
	unlockC, err = e.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	unlockC()
	got := make(chan struct{})
	go func() {
		unlock, err := e.Lock(ctx, "b")
		if err == nil {
			unlock()
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("Lock of b returned while b was held")
	case <-time.After(20 * time.Millisecond):
	}
	unlockA()
	<-got
	e.locksMu.Lock()
	defer e.locksMu.Unlock()
	if len(e.locks) != 0 {
		t.Fatalf("%d lock entries left after every holder released", len(e.locks))
	}
}

// Many goroutines incrementing a counter per uid under Lock lose no
// increment (go test -race also checks the lock orders them).
func TestLockExcludes(t *testing.T) {
	t.Parallel()
	e := New(Config{Topic: "presence"}, &flaky{}, zaptest.NewLogger(t), metrics.New())
	counts := map[string]int{}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uids := []string{"x", fmt.Sprint("y", i%3)}
			for range 100 {
				unlock, err := e.Lock(context.Background(), uids...)
				if err != nil {
					t.Error(err)
					return
				}
				for _, u := range uids {
					counts[u]++
				}
				unlock()
			}
		}()
	}
	wg.Wait()
	if counts["x"] != 5000 {
		t.Fatalf("x counted %d times, want 5000", counts["x"])
	}
}
