package queue

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/outage"
)

// ConsumerConfig configures a Consumer. Zero values take the defaults.
type ConsumerConfig struct {
	Brokers []string
	GroupID string
	Topic   string
	// Workers is how many messages are handled in parallel. Messages wait in
	// one queue per key; a key occupies at most one worker at a time, so a
	// key whose handler blocks holds one worker and no other key. Default 64.
	Workers int
	// MaxReleased bounds the handlers running at once that gave their
	// worker back with Release (waiting for something that takes no CPU);
	// beyond it Release keeps the worker held. Default 16 × Workers.
	MaxReleased int
	// MaxResumed bounds the released handlers going on at once after their
	// wait (Resume); the others wait for a place. Default Workers / 16, at
	// least 1.
	MaxResumed int
	// QueueSize and MaxBufferedBytes bound, per assigned partition, the
	// records fetched and not yet finished (queued or being handled) and
	// their bytes (key, value and headers). A partition at either bound
	// stops fetching until its records finish; other partitions go on. A
	// single record larger than MaxBufferedBytes is still taken when its
	// partition holds nothing else. Defaults 1024 and 4 MiB.
	QueueSize        int
	MaxBufferedBytes int64
	// CommitInterval is how often finished offsets are committed. Default
	// 200ms.
	CommitInterval time.Duration
	// MinBytes and MaxBytes bound a fetch response. Defaults 1 and 1MB.
	MinBytes int
	MaxBytes int
	// MaxWait is how long the broker may hold a fetch waiting for MinBytes.
	// Default 250ms.
	MaxWait time.Duration
	// HeartbeatInterval, SessionTimeout and RebalanceTimeout are the
	// consumer group's timings. A member that dies without leaving holds its
	// partitions for about SessionTimeout; a rebalance waits up to
	// RebalanceTimeout for members to rejoin. Defaults 1s, 6s and 5s.
	HeartbeatInterval time.Duration
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	// RetryBackoffMin and RetryBackoffMax bound the jittered exponential
	// backoff between attempts of a failing message or fetch. Defaults 50ms
	// and 5s.
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
	// DrainTimeout is how long handlers already running may take to finish
	// when their partition is revoked or Run's context is done; then their
	// context is cancelled. Default 3s; it must stay below
	// RebalanceTimeout, or a draining member misses the rebalance.
	DrainTimeout time.Duration
	// OnLag, when set, is called every CommitInterval with the consumer's
	// lag (records behind the high watermarks of its partitions).
	OnLag func(lag int64)
	// OnBufferedBytes, when set, is called every CommitInterval with the
	// bytes of records fetched and not yet finished, over all partitions.
	OnBufferedBytes func(bytes int64)
	// OnResumeWait, when set, is called each time a released handler has to
	// wait in Resume for a place, with the pool's lock held: it must not
	// block.
	OnResumeWait func()
	// OnError, when set, is called for every failed fetch ("fetch") and
	// commit ("commit"). Both are retried.
	OnError func(op string, err error)
	// Security is SASL and TLS towards the brokers.
	Security Security
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Workers <= 0 {
		c.Workers = 64
	}
	if c.MaxReleased <= 0 {
		c.MaxReleased = 16 * c.Workers
	}
	if c.MaxResumed <= 0 {
		c.MaxResumed = max(1, c.Workers/16)
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 1024
	}
	if c.MaxBufferedBytes <= 0 {
		c.MaxBufferedBytes = 4 << 20
	}
	if c.MinBytes <= 0 {
		c.MinBytes = 1
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 1 << 20
	}
	def(&c.CommitInterval, 200*time.Millisecond)
	def(&c.MaxWait, 250*time.Millisecond)
	def(&c.HeartbeatInterval, time.Second)
	def(&c.SessionTimeout, 6*time.Second)
	def(&c.RebalanceTimeout, 5*time.Second)
	def(&c.RetryBackoffMin, 50*time.Millisecond)
	def(&c.RetryBackoffMax, 5*time.Second)
	def(&c.DrainTimeout, 3*time.Second)
	return c
}

// Validate reports a configuration the consumer cannot run with.
func (c ConsumerConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("queue consumer: no brokers configured")
	case c.GroupID == "":
		return errors.New("queue consumer: no group id configured")
	case c.Topic == "":
		return errors.New("queue consumer: no topic configured")
	case c.MinBytes > c.MaxBytes:
		return fmt.Errorf("queue consumer: MinBytes %d above MaxBytes %d", c.MinBytes, c.MaxBytes)
	case c.HeartbeatInterval >= c.SessionTimeout:
		return fmt.Errorf("queue consumer: heartbeat interval %s not below session timeout %s", c.HeartbeatInterval, c.SessionTimeout)
	}
	return nil
}

