package queue

// Fast tests of the consumer's parts, each driven directly: the per-key
// queues and the handler retries (no broker needed), the fetch loop, the
// revoke path and the periodic commits (against the in-process broker, with
// a real group generation), and the configuration. They run in
// milliseconds, so that mutation testing can run them for every mutant.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gomsg/gomsg/internal/embedded"
	"github.com/gomsg/gomsg/internal/testutil"
)

func unitConsumer(t *testing.T, cfg ConsumerConfig, h Handler) *Consumer {
	t.Helper()
	if cfg.Topic == "" {
		cfg.Topic = testTopic
	}
	if cfg.GroupID == "" {
		cfg.GroupID = "g"
	}
	return NewConsumer(cfg, h, zaptest.NewLogger(t))
}

// observedConsumer is unitConsumer logging to an observer as well.
func observedConsumer(t *testing.T, cfg ConsumerConfig, h Handler) (*Consumer, *observer.ObservedLogs) {
	t.Helper()
	if cfg.Topic == "" {
		cfg.Topic = testTopic
	}
	if cfg.GroupID == "" {
		cfg.GroupID = "g"
	}
	core, logs := observer.New(zapcore.DebugLevel)
	return NewConsumer(cfg, h, zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))), logs
}

func msgAt(offset int64, key, value string) Message {
	return Message{Topic: testTopic, Offset: offset, Key: key, Value: []byte(value)}
}

func newTestPartition(start int64) *partition {
	return newPartition(context.Background(), 0, start, newOffsetTracker())
}

// startWorkers runs n workers of c's pool until the test ends.
func startWorkers(t *testing.T, c *Consumer, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { c.pool.work(c) })
	}
	t.Cleanup(func() { c.pool.close(); wg.Wait() })
}

// counts returns p's counters and the pool's, read under the pool's lock.
func counts(c *Consumer, p *partition) (buffered, running int, bytes int64, keys int, poolRecs int, poolBytes int64) {
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	return p.buffered, p.running, p.bytes, len(p.keys), c.pool.records, c.pool.bytes
}

func TestConsumerConfigDefaults(t *testing.T) {
	t.Parallel()
	numbers := func(c ConsumerConfig) []any {
		return []any{c.Workers, c.MaxReleased, c.MaxResumed, c.QueueSize, c.MaxBufferedBytes, c.MinBytes, c.MaxBytes, c.CommitInterval, c.MaxWait,
			c.HeartbeatInterval, c.SessionTimeout, c.RebalanceTimeout, c.RetryBackoffMin, c.RetryBackoffMax, c.DrainTimeout}
	}
	want := []any{64, 16 * 64, 64 / 16, 1024, int64(4 << 20), 1, 1 << 20, 200 * time.Millisecond, 250 * time.Millisecond,
		time.Second, 6 * time.Second, 5 * time.Second, 50 * time.Millisecond, 5 * time.Second, 3 * time.Second}
	if got := numbers(ConsumerConfig{}.withDefaults()); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults of the zero config = %v, want %v", got, want)
	}
	neg := ConsumerConfig{Workers: -1, MaxReleased: -1, MaxResumed: -1, QueueSize: -1, MaxBufferedBytes: -1, MinBytes: -1, MaxBytes: -1,
		CommitInterval: -1, MaxWait: -1, HeartbeatInterval: -1, SessionTimeout: -1, RebalanceTimeout: -1,
		RetryBackoffMin: -1, RetryBackoffMax: -1, DrainTimeout: -1}
	if got := numbers(neg.withDefaults()); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults of a negative config = %v, want %v", got, want)
	}
	set := ConsumerConfig{Workers: 2, MaxReleased: 1, MaxResumed: 15, QueueSize: 3, MaxBufferedBytes: 4, MinBytes: 5, MaxBytes: 6,
		CommitInterval: 7, MaxWait: 8, HeartbeatInterval: 9, SessionTimeout: 10, RebalanceTimeout: 11,
		RetryBackoffMin: 12, RetryBackoffMax: 13, DrainTimeout: 14}
	if got, want := numbers(set.withDefaults()), numbers(set); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults changed set values: %v, want %v", got, want)
	}
	// Unset, the bound on released handlers follows the workers set.
	if got := (ConsumerConfig{Workers: 3}).withDefaults().MaxReleased; got != 48 {
		t.Errorf("MaxReleased with 3 workers = %d, want 48 (16 × Workers)", got)
	}
	// And the places of resumed handlers: a sixteenth of the workers, at least one.
	for workers, want := range map[int]int{3: 1, 32: 2, 100: 6} {
		if got := (ConsumerConfig{Workers: workers}).withDefaults().MaxResumed; got != want {
			t.Errorf("MaxResumed with %d workers = %d, want %d", workers, got, want)
		}
	}
}

func TestConsumerConfigValidate(t *testing.T) {
	t.Parallel()
	ok := ConsumerConfig{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", Topic: "t"}.withDefaults()
	with := func(f func(*ConsumerConfig)) ConsumerConfig { c := ok; f(&c); return c }
	for _, tc := range []struct {
		name    string
		cfg     ConsumerConfig
		wantErr string
	}{
		{"defaults", ok, ""},
		{"no brokers", with(func(c *ConsumerConfig) { c.Brokers = nil }), "no brokers"},
		{"no group", with(func(c *ConsumerConfig) { c.GroupID = "" }), "no group id"},
		{"no topic", with(func(c *ConsumerConfig) { c.Topic = "" }), "no topic"},
		{"MinBytes equal to MaxBytes", with(func(c *ConsumerConfig) { c.MinBytes, c.MaxBytes = 10, 10 }), ""},
		{"MinBytes above MaxBytes", with(func(c *ConsumerConfig) { c.MinBytes, c.MaxBytes = 11, 10 }), "MinBytes 11 above MaxBytes 10"},
		{"heartbeat just below session", with(func(c *ConsumerConfig) { c.HeartbeatInterval = c.SessionTimeout - 1 }), ""},
		{"heartbeat equal to session", with(func(c *ConsumerConfig) { c.HeartbeatInterval = c.SessionTimeout }), "heartbeat interval"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: Validate = %v, want nil", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: Validate = %v, want an error containing %q", tc.name, err, tc.wantErr)
		}
	}
	// Run refuses a configuration Validate rejects, without dialing.
	c := NewConsumer(ConsumerConfig{GroupID: "g", Topic: "t"}, nil, zaptest.NewLogger(t))
	if err := c.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Errorf("Run without brokers = %v, want the validation error", err)
	}
}

