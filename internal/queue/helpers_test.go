package queue

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/testutil"
)

const testTopic = "tasks"

// TestMain runs up to 8 parallel tests at once unless -parallel says
// otherwise: most of this package's test time is spent waiting on the
// group's timers (heartbeats, sessions, drains) and on brokers refusing
// credentials, not on the CPU, and with the default of GOMAXPROCS slots
// those waits queue up behind each other on a small machine.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", "8"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}

// startBroker runs an in-process broker with testTopic of partitions
// partitions and returns its bootstrap address.
func startBroker(tb testing.TB, partitions int) []string {
	tb.Helper()
	return []string{testutil.StartKafka(tb, partitions, testTopic)}
}

func newTestProducer(tb testing.TB, brokers []string) *Producer {
	tb.Helper()
	p := NewProducer(ProducerConfig{Brokers: brokers}, zaptest.NewLogger(tb))
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// sequenced returns keys*perKey records; the value of each is "key/seq",
// with seq counting up per key, interleaved across keys as published.
func sequenced(keys, perKey int) []Record {
	recs := make([]Record, 0, keys*perKey)
	for seq := range perKey {
		for k := range keys {
			key := "uid-" + strconv.Itoa(k)
			recs = append(recs, Record{Topic: testTopic, Key: key, Value: fmt.Appendf(nil, "%s/%d", key, seq)})
		}
	}
	return recs
}

func parseSeq(tb testing.TB, m Message) int {
	tb.Helper()
	key, seq, ok := strings.Cut(string(m.Value), "/")
	if !ok || key != m.Key {
		tb.Errorf("message value %q does not match key %q", m.Value, m.Key)
		return -1
	}
	n, err := strconv.Atoi(seq)
	if err != nil {
		tb.Errorf("message value %q: %v", m.Value, err)
	}
	return n
}

func publish(tb testing.TB, p *Producer, recs []Record) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Publish(ctx, recs...); err != nil {
		tb.Fatalf("publish %d records: %v", len(recs), err)
	}
}

// startConsumer runs a consumer until the returned stop is called (or the
// test ends) and returns stop, which waits for Run and returns its error.
func startConsumer(tb testing.TB, cfg ConsumerConfig, h Handler) (stop func() error) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := NewConsumer(cfg, h, zaptest.NewLogger(tb))
	done := make(chan error, 1)
	go func() { done <- runChecked(tb, ctx, c) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = fmt.Errorf("consumer did not stop within 30s")
			}
		})
		return err
	}
	tb.Cleanup(func() { _ = stop() })
	return stop
}

// seqRecorder records, per key, the sequence numbers handled, in order.
type seqRecorder struct {
	mu    sync.Mutex
	byKey map[string][]int
	total int
}

func newSeqRecorder() *seqRecorder { return &seqRecorder{byKey: make(map[string][]int)} }

// handler is a consumer handler recording each record's key and seq.
func (r *seqRecorder) handler(tb testing.TB) Handler {
	return func(_ context.Context, m Message) error {
		r.add(m.Key, parseSeq(tb, m))
		return nil
	}
}

func (r *seqRecorder) add(key string, seq int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byKey[key] = append(r.byKey[key], seq)
	r.total++
	return r.total
}

func (r *seqRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// waitCount waits until n messages were recorded.
func (r *seqRecorder) waitCount(tb testing.TB, n int, timeout time.Duration) {
	tb.Helper()
	waitFor(tb, timeout, func() error {
		if got := r.count(); got < n {
			return testutil.Errorf("handled %d of %d messages", got, n)
		}
		return nil
	})
}

// checkExactlyInOrder asserts every key in keys saw 0..perKey-1 once each,
// in order, and nothing else was recorded.
func (r *seqRecorder) checkExactlyInOrder(tb testing.TB, keys, perKey int) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total != keys*perKey {
		tb.Errorf("handled %d messages, want exactly %d", r.total, keys*perKey)
	}
	if len(r.byKey) != keys {
		tb.Errorf("handled messages of %d keys, want %d", len(r.byKey), keys)
	}
	for key, seqs := range r.byKey {
		if len(seqs) != perKey {
			tb.Errorf("key %s: handled %d messages, want %d: %v", key, len(seqs), perKey, seqs)
			continue
		}
		for i, s := range seqs {
			if s != i {
				tb.Errorf("key %s: handled out of order or duplicated: %v", key, seqs)
				break
			}
		}
	}
}

// await waits until ch yields or is closed and fails the test after timeout
// (a consumer that never gets there fails the test instead of hanging it),
// or at once when the test already failed.
func await[T any](tb testing.TB, ch <-chan T, timeout time.Duration, what string) {
	tb.Helper()
	deadline := time.After(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ch:
			return
		case <-deadline:
			tb.Fatalf("%s: not within %s", what, timeout)
		case <-tick.C:
			if tb.Failed() { // e.g. a Run that returned early
				tb.FailNow()
			}
		}
	}
}

// runChecked runs c until ctx is done and fails the test if Run returns
// before that: Run returns only once it is stopped.
func runChecked(tb testing.TB, ctx context.Context, c *Consumer) error {
	err := c.Run(ctx)
	if ctx.Err() == nil {
		tb.Errorf("Run returned before it was stopped: %v", err)
	}
	return err
}

// runUntilCleanup runs c (runChecked) until the test ends.
func runUntilCleanup(tb testing.TB, c *Consumer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runChecked(tb, ctx, c) }()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitFor is testutil.WaitFor that gives up at once when the test already
// failed (a Run that returned early, a handler that saw a bad record)
// rather than waiting out its deadline.
func waitFor(tb testing.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	testutil.WaitFor(tb, timeout, func() error {
		if tb.Failed() {
			tb.FailNow()
		}
		return cond()
	})
}
