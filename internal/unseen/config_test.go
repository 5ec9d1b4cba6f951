package unseen

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/testutil"
)

// Defaults fills only unset fields; Validate refuses, by name, a poll
// interval under 1ms, a lease under 2ms and a batch under 1, at the
// boundaries; New refuses what Validate refuses.
func TestConfig(t *testing.T) {
	t.Parallel()
	var c Config
	c.Defaults()
	if c != (Config{Topic: "gomsg.notify", PollInterval: time.Second, Lease: 30 * time.Second, Batch: 256}) {
		t.Errorf("defaults %+v", c)
	}
	set := Config{Topic: "t", PollInterval: 2 * time.Millisecond, Lease: 3 * time.Millisecond, Batch: 2}
	kept := set
	kept.Defaults()
	if kept != set {
		t.Errorf("defaults changed %+v to %+v", set, kept)
	}
	ok := Config{Topic: "t", PollInterval: time.Millisecond, Lease: 2 * time.Millisecond, Batch: 1}
	for _, tc := range []struct {
		mod     func(*Config)
		wantErr string
	}{
		{func(*Config) {}, ""},
		{func(c *Config) { c.PollInterval = time.Millisecond - 1 }, "--unseen-poll-interval: 999.999µs, must be at least 1ms"},
		{func(c *Config) { c.Lease = 2*time.Millisecond - 1 }, "unseen lease: 1.999999ms, must be at least 2ms"},
		{func(c *Config) { c.Batch = 0 }, "unseen batch: 0, must be at least 1"},
	} {
		c := ok
		tc.mod(&c)
		err := c.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
			t.Errorf("Validate(%+v) = %v, want %q", c, err, tc.wantErr)
		}
		if c.Batch > 0 { // New fills a zero batch
			if _, nerr := New(c, zaptest.NewLogger(t), metrics.New(), nil, nil, nil); (nerr == nil) != (err == nil) {
				t.Errorf("New(%+v) = %v, want Validate's %v", c, nerr, err)
			}
		}
	}
}

