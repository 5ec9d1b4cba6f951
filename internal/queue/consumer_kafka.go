package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/outage"
)

// ConsumerConfig configures a Consumer. Zero values take the defaults.
type ConsumerConfig struct {
	Brokers []string
	GroupID string
	Topic   string
	// Workers is how many messages are handled in parallel; all messages
	// with one key go to the same worker. Default 64.
	Workers int
	// QueueSize is the number of messages waiting per worker; when a
	// worker's queue is full, fetching pauses. Default 64.
	QueueSize int
	// CommitInterval is how often finished offsets are committed. Default
	// 200ms.
	CommitInterval time.Duration
	// MinBytes and MaxBytes bound a fetch response. Defaults 1 and 1MB.
	MinBytes int
	MaxBytes int
	// MaxWait is how long the broker may hold a fetch waiting for MinBytes.
	// Stopping the consumer waits up to MaxWait too. Default 250ms.
	MaxWait time.Duration
	// HeartbeatInterval and SessionTimeout are the consumer group's
	// timings. Defaults 1s and 30s.
	HeartbeatInterval time.Duration
	SessionTimeout    time.Duration
	// RetryBackoffMin and RetryBackoffMax bound the jittered exponential
	// backoff between attempts of a failing message. Defaults 50ms and 5s.
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
	// DrainTimeout is how long handlers already running may take to finish
	// once Run's context is done; then their context is cancelled. Default
	// 5s.
	DrainTimeout time.Duration
	// OnLag, when set, is called every CommitInterval with the reader's
	// current lag (records behind the partitions' high watermarks).
	OnLag func(lag int64)
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
	if c.QueueSize <= 0 {
		c.QueueSize = 64
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
	def(&c.SessionTimeout, 30*time.Second)
	def(&c.RetryBackoffMin, 50*time.Millisecond)
	def(&c.RetryBackoffMax, 5*time.Second)
	def(&c.DrainTimeout, 5*time.Second)
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
	}
	return nil
}

// Consumer consumes one topic as a member of a consumer group. Messages with
// the same key are handled one at a time in offset order; different keys are
// handled in parallel by Workers goroutines. Offsets are committed only up to
// the lowest message not yet handled, so delivery is at-least-once.
type Consumer struct {
	cfg    ConsumerConfig
	h      Handler
	log    *zap.Logger
	outage *outage.Tracker
}

// NewConsumer returns a consumer that calls h for every message. Run starts it.
func NewConsumer(cfg ConsumerConfig, h Handler, log *zap.Logger) *Consumer {
	cfg = cfg.withDefaults()
	log = log.Named("queue").With(zap.String("topic", cfg.Topic), zap.String("group", cfg.GroupID))
	return &Consumer{cfg: cfg, h: h, log: log, outage: outage.New(log, "kafka")}
}

// Run fetches, dispatches and commits until ctx is done. Then it stops
// fetching, lets handlers already running finish (up to DrainTimeout), commits
// what is finished and returns nil. Messages fetched but not started are left
// uncommitted, for the next member of the group. Run must not be called again
// while it runs.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.cfg.Validate(); err != nil {
		return err
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           c.cfg.Brokers,
		GroupID:           c.cfg.GroupID,
		Topic:             c.cfg.Topic,
		MinBytes:          c.cfg.MinBytes,
		MaxBytes:          c.cfg.MaxBytes,
		MaxWait:           c.cfg.MaxWait,
		HeartbeatInterval: c.cfg.HeartbeatInterval,
		SessionTimeout:    c.cfg.SessionTimeout,
		StartOffset:       kafka.FirstOffset,
		// Commits are synchronous: this consumer decides what and when to
		// commit, and wants to know whether a commit succeeded.
		CommitInterval: 0,
		ErrorLogger:    kafkaLogger(c.log, "kafka reader", c.outage),
		Logger:         kafkaInfoLogger(c.log, "kafka reader", c.outage),
		Dialer:         c.cfg.Security.dialer(),
	})
	defer func() {
		if err := r.Close(); err != nil {
			c.log.Warn("close kafka reader", zap.Error(err))
		}
	}()

	offsets := newOffsetTracker()
	// Handlers get a context that outlives ctx by up to DrainTimeout, so a
	// message already being handled at shutdown can finish.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()

	queues := make([]chan kafka.Message, c.cfg.Workers)
	var workers errgroup.Group
	for i := range queues {
		q := make(chan kafka.Message, c.cfg.QueueSize)
		queues[i] = q
		workers.Go(func() error {
			c.work(ctx, hctx, q, offsets)
			return nil
		})
	}
	var committer errgroup.Group
	committer.Go(func() error {
		c.commitLoop(ctx, r, offsets)
		return nil
	})

	c.fetchLoop(ctx, r, offsets, queues)

	for _, q := range queues {
		close(q)
	}
	drain := time.AfterFunc(c.cfg.DrainTimeout, hcancel)
	_ = workers.Wait()
	drain.Stop()
	_ = committer.Wait()

	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := c.commit(cctx, r, offsets); err != nil {
		c.log.Warn("final commit failed; uncommitted messages will be delivered again", zap.Error(err))
	}
	c.log.Info("consumer stopped", zap.Int("unfinished", offsets.inFlight()))
	return nil
}

