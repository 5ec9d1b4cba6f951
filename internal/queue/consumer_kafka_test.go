package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/testutil"
)

func TestConsumerHandlesEveryRecordOncePerKeyInOrder(t *testing.T) {
	t.Parallel()
	const keys, perKey = 200, 10
	brokers := startBroker(t, 8)
	p := newTestProducer(t, brokers)
	recs := sequenced(keys, perKey)
	for i := 0; i < len(recs); i += 500 {
		publish(t, p, recs[i:i+500])
	}

	seen := newSeqRecorder()
	stop := startConsumer(t, ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic, Workers: 16},
		func(_ context.Context, m Message) error {
			seen.add(m.Key, parseSeq(t, m))
			return nil
		})
	seen.waitCount(t, keys*perKey, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	seen.checkExactlyInOrder(t, keys, perKey)
}

// One key's first message is held (a client that never ACKs) until every
// message of every other key was handled, with fewer workers than keys: that
// can only finish if a blocked key holds one worker and nothing else, and
// the held key's later messages must still wait for it.
func TestConsumerBlockedKeyDoesNotStopOtherKeys(t *testing.T) {
	t.Parallel()
	const keys, perKey, workers = 40, 10, 4
	brokers := startBroker(t, 4)
	publish(t, newTestProducer(t, brokers), sequenced(keys, perKey))

	const slowKey = "uid-0"
	others := (keys - 1) * perKey
	var othersHandled atomic.Int64
	othersDone := make(chan struct{})
	var heldUntilOthersDone atomic.Bool
	seen := newSeqRecorder()
	startConsumer(t, ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic, Workers: workers},
		func(ctx context.Context, m Message) error {
			seq := parseSeq(t, m)
			if m.Key == slowKey && seq == 0 {
				select {
				case <-othersDone:
					heldUntilOthersDone.Store(true)
				case <-time.After(20 * time.Second):
				}
			}
			seen.add(m.Key, seq)
			if m.Key != slowKey && othersHandled.Add(1) == int64(others) {
				close(othersDone)
			}
			return nil
		})
	seen.waitCount(t, keys*perKey, 40*time.Second)
	if !heldUntilOthersDone.Load() {
		t.Error("other keys did not finish while one key was held: a blocked key stops others")
	}
	seen.checkExactlyInOrder(t, keys, perKey)
}

// One message fails until every message of the other keys was handled.
func TestConsumerRetriesFailingMessageWithoutBlockingOtherKeys(t *testing.T) {
	t.Parallel()
	const keys, perKey, workers = 40, 10, 4
	brokers := startBroker(t, 4)
	publish(t, newTestProducer(t, brokers), sequenced(keys, perKey))

	const badKey, badSeq, minFailures = "uid-7", 3, 3
	others := (keys - 1) * perKey
	var attempts, othersHandled atomic.Int64
	othersDone := make(chan struct{})
	seen := newSeqRecorder()
	startConsumer(t, ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic, Workers: workers,
		RetryBackoffMin: time.Millisecond, RetryBackoffMax: 20 * time.Millisecond},
		func(ctx context.Context, m Message) error {
			seq := parseSeq(t, m)
			if m.Key == badKey && seq == badSeq {
				n := attempts.Add(1)
				select {
				case <-othersDone:
					if n > minFailures {
						break
					}
					return fmt.Errorf("attempt %d fails", n)
				default:
					return fmt.Errorf("attempt %d fails", n)
				}
			}
			seen.add(m.Key, seq)
			if m.Key != badKey && othersHandled.Add(1) == int64(others) {
				close(othersDone)
			}
			return nil
		})
	seen.waitCount(t, keys*perKey, 40*time.Second)
	if n := attempts.Load(); n <= minFailures {
		t.Errorf("failing message was attempted %d times, want more than %d", n, minFailures)
	}
	seen.checkExactlyInOrder(t, keys, perKey)
}

// A consumer handles exactly half of the records and stops; a second member
// of the same group must get the rest and not start again from the beginning.
func TestConsumerCommitsAndAnotherMemberResumes(t *testing.T) {
	t.Parallel()
	const records, firstHandles, partitions, workers, queueSize = 1000, 500, 4, 8, 8
	brokers := startBroker(t, partitions)
	recs := make([]Record, records)
	for i := range recs {
		recs[i] = Record{Topic: testTopic, Key: "uid-" + strconv.Itoa(i%50), Value: []byte(strconv.Itoa(i))}
	}
	publish(t, newTestProducer(t, brokers), recs)
	cfg := ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic, Workers: workers, QueueSize: queueSize}

	var mu sync.Mutex
	first, second := map[string]int{}, map[string]int{}
	ctx1, stopFirstHandler := context.WithCancel(context.Background())
	defer stopFirstHandler()
	stop1 := startConsumer(t, cfg, func(_ context.Context, m Message) error {
		mu.Lock()
		if len(first) >= firstHandles {
			mu.Unlock()
			<-ctx1.Done() // not done: must stay uncommitted
			return ctx1.Err()
		}
		first[string(m.Value)]++
		mu.Unlock()
		return nil
	})
	waitFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(first) < firstHandles {
			return testutil.Errorf("first consumer handled %d", len(first))
		}
		return nil
	})
	stopFirstHandler()
	if err := stop1(); err != nil {
		t.Fatalf("first Run: %v", err)
	}

	stop2 := startConsumer(t, cfg, func(_ context.Context, m Message) error {
		mu.Lock()
		defer mu.Unlock()
		second[string(m.Value)]++
		return nil
	})
	waitFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		missing := 0
		for _, r := range recs {
			if first[string(r.Value)] == 0 && second[string(r.Value)] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return testutil.Errorf("%d records not handled by either consumer", missing)
		}
		return nil
	})
	if err := stop2(); err != nil {
		t.Fatalf("second Run: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for v, n := range second {
		if n > 1 {
			t.Errorf("second consumer handled %s %d times", v, n)
		}
		if first[v] > 0 {
			twice++
		}
	}
	// Only what was fetched but not finished when the first consumer stopped
	// (at most queueSize per partition) can hold back its commits.
	if bound := partitions * queueSize; twice > bound {
		t.Errorf("%d records handled by both consumers, want at most %d: committed offsets not honoured", twice, bound)
	}
	if len(first) != firstHandles || len(first)+len(second)-twice != records {
		t.Errorf("first handled %d, second %d, both %d; want %d and all %d", len(first), len(second), twice, firstHandles, records)
	}
	t.Logf("first handled %d, second %d, both %d", len(first), len(second), twice)
}