// ConsumerStats are a consumer's counters since it was made.
type ConsumerStats struct {
	// Generations is how many group generations this member took part in.
	Generations int64
	// FetchErrors and CommitErrors count failed fetches and commits (each
	// retried); Commits counts commits that succeeded.
	FetchErrors  int64
	CommitErrors int64
	// FetchRequests counts the fetch requests sent to the brokers: the
	// partitions' fetches that wait at the same time go as one request.
	FetchRequests int64
	Commits       int64
	// BufferedBytes and BufferedRecords are what is fetched and not yet
	// finished now; PeakPartitionBytes and PeakPartitionRecords the most one
	// partition ever held.
	BufferedBytes        int64
	BufferedRecords      int64
	PeakPartitionBytes   int64
	PeakPartitionRecords int64
	// ResumeWaiting is how many released handlers wait in Resume for a
	// place to go on now.
	ResumeWaiting int64
}

// Consumer consumes one topic as a member of a consumer group, built on
// kafka-go's ConsumerGroup: each generation's assigned partitions are fetched
// one goroutine each (gen.Start). Messages with the same key are handled one
// at a time in offset order; different keys are handled in parallel by
// Workers goroutines. Offsets are committed, per partition, only up to the
// lowest message not yet finished, so delivery is at-least-once. When a
// generation ends (a rebalance, or Run's context), every partition stops
// fetching, lets its running handlers finish (up to DrainTimeout), commits
// what is finished, and only then gives the partition up.
type Consumer struct {
	cfg    ConsumerConfig
	h      Handler
	log    *zap.Logger
	outage *outage.Tracker
	pool   *keyPool

	// Seams the tests wrap to inject failures; they default to kafka-go.
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	fetch  func(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error)
	commit func(gen *kafka.Generation, offsets map[string]map[int]int64) error
	// closeGroup ends the group membership on shutdown: by default
	// ConsumerGroup.Close, which leaves the group so the partitions are
	// reassigned at once.
	closeGroup func(cg *kafka.ConsumerGroup) error
	// batcher gathers the partitions' fetches (nil where a test set fetch).
	batcher atomic.Pointer[fetchBatcher]

	generations, fetchErrors, commitErrors, commits atomic.Int64
	peakBytes, peakRecords                          atomic.Int64
}

// NewConsumer returns a consumer that calls h for every message. Run starts it.
func NewConsumer(cfg ConsumerConfig, h Handler, log *zap.Logger) *Consumer {
	cfg = cfg.withDefaults()
	log = log.Named("queue").With(zap.String("topic", cfg.Topic), zap.String("group", cfg.GroupID))
	c := &Consumer{cfg: cfg, h: h, log: log, outage: outage.New(log, "kafka"), pool: newKeyPool()}
	c.dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	c.commit = func(gen *kafka.Generation, offsets map[string]map[int]int64) error { return gen.CommitOffsets(offsets) }
	c.closeGroup = (*kafka.ConsumerGroup).Close
	return c
}

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats {
	recs, bytes := c.pool.buffered()
	var requests int64
	if b := c.batcher.Load(); b != nil {
		requests = b.requests.Load()
	}
	return ConsumerStats{FetchRequests: requests,
		Generations: c.generations.Load(), FetchErrors: c.fetchErrors.Load(),
		CommitErrors: c.commitErrors.Load(), Commits: c.commits.Load(),
		BufferedBytes: bytes, BufferedRecords: recs,
		PeakPartitionBytes: c.peakBytes.Load(), PeakPartitionRecords: c.peakRecords.Load(),
		ResumeWaiting: c.pool.waitingToResume(),
	}
}