// Run polls at once and then every PollInterval, logs a failed poll and
// goes on, and returns nil when its context ends.
func TestRunPollsUntilCancelled(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	tm, err := New(Config{Topic: notifyTopic, PollInterval: 5 * time.Millisecond, Lease: lease}, zaptest.NewLogger(t), r.m, r.store, r.prod, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tm.Run(ctx) }()
	uid := "run-user"
	if err := tm.Schedule(t.Context(), uid, []int64{1}, time.Now(), [][]byte{notification(t, uid, "ios", 1)}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := r.count(metrics.UnseenSent); n != 1 {
			return fmt.Errorf("sent %d, want the due entry's 1", n)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil once cancelled", err)
	}
	if recs := r.published(notifyTopic); len(recs) != 1 || !strings.HasPrefix(string(recs[0].Key), uid) {
		t.Fatalf("published %d records, want 1 of %s", len(recs), uid)
	}
}

// A poll whose publish fails reports the error and leaves the entry
// scheduled, to be due again when its lease ends.
func TestPollReportsAFailedPublish(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	down := queue.NewProducer(queue.ProducerConfig{}, zaptest.NewLogger(t)) // no brokers: every publish fails
	tm, err := New(Config{Topic: notifyTopic, Lease: lease}, zaptest.NewLogger(t), r.m, r.store, down, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := tm.Schedule(t.Context(), "poll-user", []int64{1}, now, [][]byte{notification(t, "poll-user", "ios", 1)}); err != nil {
		t.Fatal(err)
	}
	if n, err := tm.Poll(t.Context(), now); n != 0 || !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("poll with Kafka down: %d sent, %v; want 0 and ErrUnavailable", n, err)
	}
	if n, err := tm.Poll(t.Context(), now.Add(2*lease)); n != 0 || err == nil {
		t.Fatalf("poll after the lease: %d sent, %v; want the entry due again and refused again", n, err)
	}
}

// Run logs a WARN for each poll that fails, with the error, and goes on
// polling: an entry Kafka cannot take is tried again at every lease.
func TestRunWarnsOfFailedPolls(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	core, logs := observer.New(zapcore.WarnLevel)
	down := queue.NewProducer(queue.ProducerConfig{}, zaptest.NewLogger(t)) // no brokers: every publish fails
	tm, err := New(Config{Topic: notifyTopic, PollInterval: 5 * time.Millisecond, Lease: 5 * time.Millisecond},
		zap.New(core), r.m, r.store, down, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.Schedule(t.Context(), "warn-user", []int64{1}, time.Now(), [][]byte{notification(t, "warn-user", "ios", 1)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tm.Run(ctx) }()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := logs.FilterMessage("unseen poll").Len(); n < 2 {
			return fmt.Errorf("%d poll warnings, want 2 or more", n)
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil once cancelled", err)
	}
	for _, e := range logs.FilterMessage("unseen poll").All() {
		err, _ := e.ContextMap()["error"].(string)
		if e.Level != zapcore.WarnLevel || !strings.Contains(err, queue.ErrUnavailable.Error()) {
			t.Fatalf("logged %s %q with error %q, want WARN with %q", e.Level, e.Message, err, queue.ErrUnavailable)
		}
	}
}

// A Run whose context has ended (the carrier is shutting down) warns of
// nothing: the poll that the shutdown cut short did not fail.
func TestRunStoppedWarnsOfNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	core, logs := observer.New(zapcore.WarnLevel)
	tm, err := New(Config{Topic: notifyTopic, Lease: lease}, zap.New(core), r.m, r.store, r.prod, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tm.Poll(ctx, time.Now()); !errors.Is(err, context.Canceled) {
		t.Fatalf("poll with its context ended: %v, want context.Canceled", err)
	}
	if err := tm.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if all := logs.All(); len(all) != 0 {
		t.Fatalf("logged %d entries (%v), want none", len(all), all)
	}
}

// A publish Kafka does not answer is given up at half the lease, so that
// the poll returns, its entries still claimed, before the lease ends and
// another poller may claim them again: the batch publish, and the entry by
// entry publish after Kafka refused a record of the batch.
func TestPollGivesUpAHungPublishWithinTheLease(t *testing.T) {
	t.Parallel()
	const hungLease = 2 * time.Second
	px := testutil.StartKafkaBehindProxy(t, 1, notifyTopic)
	prod := queue.NewProducer(queue.ProducerConfig{Brokers: []string{px.Addr()}}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = prod.Close() })
	t.Cleanup(px.Release) // before Close, which waits for kafka-go's retries
	m := metrics.New()
	tm, err := New(Config{Topic: notifyTopic, Lease: hungLease, Batch: 2}, zaptest.NewLogger(t), m, NewStore(testutil.SharedRedis(t)), prod, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	t0 := time.UnixMilli(time.Now().UnixMilli())
	uids := sameShard(3)
	if err := tm.Schedule(ctx, uids[0], []int64{1}, t0, [][]byte{notification(t, uids[0], "ios", 1)}); err != nil {
		t.Fatal(err)
	}
	px.Hold()
	poll := func(what string) {
		t.Helper()
		start := time.Now()
		n, err := tm.Poll(ctx, t0)
		if took := time.Since(start); n != 0 || !errors.Is(err, queue.ErrUnavailable) || took >= hungLease {
			t.Fatalf("%s: %d sent, %v after %s; want 0 and ErrUnavailable within the %s lease", what, n, err, took, hungLease)
		}
	}
	poll("batch publish")
	// Larger than kafka-go sends: refused before anything is sent, then the
	// other entry is published alone.
	big := append(notification(t, uids[1], "ios", 2), make([]byte, 1<<20)...)
	if err := tm.Schedule(ctx, uids[1], []int64{2}, t0, [][]byte{big}); err != nil {
		t.Fatal(err)
	}
	if err := tm.Schedule(ctx, uids[2], []int64{3}, t0, [][]byte{notification(t, uids[2], "ios", 3)}); err != nil {
		t.Fatal(err)
	}
	poll("entry by entry publish")
	if d := promtest.ToFloat64(m.UnwritableRecords.WithLabelValues("carrier", "dropped")); d != 1 {
		t.Fatalf("dropped %v, want the large entry's 1", d)
	}
	if s := promtest.ToFloat64(m.UnseenEntries.WithLabelValues("scheduled")); s != 2 {
		t.Fatalf("%v entries scheduled, want the 2 whose publish hung", s)
	}
}