// Two members of one group share the partitions; records published while the
// group rebalances are all handled.
func TestConsumerGroupRebalanceLosesNothing(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 8)
	p := newTestProducer(t, brokers)
	cfg := ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic, Workers: 8,
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second}

	var mu sync.Mutex
	handled := map[string]map[int]bool{"a": {}, "b": {}}
	handler := func(member string) Handler {
		return func(_ context.Context, m Message) error {
			n, err := strconv.Atoi(string(m.Value))
			if err != nil {
				return errors.New("bad value")
			}
			mu.Lock()
			defer mu.Unlock()
			handled[member][n] = true
			return nil
		}
	}
	startConsumer(t, cfg, handler("a"))
	startConsumer(t, cfg, handler("b"))

	// Keep publishing until both members have handled records, so some are
	// published across the rebalance.
	published := 0
	waitFor(t, 30*time.Second, func() error {
		recs := make([]Record, 40)
		for i := range recs {
			recs[i] = Record{Topic: testTopic, Key: "uid-" + strconv.Itoa(i), Value: []byte(strconv.Itoa(published))}
			published++
		}
		publish(t, p, recs)
		mu.Lock()
		defer mu.Unlock()
		if len(handled["a"]) == 0 || len(handled["b"]) == 0 {
			return testutil.Errorf("handled by a: %d, by b: %d", len(handled["a"]), len(handled["b"]))
		}
		return nil
	})
	waitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for i := range published {
			if !handled["a"][i] && !handled["b"][i] {
				return testutil.Errorf("record %d of %d not handled", i, published)
			}
		}
		return nil
	})
}

// runInBackground runs a consumer in the background; the returned wait
// returns Run's error once ctx is cancelled.
func runInBackground(t *testing.T, ctx context.Context, cfg ConsumerConfig, h Handler) (wait func() error) {
	t.Helper()
	done := make(chan error, 1)
	c := NewConsumer(cfg, h, zaptest.NewLogger(t))
	go func() { done <- runChecked(t, ctx, c) }()
	return func() error {
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("Run did not return within 30s")
		}
	}
}

// values collects the values a handler saw.
type values struct {
	mu  sync.Mutex
	got []string
}

func (v *values) add(m Message) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.got = append(v.got, string(m.Value))
}

func (v *values) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.got)
}

func TestConsumerStopLetsRunningHandlerFinishAndCommitsIt(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	p := newTestProducer(t, brokers)
	cfg := ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic}
	publish(t, p, []Record{{Topic: testTopic, Key: "k", Value: []byte("first")}})

	started, release := make(chan struct{}), make(chan struct{})
	var first values
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := runInBackground(t, ctx, cfg, func(hctx context.Context, m Message) error {
		close(started)
		<-release
		if err := hctx.Err(); err != nil {
			return err
		}
		first.add(m)
		return nil
	})
	await(t, started, 20*time.Second, "the handler to start")
	cancel() // shutdown begins while the handler runs
	close(release)
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := first.list(); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("first consumer handled %v, want [first]", got)
	}

	// Same key, same partition: a second member sees "second" only after
	// "first", unless "first" was committed at shutdown.
	publish(t, p, []Record{{Topic: testTopic, Key: "k", Value: []byte("second")}})
	var second values
	startConsumer(t, cfg, func(_ context.Context, m Message) error {
		second.add(m)
		return nil
	})
	waitFor(t, 20*time.Second, func() error {
		if len(second.list()) == 0 {
			return testutil.Errorf("second consumer handled nothing")
		}
		return nil
	})
	if got := second.list(); !slices.Equal(got, []string{"second"}) {
		t.Errorf("second consumer handled %v, want [second]: the finished message was not committed", got)
	}
}

func TestConsumerStopCancelsHandlersAfterDrainTimeout(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	publish(t, newTestProducer(t, brokers), []Record{{Topic: testTopic, Key: "k", Value: []byte("stuck")}})
	cfg := ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic, DrainTimeout: 200 * time.Millisecond}

	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := runInBackground(t, ctx, cfg, func(hctx context.Context, m Message) error {
		close(started)
		<-hctx.Done() // never finishes on its own
		return hctx.Err()
	})
	await(t, started, 20*time.Second, "the handler to start")
	stopAt := time.Now()
	cancel()
	if err := wait(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(stopAt); took > 3*time.Second {
		t.Errorf("Run took %s to stop, want about the 200ms drain timeout", took)
	}

	// Not finished, so not committed: the next member gets it again.
	var second values
	startConsumer(t, cfg, func(_ context.Context, m Message) error {
		second.add(m)
		return nil
	})
	waitFor(t, 20*time.Second, func() error {
		if got := second.list(); !slices.Equal(got, []string{"stuck"}) {
			return testutil.Errorf("second consumer handled %v, want [stuck]", got)
		}
		return nil
	})
}
