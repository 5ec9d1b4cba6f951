package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// TestReleasedHandlersGiveTheirWorkerBack: ten keys' first records wait (a
// client that does not ACK) after Release, with two workers and at most six
// released handlers. Six wait released and two more hold the workers: eight
// at once, not two (no Release) and not ten (no bound). Once they return,
// every record is handled once and in order per key (a key's next record
// never started while its released handler waited), and the workers that
// took the released ones' places are all there is again, beside at most
// as many parked spares. Released handlers whose turn came after others
// finished take a parked spare's place rather than a new goroutine's.
func TestReleasedHandlersGiveTheirWorkerBack(t *testing.T) {
	t.Parallel()
	const keys, perKey, workers, maxReleased, stuck = 12, 3, 2, 6, 10
	brokers := startBroker(t, 4)
	publish(t, newTestProducer(t, brokers), sequenced(keys, perKey))

	var waiting, most atomic.Int64
	letGo := make(chan struct{})
	seen := newSeqRecorder()
	c := NewConsumer(ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic, Workers: workers, MaxReleased: maxReleased},
		func(ctx context.Context, m Message) error {
			seq := parseSeq(t, m)
			var k int
			if _, err := fmt.Sscanf(m.Key, "uid-%d", &k); err != nil {
				t.Errorf("key %q: %v", m.Key, err)
			}
			if seq == 1 {
				Release(ctx) // once seq 0's released handler finished: it may find a spare
			}
			if seq == 0 && k < stuck {
				Release(ctx)
				Release(ctx) // a second call changes nothing
				peak(&most, waiting.Add(1))
				select {
				case <-letGo:
				case <-time.After(30 * time.Second):
					t.Error("held handler never let go")
				}
				waiting.Add(-1)
			}
			seen.add(m.Key, seq)
			return nil
		}, zaptest.NewLogger(t))
	runUntilCleanup(t, c)

	waitFor(t, 20*time.Second, func() error {
		if n := waiting.Load(); n != maxReleased+workers {
			return fmt.Errorf("%d handlers waiting, want %d", n, maxReleased+workers)
		}
		return nil
	})
	close(letGo)
	seen.waitCount(t, keys*perKey, 30*time.Second)
	seen.checkExactlyInOrder(t, keys, perKey)
	if p := most.Load(); p != maxReleased+workers {
		t.Errorf("at most %d handlers waited at once, want %d (workers %d + released %d)", p, maxReleased+workers, workers, maxReleased)
	}
	waitFor(t, 10*time.Second, func() error {
		c.pool.mu.Lock()
		defer c.pool.mu.Unlock()
		if c.pool.released != 0 || c.pool.live-c.pool.spares != workers || c.pool.spares < 1 || c.pool.spares > workers {
			return fmt.Errorf("%d workers running (%d of them parked spares) and %d handlers released after all returned, want %d serving, 1 to %d spares and 0",
				c.pool.live, c.pool.spares, c.pool.released, workers, workers)
		}
		return nil
	})
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	if c.pool.fresh >= c.pool.handedBack {
		t.Errorf("%d workers started for %d releases: no release took a parked spare", c.pool.fresh, c.pool.handedBack)
	}
}

// TestResumedHandlersAreBounded: eight keys' first records wait released
// (two workers, at most eight released), then all end their wait at once, as
// deliveries do when a boat's stream ends, and call Resume: at most two (the
// bound) go on at once, the other six wait in Resume. Records of four more
// keys, published only then, are handled meanwhile, though their handlers
// call Resume too: having released nothing, they take no place. Once the two
// let go, the rest go on, two at a time, and every record is handled once,
// in order per key; OnResumeWait counted the six that waited.
func TestResumedHandlersAreBounded(t *testing.T) {
	t.Parallel()
	const keys, perKey, workers, stuck, maxResumed = 12, 3, 2, 8, 2
	brokers := startBroker(t, 4)
	prod := newTestProducer(t, brokers)
	publish(t, prod, sequenced(stuck, perKey))

	var released, asking, inside, most, waits atomic.Int64
	letGo, proceed := make(chan struct{}), make(chan struct{})
	seen := newSeqRecorder()
	c := NewConsumer(ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic, Workers: workers,
		MaxReleased: stuck, MaxResumed: maxResumed, OnResumeWait: func() { waits.Add(1) }},
		func(ctx context.Context, m Message) error {
			seq := parseSeq(t, m)
			var k int
			if _, err := fmt.Sscanf(m.Key, "uid-%d", &k); err != nil {
				t.Errorf("key %q: %v", m.Key, err)
			}
			if seq != 0 || k >= stuck {
				Resume(ctx) // not released: goes straight on
				seen.add(m.Key, seq)
				return nil
			}
			Release(ctx)
			released.Add(1)
			select {
			case <-letGo:
			case <-ctx.Done(): // a failed check stopped the consumer
			}
			asking.Add(1)
			Resume(ctx)
			Resume(ctx) // a second call changes nothing
			peak(&most, inside.Add(1))
			select {
			case <-proceed:
			case <-ctx.Done():
			}
			inside.Add(-1)
			seen.add(m.Key, seq)
			return nil
		}, zaptest.NewLogger(t))
	runUntilCleanup(t, c)

	waitFor(t, 20*time.Second, func() error {
		if n := released.Load(); n != stuck {
			return fmt.Errorf("%d handlers released, want %d", n, stuck)
		}
		return nil
	})
	close(letGo)
	waitFor(t, 20*time.Second, func() error {
		if a, in := asking.Load(), inside.Load(); a != stuck || in != maxResumed {
			return fmt.Errorf("%d handlers called Resume and %d went on; want %d and %d", a, in, stuck, maxResumed)
		}
		return nil
	})
	// The bound is full and six wait in Resume (a stuck key's later records
	// wait behind its first: order per key). The other keys' records are
	// handled meanwhile.
	var more []Record
	for _, r := range sequenced(keys, perKey) {
		if k, _ := strconv.Atoi(strings.TrimPrefix(r.Key, "uid-")); k >= stuck {
			more = append(more, r)
		}
	}
	publish(t, prod, more)
	seen.waitCount(t, len(more), 20*time.Second)
	if a, in := asking.Load(), inside.Load(); a != stuck || in != maxResumed {
		t.Errorf("after the other keys' records: %d handlers called Resume and %d went on; want %d and %d", a, in, stuck, maxResumed)
	}
	close(proceed)
	seen.waitCount(t, keys*perKey, 30*time.Second)
	seen.checkExactlyInOrder(t, keys, perKey)
	if p := most.Load(); p != maxResumed {
		t.Errorf("at most %d resumed handlers went on at once, want %d", p, maxResumed)
	}
	if w := waits.Load(); w != stuck-maxResumed {
		t.Errorf("OnResumeWait called %d times, want %d (once per handler that waited)", w, stuck-maxResumed)
	}
	waitFor(t, 10*time.Second, func() error {
		c.pool.mu.Lock()
		defer c.pool.mu.Unlock()
		if c.pool.resumed != 0 {
			return fmt.Errorf("%d places of resumed handlers held after all returned, want 0", c.pool.resumed)
		}
		return nil
	})
}