// Run joins the group and consumes until ctx is done. Then it ends the
// current generation the way a rebalance does (stop fetching, let running
// handlers finish up to DrainTimeout, commit what is finished), leaves the
// group so that the other members take the partitions over at once, and
// returns nil. Run must not be called again while it runs.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.cfg.Validate(); err != nil {
		return err
	}
	dialer := c.cfg.Security.dialer()
	dialer.DialFunc = c.dial
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                c.cfg.GroupID,
		Brokers:           c.cfg.Brokers,
		Dialer:            dialer,
		Topics:            []string{c.cfg.Topic},
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		SessionTimeout:    c.cfg.SessionTimeout,
		RebalanceTimeout:  c.cfg.RebalanceTimeout,
		// kafka-go waits Timeout+RebalanceTimeout for a JoinGroup answer and
		// Timeout+SessionTimeout for a SyncGroup answer, and JoinGroupBackoff
		// after a failed join. With its defaults (5s, 30s, 30s, 5s) a
		// rebalance that restarts can keep a group waiting for minutes;
		// these keep every step within a few seconds.
		Timeout:          3 * time.Second,
		JoinGroupBackoff: 500 * time.Millisecond,
		StartOffset:      kafka.FirstOffset,
		ErrorLogger:      kafkaLogger(c.log, "kafka consumer group", c.outage),
		Logger:           kafkaInfoLogger(c.log, "kafka consumer group", c.outage),
	})
	if err != nil {
		return fmt.Errorf("queue consumer: %w", err)
	}
	if c.fetch == nil {
		tr := c.cfg.Security.transport(10 * time.Second)
		tr.Dial = c.dial
		defer tr.CloseIdleConnections()
		client := &kafka.Client{Addr: kafka.TCP(c.cfg.Brokers...), Transport: tr}
		b := newFetchBatcher(c.cfg.Topic, client)
		c.batcher.Store(b)
		c.fetch = b.fetch
	}

	// Handlers get a context that outlives ctx (bounded by DrainTimeout),
	// so a message being handled at shutdown can finish.
	hctx := context.WithoutCancel(ctx)
	stopWorkers := c.startWorkers()

	refused := false // the brokers' refusal of the session timeout is logged
	for {
		gen, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				break
			}
			if errors.Is(err, kafka.InvalidSessionTimeout) {
				// Every join is refused until the setting changes (Kafka's
				// default group.min.session.timeout.ms is 6s): the consumer
				// would never consume, so this is an error, logged once.
				if !refused {
					c.log.Error("the brokers refuse the session timeout; the consumer cannot join its group until --queue-session-timeout is within their group.min/max.session.timeout.ms",
						zap.Duration("session_timeout", c.cfg.SessionTimeout), zap.Error(err))
					refused = true
				}
				continue
			}
			// kafka-go rejoins by itself (after JoinGroupBackoff where it
			// applies); this only reports why the last attempt failed.
			c.log.Debug("consumer group generation failed; rejoining", zap.Error(err))
			continue
		}
		c.startGeneration(hctx, gen)
	}
	// Ends the current generation (its partitions drain and commit before
	// Close returns) and leaves the group.
	if err := c.closeGroup(cg); err != nil {
		c.log.Warn("leave consumer group", zap.Error(err))
	}
	stopWorkers()
	if c.cfg.OnBufferedBytes != nil {
		c.cfg.OnBufferedBytes(0)
	}
	c.log.Info("consumer stopped")
	return nil
}

// startWorkers starts cfg.Workers workers on the key pool. The function it
// returns closes the pool and returns once every worker has.
func (c *Consumer) startWorkers() (stop func()) {
	var workers sync.WaitGroup
	c.pool.spawn = func() { // kp.mu is held, or no other goroutine runs yet
		workers.Add(1)
		go func() {
			defer workers.Done()
			c.pool.work(c)
		}()
	}
	c.pool.maxReleased = c.cfg.MaxReleased
	c.pool.maxResumed = c.cfg.MaxResumed
	c.pool.onResumeWait = c.cfg.OnResumeWait
	c.pool.maxSpares = c.cfg.Workers
	for range c.cfg.Workers {
		c.pool.spawn()
	}
	return func() {
		c.pool.close()
		workers.Wait()
	}
}

// generation is this member's share of one group generation.
type generation struct {
	gen     *kafka.Generation
	offsets *offsetTracker
	parts   []*partition
	// mu serialises commits, so that an older commit point never
	// overwrites a newer one.
	mu sync.Mutex
}

// startGeneration starts a fetch loop per assigned partition and the
// periodic committer, all bound to gen: kafka-go does not hand out the next
// generation before every one of them returned.
func (c *Consumer) startGeneration(hctx context.Context, gen *kafka.Generation) {
	c.generations.Add(1)
	g := &generation{gen: gen, offsets: newOffsetTracker()}
	for _, a := range gen.Assignments[c.cfg.Topic] {
		g.parts = append(g.parts, newPartition(hctx, a.ID, a.Offset, g.offsets))
	}
	c.log.Info("partitions assigned", zap.Int32("generation", gen.ID), zap.Int("partitions", len(g.parts)))
	for _, p := range g.parts {
		gen.Start(func(ctx context.Context) { c.consumePartition(ctx, g, p) })
	}
	gen.Start(func(ctx context.Context) { c.commitLoop(ctx, g) })
}