func TestConsumerSettings(t *testing.T) {
	t.Parallel()
	var s ConsumerSettings
	s.Defaults()
	if s.PartitionBufferBytes != 4<<20 || s.SessionTimeout != 6*time.Second {
		t.Errorf("defaults = %+v, want 4 MiB and 6s", s)
	}
	set := ConsumerSettings{PartitionBufferBytes: 5000, SessionTimeout: 3 * time.Second}
	kept := set
	kept.Defaults()
	if kept != set {
		t.Errorf("Defaults changed set values: %+v, want %+v", kept, set)
	}
	for _, tc := range []struct {
		s       ConsumerSettings
		wantErr string
	}{
		{ConsumerSettings{PartitionBufferBytes: 1024, SessionTimeout: 2 * time.Second}, ""},
		{ConsumerSettings{PartitionBufferBytes: 1024, SessionTimeout: 5 * time.Minute}, ""},
		{ConsumerSettings{PartitionBufferBytes: 1023, SessionTimeout: 6 * time.Second}, "--partition-buffer-bytes"},
		{ConsumerSettings{PartitionBufferBytes: 4096, SessionTimeout: 2*time.Second - 1}, "--queue-session-timeout"},
		{ConsumerSettings{PartitionBufferBytes: 4096, SessionTimeout: 5*time.Minute + 1}, "--queue-session-timeout"},
	} {
		err := tc.s.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%+v: Validate = %v, want nil", tc.s, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%+v: Validate = %v, want an error naming %s", tc.s, err, tc.wantErr)
		}
	}
	cfg := set.Apply(ConsumerConfig{Topic: "t", MaxBufferedBytes: 1, SessionTimeout: 1, QueueSize: 7})
	if cfg.MaxBufferedBytes != 5000 || cfg.SessionTimeout != 3*time.Second || cfg.Topic != "t" || cfg.QueueSize != 7 {
		t.Errorf("Apply = %+v, want buffer 5000, session 3s and the rest kept", cfg)
	}
}

func TestGenerationOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("commit: %w", kafka.IllegalGeneration), true},
		{fmt.Errorf("commit: %w", kafka.UnknownMemberId), true},
		{fmt.Errorf("commit: %w", kafka.RebalanceInProgress), true},
		{kafka.RequestTimedOut, false},
		{errors.New("connection reset"), false},
	} {
		if got := generationOver(tc.err); got != tc.want {
			t.Errorf("generationOver(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestConsumerRetryBackoffDoublesToCapAndResets(t *testing.T) {
	t.Parallel()
	c := unitConsumer(t, ConsumerConfig{RetryBackoffMin: 10 * time.Millisecond, RetryBackoffMax: 80 * time.Millisecond}, nil)
	r := c.newBackoff()
	for i, full := range []time.Duration{10, 20, 40, 80, 80, 80} {
		full *= time.Millisecond
		if got := r.next(); got < full/2 || got > full {
			t.Errorf("wait %d = %s, want within [%s, %s]", i+1, got, full/2, full)
		}
	}
	r.reset()
	if got := r.next(); got < 5*time.Millisecond || got > 10*time.Millisecond {
		t.Errorf("wait after reset = %s, want within [5ms, 10ms]", got)
	}
}

// The record and byte bounds of one partition, exactly at the edges.
func TestKeyPoolAddBoundsRecordsAndBytes(t *testing.T) {
	t.Parallel()
	const rec = "0123456789" // with key "k": 11 bytes
	t.Run("records", func(t *testing.T) {
		c, p := unitConsumer(t, ConsumerConfig{}, nil), newTestPartition(0)
		for i := range 3 {
			if !c.pool.add(c, p, msgAt(int64(i), "k", rec), 3, 1000) {
				t.Fatalf("record %d of 3 refused", i)
			}
		}
		if c.pool.add(c, p, msgAt(3, "k", rec), 3, 1000) {
			t.Error("a 4th record was queued with QueueSize 3")
		}
		if b, _, by, keys, pr, pb := counts(c, p); b != 3 || by != 33 || keys != 1 || pr != 3 || pb != 33 {
			t.Errorf("buffered %d records %d bytes in %d keys (pool %d, %d), want 3, 33 in 1 (3, 33)", b, by, keys, pr, pb)
		}
		if r, b := c.pool.buffered(); r != 3 || b != 33 {
			t.Errorf("pool buffered() = %d, %d, want 3, 33", r, b)
		}
		if s := c.Stats(); s.PeakPartitionRecords != 3 || s.PeakPartitionBytes != 33 || s.BufferedRecords != 3 || s.BufferedBytes != 33 {
			t.Errorf("stats = %+v, want peaks and buffered 3 records, 33 bytes", s)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		c, p := unitConsumer(t, ConsumerConfig{}, nil), newTestPartition(0)
		for i := range 3 { // 33 bytes fit exactly
			if !c.pool.add(c, p, msgAt(int64(i), string(rune('a'+i%2)), rec), 100, 33) {
				t.Fatalf("record %d refused within the byte bound", i)
			}
		}
		if c.pool.add(c, p, msgAt(3, "k", rec), 100, 33) {
			t.Error("a record beyond MaxBufferedBytes was queued")
		}
		if b, _, by, keys, _, _ := counts(c, p); b != 3 || by != 33 || keys != 2 {
			t.Errorf("buffered %d records %d bytes in %d keys, want 3, 33 in 2", b, by, keys)
		}
	})
	t.Run("a lone record larger than the bound", func(t *testing.T) {
		c, p := unitConsumer(t, ConsumerConfig{}, nil), newTestPartition(0)
		if !c.pool.add(c, p, msgAt(0, "k", rec), 100, 5) {
			t.Fatal("a record larger than MaxBufferedBytes refused on an empty partition")
		}
		if c.pool.add(c, p, msgAt(1, "k", "x"), 100, 5) {
			t.Error("a second record queued beside one already over the byte bound")
		}
	})
	t.Run("headers count", func(t *testing.T) {
		c, p := unitConsumer(t, ConsumerConfig{}, nil), newTestPartition(0)
		m := msgAt(0, "key", "value")
		m.Headers = map[string]string{"ab": "cde", "f": ""}
		c.pool.add(c, p, m, 10, 100)
		if _, by := c.pool.buffered(); by != 3+5+2+3+1 {
			t.Errorf("record of key 3, value 5 and headers 2+3, 1+0 bytes counted as %d bytes, want 14", by)
		}
	})
	t.Run("re-fetched offset", func(t *testing.T) {
		c, p := unitConsumer(t, ConsumerConfig{}, nil), newTestPartition(0)
		for _, o := range []int64{0, 1, 0, 1, 2} {
			if !c.pool.add(c, p, msgAt(o, "k", rec), 100, 1000) {
				t.Fatalf("offset %d refused", o)
			}
		}
		c.pool.mu.Lock()
		var offsets []int64
		for _, r := range p.keys["k"].msgs {
			offsets = append(offsets, r.m.Offset)
		}
		c.pool.mu.Unlock()
		if !slices.Equal(offsets, []int64{0, 1, 2}) {
			t.Errorf("queued offsets %v, want [0 1 2]: an offset fetched twice is queued once", offsets)
		}
	})
	t.Run("revoked", func(t *testing.T) {
		c, p := unitConsumer(t, ConsumerConfig{}, nil), newTestPartition(0)
		c.pool.revoke(p)
		if c.pool.add(c, p, msgAt(0, "k", rec), 100, 1000) {
			t.Error("a record was queued on a revoked partition")
		}
		if r, b := c.pool.buffered(); r != 0 || b != 0 {
			t.Errorf("pool holds %d records, %d bytes after a refused add", r, b)
		}
	})
}

// Workers run each key's records one at a time in offset order, different
// keys in parallel, and leave nothing behind once all finished.
func TestKeyPoolRunsEachKeyInOrderOneAtATime(t *testing.T) {
	t.Parallel()
	const keys, perKey = 5, 8
	var mu sync.Mutex
	running := map[string]bool{}
	var concurrent []string
	seen := map[string][]int64{}
	c := unitConsumer(t, ConsumerConfig{}, func(_ context.Context, m Message) error {
		mu.Lock()
		if running[m.Key] {
			concurrent = append(concurrent, m.Key)
		}
		running[m.Key] = true
		mu.Unlock()
		time.Sleep(time.Millisecond) // the record's work
		mu.Lock()
		defer mu.Unlock()
		running[m.Key] = false
		seen[m.Key] = append(seen[m.Key], m.Offset)
		return nil
	})
	p := newTestPartition(0)
	startWorkers(t, c, 3)
	for o := range int64(keys * perKey) {
		if !c.pool.add(c, p, msgAt(o, "k"+strconv.Itoa(int(o)%keys), "v"), 1000, 1<<20) {
			t.Fatalf("offset %d refused", o)
		}
	}
	waitFor(t, 10*time.Second, func() error {
		if got := p.offsets.uncommitted(); got[0] != keys*perKey {
			return testutil.Errorf("commit point %v, want %d", got, keys*perKey)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(concurrent) > 0 {
		t.Errorf("keys run twice at once: %v", concurrent)
	}
	for k := range keys {
		key := "k" + strconv.Itoa(k)
		var want []int64
		for o := int64(k); o < keys*perKey; o += keys {
			want = append(want, o)
		}
		if !slices.Equal(seen[key], want) {
			t.Errorf("key %s ran offsets %v, want %v", key, seen[key], want)
		}
	}
	if b, r, by, ks, pr, pb := counts(c, p); b != 0 || r != 0 || by != 0 || ks != 0 || pr != 0 || pb != 0 {
		t.Errorf("left behind: buffered %d, running %d, bytes %d, keys %d, pool %d records %d bytes; want all 0", b, r, by, ks, pr, pb)
	}
}

// Revoking drops the records not started, keeps the running one, and
// waitIdle returns only once it finished; only what finished is committed.
func TestKeyPoolRevokeDropsQueuedAndWaitsForRunning(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	var handled []int64
	var mu sync.Mutex
	c := unitConsumer(t, ConsumerConfig{}, func(_ context.Context, m Message) error {
		if m.Offset == 0 {
			close(started)
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, m.Offset)
		return nil
	})
	p := newTestPartition(0)
	startWorkers(t, c, 1)
	for o, k := range []string{"slow", "slow", "other", "slow"} {
		c.pool.add(c, p, msgAt(int64(o), k, "vv"), 100, 1000)
	}
	await(t, started, 10*time.Second, "the first record to start")
	c.pool.revoke(p)
	if b, r, by, ks, pr, pb := counts(c, p); b != 1 || r != 1 || by != 6 || ks != 1 || pr != 1 || pb != 6 {
		t.Errorf("after revoke: buffered %d, running %d, bytes %d, keys %d, pool %d/%d; want 1, 1, 6, 1, 1/6 (the running record)", b, r, by, ks, pr, pb)
	}
	if p.stop.Err() == nil {
		t.Error("revoke did not stop the partition's retries")
	}
	idle := make(chan struct{})
	go func() { c.pool.waitIdle(p); close(idle) }()
	select {
	case <-idle:
		t.Error("waitIdle returned while a handler of the partition ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	await(t, idle, 10*time.Second, "waitIdle after the handler finished")
	mu.Lock()
	if !slices.Equal(handled, []int64{0}) {
		t.Errorf("handled %v, want only [0]: queued records of a revoked partition ran", handled)
	}
	mu.Unlock()
	if b, r, by, ks, pr, pb := counts(c, p); b != 0 || r != 0 || by != 0 || ks != 0 || pr != 0 || pb != 0 {
		t.Errorf("left behind: buffered %d, running %d, bytes %d, keys %d, pool %d/%d; want all 0", b, r, by, ks, pr, pb)
	}
	if got := p.offsets.uncommitted(); got[0] != 1 {
		t.Errorf("commit point %v, want 1: only offset 0 finished", got)
	}
}

// A record that fails and is then given up (its partition revoked) is not
// finished: its offset stays uncommitted and its key's later records are
// dropped.
func TestKeyPoolFailedRecordStaysUncommitted(t *testing.T) {
	t.Parallel()
	failing := make(chan struct{}, 1)
	c := unitConsumer(t, ConsumerConfig{RetryBackoffMin: time.Millisecond, RetryBackoffMax: time.Millisecond},
		func(_ context.Context, m Message) error {
			if m.Offset == 1 {
				select {
				case failing <- struct{}{}:
				default:
				}
				return errors.New("fails")
			}
			return nil
		})
	p := newTestPartition(0)
	startWorkers(t, c, 2)
	for o := range int64(3) {
		c.pool.add(c, p, msgAt(o, "k", "v"), 100, 1000)
	}
	await(t, failing, 10*time.Second, "offset 1 to fail")
	c.pool.revoke(p)
	c.pool.waitIdle(p)
	if got := p.offsets.uncommitted(); got[0] != 1 {
		t.Errorf("commit point %v, want 1: offset 1 failed", got)
	}
	if b, r, _, ks, pr, _ := counts(c, p); b != 0 || r != 0 || ks != 0 || pr != 0 {
		t.Errorf("left behind: buffered %d, running %d, keys %d, pool %d; want 0", b, r, ks, pr)
	}
}

func TestKeyPoolWaitRoom(t *testing.T) {
	t.Parallel()
	c, p := unitConsumer(t, ConsumerConfig{}, nil), newTestPartition(0)
	ctx := context.Background()
	if room, ok := c.pool.waitRoom(ctx, p, 2, 100); !ok || room != 100 {
		t.Errorf("empty partition: waitRoom = %d, %v, want 100, true", room, ok)
	}
	c.pool.add(c, p, msgAt(0, "k", "0123456789"), 2, 100)
	if room, ok := c.pool.waitRoom(ctx, p, 2, 100); !ok || room != 89 {
		t.Errorf("one record: waitRoom = %d, %v, want 89, true", room, ok)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok := c.pool.waitRoom(done, p, 2, 100); ok {
		t.Error("waitRoom with a done context reported room")
	}

	full := func(name string, maxRecords int, maxBytes int64) {
		ctx, cancel := context.WithCancel(context.Background())
		res := make(chan bool, 1)
		go func() { _, ok := c.pool.waitRoom(ctx, p, maxRecords, maxBytes); res <- ok }()
		select {
		case <-res:
			t.Errorf("%s: waitRoom returned on a full partition", name)
		case <-time.After(50 * time.Millisecond):
		}
		cancel()
		select {
		case ok := <-res:
			if ok {
				t.Errorf("%s: waitRoom reported room once its context was done", name)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: waitRoom did not return once its context was done", name)
		}
	}
	full("at the record bound", 1, 100)
	full("at the byte bound", 100, 11)

	// A record finishing wakes the waiting fetch loop.
	c2 := unitConsumer(t, ConsumerConfig{}, func(context.Context, Message) error { return nil })
	p2 := newTestPartition(0)
	c2.pool.add(c2, p2, msgAt(0, "k", "v"), 1, 100)
	res := make(chan bool, 1)
	go func() { _, ok := c2.pool.waitRoom(context.Background(), p2, 1, 100); res <- ok }()
	startWorkers(t, c2, 1)
	select {
	case ok := <-res:
		if !ok {
			t.Error("waitRoom woken by a finished record reported no room")
		}
	case <-time.After(10 * time.Second):
		t.Error("a finished record did not wake waitRoom")
	}
}

func TestConsumerHandleRetriesUntilSuccess(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	c, logs := observedConsumer(t, ConsumerConfig{RetryBackoffMin: time.Millisecond, RetryBackoffMax: 2 * time.Millisecond},
		func(context.Context, Message) error {
			if calls.Add(1) <= 2 {
				return errors.New("not yet")
			}
			return nil
		})
	res := make(chan bool, 1)
	go func() { res <- c.handle(newTestPartition(0), msgAt(4, "k", "v"), nil) }()
	select {
	case ok := <-res:
		if !ok {
			t.Fatal("handle gave up on a record that succeeds on its third attempt")
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("handle still running after %d calls: a success did not end it", calls.Load())
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("handler called %d times, want 3", n)
	}
	var attempts []int64
	for _, e := range logs.FilterMessage("handler failed; retrying").All() {
		attempts = append(attempts, e.ContextMap()["attempt"].(int64))
	}
	if !slices.Equal(attempts, []int64{1, 2}) {
		t.Errorf("logged attempts %v, want [1 2]", attempts)
	}
}

// A failing record stops being retried once its partition is revoked, even
// in the middle of a long backoff.
func TestConsumerHandleStopsRetryingOnRevoke(t *testing.T) {
	t.Parallel()
	called := make(chan struct{}, 1)
	c := unitConsumer(t, ConsumerConfig{RetryBackoffMin: time.Minute, RetryBackoffMax: time.Minute},
		func(context.Context, Message) error {
			select {
			case called <- struct{}{}:
			default:
			}
			return errors.New("fails")
		})
	p := newTestPartition(0)
	res := make(chan bool, 1)
	go func() { res <- c.handle(p, msgAt(0, "k", "v"), nil) }()
	await(t, called, 10*time.Second, "the first attempt")
	p.stopNow()
	select {
	case ok := <-res:
		if ok {
			t.Error("handle reported success for a record that always fails")
		}
	case <-time.After(5 * time.Second):
		t.Error("handle went on retrying after the partition was revoked")
	}
}

// records makes kafka records of key k at offsets.
func records(offsets ...int64) []kafka.Record {
	out := make([]kafka.Record, len(offsets))
	for i, o := range offsets {
		out[i] = kafka.Record{Offset: o, Key: kafka.NewBytes([]byte("k")), Value: kafka.NewBytes([]byte(strconv.FormatInt(o, 10))),
			Time: time.Unix(1000+o, 0)}
	}
	return out
}

func queuedOffsets(c *Consumer, p *partition) []int64 {
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	var out []int64
	for _, q := range p.keys {
		for _, r := range q.msgs {
			out = append(out, r.m.Offset)
		}
	}
	slices.Sort(out)
	return out
}

// errReader yields its records, then err.
type errReader struct {
	recs []kafka.Record
	err  error
}

func (r *errReader) ReadRecord() (*kafka.Record, error) {
	if len(r.recs) == 0 {
		return nil, r.err
	}
	rec := &r.recs[0]
	r.recs = r.recs[1:]
	return rec, nil
}

// badBytes fails to read.
type badBytes struct{}

func (badBytes) Read([]byte) (int, error) { return 0, errors.New("bad bytes") }
func (badBytes) Close() error             { return nil }
func (badBytes) Len() int                 { return 1 }

func TestTakeQueuesFromTheAskedOffsetWithinRoom(t *testing.T) {
	t.Parallel()
	c := unitConsumer(t, ConsumerConfig{QueueSize: 3}, nil)
	p := newTestPartition(5)
	// The batch starts before offset 5; room for three records.
	res := &kafka.FetchResponse{Records: kafka.NewRecordReader(records(3, 4, 5, 6, 7, 8)...), HighWatermark: 20}
	next, err := c.take(p, res, 5)
	if err != nil || next != 8 {
		t.Fatalf("take = %d, %v, want 8, nil", next, err)
	}
	if got := queuedOffsets(c, p); !slices.Equal(got, []int64{5, 6, 7}) {
		t.Errorf("queued %v, want [5 6 7]", got)
	}
	if lag := p.lag.Load(); lag != 12 {
		t.Errorf("lag %d, want 12", lag)
	}
	c.pool.mu.Lock()
	m := p.keys["k"].msgs[0].m
	c.pool.mu.Unlock()
	if m.Topic != testTopic || m.Partition != 0 || m.Offset != 5 || m.Key != "k" || string(m.Value) != "5" ||
		!m.Time.Equal(time.Unix(1005, 0)) || m.Headers != nil {
		t.Errorf("message %+v, want topic %s, partition 0, offset 5, key k, value 5, time 1005, no headers", m, testTopic)
	}
}

func TestTakeFromFirstOffsetAndEmptyFetches(t *testing.T) {
	t.Parallel()
	c := unitConsumer(t, ConsumerConfig{}, nil)
	p := newTestPartition(kafka.FirstOffset)
	res := &kafka.FetchResponse{Records: kafka.NewRecordReader(records(0, 1)...), HighWatermark: 2}
	next, err := c.take(p, res, kafka.FirstOffset)
	if err != nil || next != 2 {
		t.Fatalf("take from FirstOffset = %d, %v, want 2, nil", next, err)
	}
	if got := queuedOffsets(c, p); !slices.Equal(got, []int64{0, 1}) {
		t.Errorf("queued %v, want [0 1]", got)
	}
	p2 := newTestPartition(0)
	next, err = c.take(p2, &kafka.FetchResponse{Records: kafka.NewRecordReader(), HighWatermark: 5}, 0)
	if err != nil || next != 0 {
		t.Fatalf("empty take = %d, %v, want 0, nil", next, err)
	}
	if lag := p2.lag.Load(); lag != 5 {
		t.Errorf("lag after an empty fetch at offset 0 = %d, want 5", lag)
	}
}

func TestTakeReadErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("truncated batch")
	c := unitConsumer(t, ConsumerConfig{}, nil)

	p := newTestPartition(0)
	next, err := c.take(p, &kafka.FetchResponse{Records: &errReader{err: boom}}, 0)
	if !errors.Is(err, boom) || next != 0 {
		t.Errorf("take of a failing batch = %d, %v, want 0 and the read error", next, err)
	}
	// After a record was taken, a read error ends the batch; the rest is
	// fetched again.
	p = newTestPartition(0)
	next, err = c.take(p, &kafka.FetchResponse{Records: &errReader{recs: records(0), err: boom}}, 0)
	if err != nil || next != 1 {
		t.Errorf("take of a batch failing after one record = %d, %v, want 1, nil", next, err)
	}

	for _, tc := range []struct {
		name string
		bad  func(*kafka.Record)
		want string
	}{
		{"key", func(r *kafka.Record) { r.Key = badBytes{} }, "read key"},
		{"value", func(r *kafka.Record) { r.Value = badBytes{} }, "read value"},
	} {
		recs := records(0)
		tc.bad(&recs[0])
		p := newTestPartition(0)
		next, err := c.take(p, &kafka.FetchResponse{Records: kafka.NewRecordReader(recs...)}, 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) || next != 0 {
			t.Errorf("unreadable %s first: take = %d, %v, want 0 and %q", tc.name, next, err, tc.want)
		}
		recs = records(0, 1)
		tc.bad(&recs[1])
		p = newTestPartition(0)
		next, err = c.take(p, &kafka.FetchResponse{Records: kafka.NewRecordReader(recs...)}, 0)
		if err != nil || next != 1 {
			t.Errorf("unreadable %s second: take = %d, %v, want 1, nil", tc.name, next, err)
		}
	}
	if n := p.offsets.inFlight(); n != 1 {
		t.Errorf("%d offsets in flight, want 1", n)
	}
}

// fetchTo runs c's fetch loop for partition 0 of brokers, with two
// workers, until the test ends; it returns the partition.
func fetchTo(t *testing.T, c *Consumer, brokers []string, start int64) (*partition, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	if c.fetch == nil {
		c.fetch = client.Fetch
	}
	startWorkers(t, c, 2)
	p := newPartition(context.Background(), 0, start, newOffsetTracker())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.fetchLoop(ctx, p) }()
	t.Cleanup(func() { cancel(); await(t, done, 10*time.Second, "the fetch loop to return") })
	return p, cancel, done
}

// Every kind of fetch failure is counted, reported and retried: none stops
// the partition's fetching for good.
func TestFetchLoopRetriesEveryFailure(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	publish(t, newTestProducer(t, brokers), sequenced(4, 5))
	var reported []error
	var mu sync.Mutex
	seen := newSeqRecorder()
	c := unitConsumer(t, ConsumerConfig{RetryBackoffMin: time.Millisecond, RetryBackoffMax: 2 * time.Millisecond,
		OnError: func(op string, err error) {
			mu.Lock()
			defer mu.Unlock()
			if op != "fetch" {
				t.Errorf("OnError(%q, %v), want op fetch", op, err)
			}
			reported = append(reported, err)
		}},
		func(_ context.Context, m Message) error { seen.add(m.Key, parseSeq(t, m)); return nil })
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	injected := errors.New("injected transport failure")
	var calls atomic.Int64
	c.fetch = func(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
		switch calls.Add(1) {
		case 1, 2, 3:
			return nil, injected
		case 4:
			return &kafka.FetchResponse{Error: kafka.NotLeaderForPartition, Records: kafka.NewRecordReader()}, nil
		case 5:
			return &kafka.FetchResponse{Records: &errReader{err: io.ErrUnexpectedEOF}}, nil
		}
		return client.Fetch(ctx, req)
	}
	fetchTo(t, c, brokers, kafka.FirstOffset)
	seen.waitCount(t, 20, 10*time.Second)
	seen.checkExactlyInOrder(t, 4, 5)
	mu.Lock()
	defer mu.Unlock()
	if s := c.Stats(); s.FetchErrors != 5 || len(reported) != 5 {
		t.Fatalf("fetch errors counted %d, reported %d, want 5", s.FetchErrors, len(reported))
	}
	for i, want := range []error{injected, injected, injected, kafka.NotLeaderForPartition, io.ErrUnexpectedEOF} {
		if !errors.Is(reported[i], want) || !strings.Contains(reported[i].Error(), "fetch partition 0") {
			t.Errorf("error %d reported as %v, want one naming partition 0 and wrapping %v", i+1, reported[i], want)
		}
	}
}

// A committed offset beyond what the partition still holds (retention)
// restarts the partition at its earliest record.
func TestFetchLoopOffsetOutOfRangeRestartsAtEarliest(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	publish(t, newTestProducer(t, brokers), sequenced(2, 3))
	seen := newSeqRecorder()
	var asked []int64
	var mu sync.Mutex
	c := unitConsumer(t, ConsumerConfig{RetryBackoffMin: time.Millisecond, RetryBackoffMax: 2 * time.Millisecond},
		func(_ context.Context, m Message) error { seen.add(m.Key, parseSeq(t, m)); return nil })
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	c.fetch = func(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
		mu.Lock()
		asked = append(asked, req.Offset)
		mu.Unlock()
		return client.Fetch(ctx, req)
	}
	fetchTo(t, c, brokers, 1000)
	seen.waitCount(t, 6, 10*time.Second)
	seen.checkExactlyInOrder(t, 2, 3)
	mu.Lock()
	defer mu.Unlock()
	if len(asked) < 2 || asked[0] != 1000 || asked[1] != kafka.FirstOffset {
		t.Errorf("fetched at offsets %v, want 1000 then FirstOffset", asked)
	}
	if s := c.Stats(); s.FetchErrors != 1 {
		t.Errorf("fetch errors %d, want 1 (the out-of-range answer)", s.FetchErrors)
	}
}

// A fetch cut short by the end of the generation is not a failure: nothing
// is counted, reported or logged as an outage, and the loop returns.
func TestFetchLoopEndOfGenerationIsNoError(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	var reported atomic.Int64
	c, logs := observedConsumer(t, ConsumerConfig{MaxWait: 10 * time.Second, OnError: func(string, error) { reported.Add(1) }}, nil)
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	fetching := make(chan struct{}, 1)
	c.fetch = func(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
		select {
		case fetching <- struct{}{}:
		default:
		}
		return client.Fetch(ctx, req) // the broker holds it up to MaxWait
	}
	_, cancel, done := fetchTo(t, c, brokers, kafka.FirstOffset)
	await(t, fetching, 10*time.Second, "a fetch")
	cancel()
	await(t, done, 5*time.Second, "the fetch loop to return once the generation ended")
	if s := c.Stats(); s.FetchErrors != 0 || reported.Load() != 0 {
		t.Errorf("the generation's end counted %d fetch errors, reported %d, want none", s.FetchErrors, reported.Load())
	}
	if n := logs.FilterMessage("outage began; retrying").Len(); n != 0 {
		t.Errorf("the generation's end logged %d outages, want none", n)
	}
}

// joinGroup makes brokers' group a group of one member and returns its
// generation, so that commits go to the broker for real.
func joinGroup(t *testing.T, brokers []string, group string) *kafka.Generation {
	t.Helper()
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{ID: group, Brokers: brokers, Topics: []string{testTopic},
		Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cg.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gen, err := cg.Next(ctx)
	if err != nil {
		t.Fatalf("join group %s: %v", group, err)
	}
	return gen
}

// committedOffset is the offset group committed for partition 0, -1 if none.
func committedOffset(t *testing.T, brokers []string, group string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := (&kafka.Client{Addr: kafka.TCP(brokers...)}).OffsetFetch(ctx,
		&kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{testTopic: {0}}})
	if err != nil {
		t.Fatalf("offset fetch: %v", err)
	}
	for _, p := range res.Topics[testTopic] {
		if p.Partition == 0 {
			return p.CommittedOffset
		}
	}
	return -1
}

// revokeSetup is a consumer in a real one-member group, holding partition 0
// with offsets 0..2 finished, and a commit that fails as fail says.
func revokeSetup(t *testing.T, brokers []string, group string, fail func(call int64) error) (*Consumer, *generation, *partition, *atomic.Int64, *atomic.Int64) {
	t.Helper()
	var reported, calls atomic.Int64
	c := unitConsumer(t, ConsumerConfig{Brokers: brokers, GroupID: group, RetryBackoffMin: time.Millisecond,
		RetryBackoffMax: 2 * time.Millisecond, OnError: func(op string, err error) {
			if op == "commit" && strings.Contains(err.Error(), "commit offsets") {
				reported.Add(1)
			}
		}}, nil)
	commit := c.commit
	c.commit = func(gen *kafka.Generation, offsets map[string]map[int]int64) error {
		if err := fail(calls.Add(1)); err != nil {
			return err
		}
		return commit(gen, offsets)
	}
	g := &generation{gen: joinGroup(t, brokers, group), offsets: newOffsetTracker()}
	p := newPartition(context.Background(), 0, 0, g.offsets)
	g.parts = []*partition{p}
	for o := range int64(3) {
		g.offsets.track(0, o)
		g.offsets.done(0, o)
	}
	return c, g, p, &calls, &reported
}

// consumeRevoked runs the revoke path of p (its generation already over).
func consumeRevoked(t *testing.T, c *Consumer, g *generation, p *partition) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() { defer close(done); c.consumePartition(ctx, g, p) }()
	await(t, done, 10*time.Second, "the revoke to end")
}

// The revoke commits what finished, retrying a failed commit up to three
// attempts, and gives up at once when the generation is over.
func TestRevokeCommitsFinishedRetryingFailures(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	injected := errors.New("injected commit failure")
	for _, tc := range []struct {
		name       string
		fail       func(int64) error
		calls      int64
		committed  int64
		commitErrs int64
	}{
		{"first attempt", func(int64) error { return nil }, 1, 3, 0},
		{"second attempt", func(n int64) error {
			if n == 1 {
				return injected
			}
			return nil
		}, 2, 3, 1},
		{"third attempt", func(n int64) error {
			if n <= 2 {
				return injected
			}
			return nil
		}, 3, 3, 2},
		{"never", func(int64) error { return injected }, 3, -1, 3},
		{"generation over", func(int64) error { return fmt.Errorf("commit: %w", kafka.RebalanceInProgress) }, 1, -1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			group := "g-" + strings.ReplaceAll(tc.name, " ", "-")
			c, g, p, calls, reported := revokeSetup(t, brokers, group, tc.fail)
			consumeRevoked(t, c, g, p)
			if n := calls.Load(); n != tc.calls {
				t.Errorf("%d commit attempts, want %d", n, tc.calls)
			}
			if got := committedOffset(t, brokers, group); got != tc.committed {
				t.Errorf("committed offset %d, want %d", got, tc.committed)
			}
			s := c.Stats()
			if s.CommitErrors != tc.commitErrs || reported.Load() != tc.commitErrs {
				t.Errorf("commit errors counted %d, reported %d, want %d", s.CommitErrors, reported.Load(), tc.commitErrs)
			}
			if wantCommits := int64(1); tc.committed < 0 {
				if s.Commits != 0 {
					t.Errorf("%d commits counted, want 0", s.Commits)
				}
			} else if s.Commits != wantCommits {
				t.Errorf("%d commits counted, want %d", s.Commits, wantCommits)
			}
			if tc.committed >= 0 {
				if left := g.offsets.uncommitted(); len(left) != 0 {
					t.Errorf("still uncommitted after the commit: %v", left)
				}
			}
		})
	}
}

// Nothing finished since the last commit: the revoke commits nothing.
func TestRevokeWithNothingFinishedDoesNotCommit(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	c, g, p, calls, _ := revokeSetup(t, brokers, "g", func(int64) error { return nil })
	g.offsets.committed(map[int]int64{0: 3})
	consumeRevoked(t, c, g, p)
	if n := calls.Load(); n != 0 {
		t.Errorf("%d commits of nothing new, want 0", n)
	}
}

// The drain at revoke: a running handler may finish (within DrainTimeout)
// and is committed before the partition is given up; one that does not
// finish in time has its context cancelled and stays uncommitted.
func TestRevokeDrainsRunningHandlerThenCommits(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	for _, tc := range []struct {
		name      string
		drain     time.Duration
		finishes  bool
		committed int64
	}{
		{"finishes within the drain", 10 * time.Second, true, 1},
		{"outlasts the drain", 100 * time.Millisecond, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			group := "g-" + strings.ReplaceAll(tc.name, " ", "-")
			started, release := make(chan struct{}), make(chan struct{})
			var cancelled atomic.Bool
			c := unitConsumer(t, ConsumerConfig{Brokers: brokers, GroupID: group, DrainTimeout: tc.drain},
				func(ctx context.Context, m Message) error {
					close(started)
					select {
					case <-release:
						return nil
					case <-ctx.Done():
						cancelled.Store(true)
						return ctx.Err()
					}
				})
			g := &generation{gen: joinGroup(t, brokers, group), offsets: newOffsetTracker()}
			p := newPartition(context.Background(), 0, 0, g.offsets)
			g.parts = []*partition{p}
			startWorkers(t, c, 1)
			c.pool.add(c, p, msgAt(0, "k", "v"), 10, 100)
			await(t, started, 10*time.Second, "the handler to start")

			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			done := make(chan struct{})
			go func() { defer close(done); c.consumePartition(ctx, g, p) }()
			if tc.finishes {
				select {
				case <-done:
					t.Fatal("the revoke returned while a handler ran")
				case <-time.After(100 * time.Millisecond):
				}
				close(release)
			}
			await(t, done, 10*time.Second, "the revoke to end")
			if cancelled.Load() == tc.finishes {
				t.Errorf("handler context cancelled: %v, want %v", cancelled.Load(), !tc.finishes)
			}
			if got := committedOffset(t, brokers, group); got != tc.committed {
				t.Errorf("committed offset %d, want %d", got, tc.committed)
			}
		})
	}
}

// The periodic commit: finished offsets reach the broker each interval, lag
// and buffered bytes are reported, and a failing commit is logged as an
// outage (once), while a working one logs none.
func TestCommitLoopCommitsReportsAndLogsFailures(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	var lag, buffered atomic.Int64
	lag.Store(-1)
	buffered.Store(-1)
	c, logs := observedConsumer(t, ConsumerConfig{Brokers: brokers, GroupID: "g", CommitInterval: 10 * time.Millisecond,
		OnLag: func(n int64) { lag.Store(n) }, OnBufferedBytes: func(n int64) { buffered.Store(n) }}, nil)
	var failing atomic.Bool
	commit := c.commit
	c.commit = func(gen *kafka.Generation, offsets map[string]map[int]int64) error {
		if failing.Load() {
			return errors.New("injected commit failure")
		}
		return commit(gen, offsets)
	}
	g := &generation{gen: joinGroup(t, brokers, "g"), offsets: newOffsetTracker()}
	p := newPartition(context.Background(), 0, 0, g.offsets)
	g.parts = []*partition{p}
	p.lag.Store(7)
	for o := range int64(4) {
		g.offsets.track(0, o)
	}
	g.offsets.done(0, 0)
	g.offsets.done(0, 1)
	c.pool.add(c, p, msgAt(10, "key", "value"), 10, 100) // 8 bytes buffered

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.commitLoop(ctx, g) }()
	defer func() { cancel(); await(t, done, 10*time.Second, "the commit loop to return") }()
	waitFor(t, 10*time.Second, func() error {
		if got := committedOffset(t, brokers, "g"); got != 2 {
			return testutil.Errorf("committed %d, want 2", got)
		}
		if lag.Load() != 7 || buffered.Load() != 8 {
			return testutil.Errorf("reported lag %d, buffered %d; want 7 and 8", lag.Load(), buffered.Load())
		}
		return nil
	})
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 0 {
		t.Errorf("%d warnings while commits worked, want none", n)
	}
	failing.Store(true)
	g.offsets.done(0, 2)
	waitFor(t, 10*time.Second, func() error {
		if s := c.Stats(); s.CommitErrors < 2 {
			return testutil.Errorf("%d commit errors", s.CommitErrors)
		}
		return nil
	})
	if n := logs.FilterMessage("outage began; retrying").Len(); n != 1 {
		t.Errorf("failing commits logged %d outages, want 1", n)
	}
	if got := committedOffset(t, brokers, "g"); got != 2 {
		t.Errorf("committed %d while commits failed, want still 2", got)
	}
}

// A session timeout the brokers refuse (below their
// group.min.session.timeout.ms, 6s by default, which the in-process broker
// keeps) means the consumer never joins: that is logged as an error naming
// the setting, once however often the join is retried, and Run still
// returns nil once stopped.
func TestConsumerLogsASessionTimeoutTheBrokersRefuse(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	c, logs := observedConsumer(t, ConsumerConfig{Brokers: brokers, SessionTimeout: 2 * time.Second, HeartbeatInterval: 500 * time.Millisecond},
		func(context.Context, Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runChecked(t, ctx, c) }()
	waitFor(t, 20*time.Second, func() error {
		if n := logs.FilterField(zap.String("detail", "Failed to join group g: [26] Invalid Session Timeout: the requested session timeout is outside of the allowed range on the broker")).Len(); n < 3 {
			return testutil.Errorf("%d refused joins", n)
		}
		return nil
	})
	cancel()
	await(t, done, 30*time.Second, "Run to return")
	refused := logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("--queue-session-timeout").All()
	if len(refused) != 1 {
		t.Fatalf("%d errors naming --queue-session-timeout, want 1", len(refused))
	}
	if got := refused[0].ContextMap()["session_timeout"]; got != 2*time.Second {
		t.Errorf("error logged session_timeout %v, want 2s", got)
	}
	if c.Stats().Generations != 0 {
		t.Errorf("joined %d generations with a refused session timeout", c.Stats().Generations)
	}
}

// A consumer that runs and stops cleanly logs no warning.
func TestConsumerCleanRunLogsNoWarning(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 2)
	publish(t, newTestProducer(t, brokers), sequenced(4, 3))
	seen := newSeqRecorder()
	c, logs := observedConsumer(t, ConsumerConfig{Brokers: brokers, GroupID: "g"},
		func(_ context.Context, m Message) error { seen.add(m.Key, parseSeq(t, m)); return nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runChecked(t, ctx, c) }()
	seen.waitCount(t, 12, 20*time.Second)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	for _, e := range logs.All() {
		if e.Level >= zapcore.WarnLevel {
			t.Errorf("clean run logged %s %q %v", e.Level, e.Message, e.ContextMap())
		}
	}
	if logs.FilterMessage("consumer stopped").Len() != 1 {
		t.Error("no \"consumer stopped\" line")
	}
}

// A consumer started before its broker joins the group within about a
// second of the broker coming up: a failed join is retried after half a
// second, not kafka-go's default 5s.
func TestConsumerJoinsSoonAfterTheBrokerComesUp(t *testing.T) {
	t.Parallel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
	seen := newSeqRecorder()
	c := unitConsumer(t, ConsumerConfig{Brokers: []string{addr}},
		func(_ context.Context, m Message) error { seen.add(m.Key, parseSeq(t, m)); return nil })
	refused := make(chan struct{}, 1)
	dial := c.dial
	c.dial = func(ctx context.Context, network, a string) (net.Conn, error) {
		conn, err := dial(ctx, network, a)
		if err != nil {
			select {
			case refused <- struct{}{}:
			default:
			}
		}
		return conn, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = runChecked(t, ctx, c) }()
	defer func() { cancel(); await(t, done, 30*time.Second, "Run to return") }()
	await(t, refused, 10*time.Second, "a refused dial")
	k, err := embedded.StartKafka(addr, 1, testTopic)
	if err != nil {
		t.Fatalf("start kafka on %s: %v", addr, err)
	}
	t.Cleanup(k.Close)
	up := time.Now()
	publish(t, newTestProducer(t, []string{addr}), sequenced(1, 1))
	seen.waitCount(t, 1, 20*time.Second)
	if took := time.Since(up); took > 3*time.Second {
		t.Errorf("first record handled %s after the broker came up, want within 3s", took)
	}
	t.Logf("first record handled %s after the broker came up", time.Since(up))
}

// Under a sustained backlog of a few keys the ready queue never empties (a
// key goes back at its end when its record finishes), yet its array stays
// bounded by the keys ready, not by the records handled.
func TestKeyPoolReadyQueueStaysBoundedByKeys(t *testing.T) {
	t.Parallel()
	const keys, records = 2, 20_000
	var maxCap int
	c := unitConsumer(t, ConsumerConfig{}, nil)
	c.h = func(context.Context, Message) error {
		c.pool.mu.Lock()
		maxCap = max(maxCap, cap(c.pool.ready))
		c.pool.mu.Unlock()
		return nil
	}
	p := newTestPartition(0)
	for o := range int64(records) {
		if !c.pool.add(c, p, msgAt(o, "k"+strconv.Itoa(int(o)%keys), "v"), records, 1<<30) {
			t.Fatalf("offset %d refused", o)
		}
	}
	startWorkers(t, c, 1)
	waitFor(t, 20*time.Second, func() error {
		if got := p.offsets.uncommitted(); got[0] != records {
			return testutil.Errorf("commit point %v, want %d", got, records)
		}
		return nil
	})
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	if bound := 4*keys + 4; maxCap > bound || cap(c.pool.ready) > bound {
		t.Errorf("ready queue's array reached %d entries (%d at the end) for %d keys, want at most %d",
			maxCap, cap(c.pool.ready), keys, bound)
	}
}