// TestResumeFromTwoGoroutinesOfOneHandler: a handler that delivers to two
// sessions at once calls Resume from both goroutines while the one place is
// taken. When the place frees, one of them takes it for the handler and the
// other goes on with it: the handler waits for both, so a second place it
// waited for would never come while it holds the first.
func TestResumeFromTwoGoroutinesOfOneHandler(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	publish(t, newTestProducer(t, brokers), []Record{{Topic: testTopic, Key: "holder", Value: []byte("holder/0")}})
	holding, free := make(chan struct{}), make(chan struct{})
	seen := newSeqRecorder()
	c := NewConsumer(ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic, Workers: 2, MaxResumed: 1},
		func(ctx context.Context, m Message) error {
			Release(ctx)
			if m.Key == "holder" {
				Resume(ctx)
				close(holding)
				select {
				case <-free:
				case <-ctx.Done():
				}
			} else {
				var wg sync.WaitGroup
				for range 2 {
					wg.Go(func() { Resume(ctx) })
				}
				wg.Wait()
			}
			seen.add(m.Key, parseSeq(t, m))
			return nil
		}, zaptest.NewLogger(t))
	runUntilCleanup(t, c)
	<-holding
	publish(t, newTestProducer(t, brokers), []Record{{Topic: testTopic, Key: "two", Value: []byte("two/0")}})
	waitFor(t, 20*time.Second, func() error {
		if w := c.Stats().ResumeWaiting; w != 2 {
			return fmt.Errorf("%d goroutines wait in Resume, want the handler's 2", w)
		}
		return nil
	})
	close(free)
	seen.waitCount(t, 2, 20*time.Second)
}

// Resume outside a consumer's handler does nothing.
func TestResumeOutsideAHandler(t *testing.T) {
	Resume(context.Background())
}

// Release outside a consumer's handler does nothing.
func TestReleaseOutsideAHandler(t *testing.T) {
	Release(context.Background())
}

// TestSpareWokenDoesNotCountAsParked: a worker that finishes its released
// handler while the pool's one spare has been woken and not yet gone does
// not end for want of room (the woken spare serves now, it is not parked):
// it takes the wake itself and serves, and the spare stays parked for the
// next Release, which then needs no new goroutine.
func TestSpareWokenDoesNotCountAsParked(t *testing.T) {
	t.Parallel()
	kp := newKeyPool()
	kp.maxSpares = 1
	first := make(chan bool, 1)
	go func() {
		kp.mu.Lock()
		defer kp.mu.Unlock()
		first <- kp.spare()
	}()
	spares := func() int {
		kp.mu.Lock()
		defer kp.mu.Unlock()
		return kp.spares
	}
	waitFor(t, 10*time.Second, func() error {
		if n := spares(); n != 1 {
			return fmt.Errorf("%d spares parked, want 1", n)
		}
		return nil
	})
	// A Release wakes the parked spare, and this worker's released handler
	// finishes before the spare has run.
	kp.mu.Lock()
	kp.woken++
	kp.spareCond.Signal()
	second := kp.spare()
	kp.mu.Unlock()
	if !second {
		t.Fatal("the worker whose released handler finished ended, want it to serve in the woken spare's place")
	}
	kp.mu.Lock()
	n, woken := kp.spares, kp.woken
	kp.mu.Unlock()
	if n != 1 || woken != 0 {
		t.Errorf("%d spares parked, %d woken, want the first still parked and no wake left", n, woken)
	}
	kp.close()
	if ok := <-first; ok {
		t.Error("a spare of a closed pool was told to serve")
	}
}