// consumePartition fetches p until the generation ends, then revokes it:
// records not started are dropped (uncommitted, for the next owner), running
// handlers get DrainTimeout to finish before their context is cancelled,
// and what finished is committed before it returns.
func (c *Consumer) consumePartition(ctx context.Context, g *generation, p *partition) {
	c.fetchLoop(ctx, p)

	c.pool.revoke(p)
	drain := time.AfterFunc(c.cfg.DrainTimeout, p.cancel)
	c.pool.waitIdle(p)
	drain.Stop()
	p.cancel()

	retry := c.newBackoff()
	for attempt := 1; ; attempt++ {
		err := c.commitPartitions(g, p)
		if err == nil {
			c.log.Debug("revoked partition committed", zap.Int("partition", p.id), zap.Int32("generation", g.gen.ID))
			return
		}
		if attempt == 3 || generationOver(err) {
			c.log.Warn("commit of a revoked partition failed; its finished records will be delivered again",
				zap.Int("partition", p.id), zap.Error(err))
			return
		}
		time.Sleep(retry.next())
	}
}

// handle calls the handler until it succeeds and reports whether it did. It
// stops retrying once p is revoked.
func (c *Consumer) handle(p *partition, m Message, sl *slot) bool {
	retry := c.newBackoff()
	ctx := context.WithValue(p.hctx, slotKey{}, sl)
	for attempt := 1; ; attempt++ {
		err := c.h(ctx, m)
		if err == nil {
			return true
		}
		if p.stop.Err() != nil {
			return false // revoked: the message stays uncommitted
		}
		c.log.Warn("handler failed; retrying",
			zap.Int("partition", m.Partition), zap.Int64("offset", m.Offset),
			zap.String("key", m.Key), zap.Int("attempt", attempt), zap.Error(err))
		if !backoff.Sleep(p.stop, retry.next()) {
			return false
		}
	}
}

// generationOver reports whether a commit error means this member may no
// longer commit for the generation, so that retrying cannot help.
func generationOver(err error) bool {
	return errors.Is(err, kafka.IllegalGeneration) || errors.Is(err, kafka.UnknownMemberId) ||
		errors.Is(err, kafka.RebalanceInProgress)
}

// commitLoop commits finished offsets every CommitInterval until the
// generation ends. A failed commit is counted, reported and retried at the
// next tick; the offsets stay uncommitted until one succeeds.
func (c *Consumer) commitLoop(ctx context.Context, g *generation) {
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.commitPartitions(g, g.parts...); err != nil && ctx.Err() == nil {
				c.outage.Fail(fmt.Errorf("commit (will retry): %w", err))
			}
			if c.cfg.OnLag != nil {
				var lag int64
				for _, p := range g.parts {
					lag += p.lag.Load()
				}
				c.cfg.OnLag(lag)
			}
			if c.cfg.OnBufferedBytes != nil {
				_, bytes := c.pool.buffered()
				c.cfg.OnBufferedBytes(bytes)
			}
		}
	}
}

// commitPartitions commits, for each of parts, the lowest offset not yet
// finished, where it moved past the last commit.
func (c *Consumer) commitPartitions(g *generation, parts ...*partition) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	all := g.offsets.uncommitted()
	points := make(map[int]int64, len(parts))
	for _, p := range parts {
		if cp, ok := all[p.id]; ok {
			points[p.id] = cp
		}
	}
	if len(points) == 0 {
		return nil
	}
	if err := c.commit(g.gen, map[string]map[int]int64{c.cfg.Topic: points}); err != nil {
		c.commitErrors.Add(1)
		err = fmt.Errorf("commit offsets: %w", err)
		if c.cfg.OnError != nil {
			c.cfg.OnError("commit", err)
		}
		return err
	}
	c.commits.Add(1)
	g.offsets.committed(points)
	return nil
}

// retries counts the consecutive failures of one loop and times the next
// wait: the consumer's capped doubling backoff, jittered to [½, 1].
type retries struct {
	policy backoff.Policy
	n      int
}

func (c *Consumer) newBackoff() *retries {
	return &retries{policy: backoff.Policy{Min: c.cfg.RetryBackoffMin, Max: c.cfg.RetryBackoffMax}}
}

func (r *retries) next() time.Duration {
	r.n++
	return backoff.Jitter(r.policy.Exp(r.n), 0.5, 1)
}

func (r *retries) reset() { r.n = 0 }