// fetchLoop reads messages and hands each to the worker of its key until ctx
// is done. A full worker queue blocks it, which pauses fetching.
func (c *Consumer) fetchLoop(ctx context.Context, r *kafka.Reader, offsets *offsetTracker, queues []chan kafka.Message) {
	retry := c.newBackoff()
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.outage.Fail(fmt.Errorf("fetch: %w", err))
			if !backoff.Sleep(ctx, retry.next()) {
				return
			}
			continue
		}
		retry.reset()
		c.outage.OK()
		if !offsets.track(m.Partition, m.Offset) {
			continue
		}
		select {
		case queues[workerFor(m.Key, len(queues))] <- m:
		case <-ctx.Done():
			// Left tracked and unfinished: nothing at or after it is
			// committed, and the next member of the group gets it.
			return
		}
	}
}

// work handles the messages of one queue in order. Once ctx is done it
// starts no new message.
func (c *Consumer) work(ctx, hctx context.Context, q <-chan kafka.Message, offsets *offsetTracker) {
	for m := range q {
		if ctx.Err() != nil {
			continue // drain the queue; these stay uncommitted
		}
		if c.handle(ctx, hctx, m) {
			offsets.done(m.Partition, m.Offset)
		}
	}
}

// handle calls the handler until it succeeds and reports whether it did. It
// stops retrying when ctx is done.
func (c *Consumer) handle(ctx, hctx context.Context, km kafka.Message) bool {
	m := fromKafkaMessage(km)
	retry := c.newBackoff()
	for attempt := 1; ; attempt++ {
		err := c.h(hctx, m)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false // stopping: the message stays uncommitted
		}
		c.log.Warn("handler failed; retrying",
			zap.Int("partition", m.Partition), zap.Int64("offset", m.Offset),
			zap.String("key", m.Key), zap.Int("attempt", attempt), zap.Error(err))
		if !backoff.Sleep(ctx, retry.next()) {
			return false
		}
	}
}

// commitLoop commits finished offsets every CommitInterval until ctx is done.
func (c *Consumer) commitLoop(ctx context.Context, r *kafka.Reader, offsets *offsetTracker) {
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.commit(ctx, r, offsets); err != nil && ctx.Err() == nil {
				c.outage.Fail(fmt.Errorf("commit (will retry): %w", err))
			}
			if c.cfg.OnLag != nil {
				c.cfg.OnLag(r.Stats().Lag)
			}
		}
	}
}

// commit commits, per partition, the lowest offset not yet finished.
func (c *Consumer) commit(ctx context.Context, r *kafka.Reader, offsets *offsetTracker) error {
	points := offsets.uncommitted()
	if len(points) == 0 {
		return nil
	}
	msgs := make([]kafka.Message, 0, len(points))
	for partition, next := range points {
		// kafka-go commits a message's offset + 1.
		msgs = append(msgs, kafka.Message{Topic: c.cfg.Topic, Partition: partition, Offset: next - 1})
	}
	if err := r.CommitMessages(ctx, msgs...); err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	offsets.committed(points)
	return nil
}

// workerFor maps a key to one of n workers.
func workerFor(key []byte, n int) int {
	// FNV-1a, inline to keep the fetch loop free of allocations.
	h := uint32(2166136261)
	for _, b := range key {
		h ^= uint32(b)
		h *= 16777619
	}
	return int(h % uint32(n))
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
