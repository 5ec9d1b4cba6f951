// Package carrier consumes gomsg's task topic and does the work: it delivers
// ToUid tasks to the boats holding the user's sessions, stores messages for
// platforms that are offline, replays stored messages to sessions that
// connect, kicks sessions out, and repairs session records that point at
// sessions no boat holds.
package carrier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/tracing"
	"github.com/gomsg/gomsg/internal/unseen"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// Config is carrier's configuration.
type Config struct {
	// Receipts records delivery steps (--receipts-topic); nil: off.
	Receipts *receipt.Recorder
	// Tracked remembers the offline messages that asked for receipts, for
	// the steps the offline store reports by seq alone (EXPIRED); nil:
	// every such seq gets its receipt while receipts are on.
	Tracked *receipt.Tracked
	Brokers []string
	// KafkaSecurity is SASL and TLS towards the brokers.
	KafkaSecurity queue.Security
	TaskTopic     string
	// NotifyTopic receives a Notification task per platform not delivered
	// online whose messages ask for one (horn consumes it).
	NotifyTopic string
	GroupID     string
	// Workers is how many users are served in parallel.
	Workers   int
	Platforms platform.Set
	// AckWait is how long a client has to ACK a NEED_ACK message.
	AckWait time.Duration
	// CallTimeout bounds a boat call beyond AckWait.
	CallTimeout time.Duration
	// RetryTopic takes tasks whose work failed in part; DeadLetterTopic
	// takes them after MaxRetries retries.
	RetryTopic      string
	DeadLetterTopic string
	MaxRetries      int
	// RetryBackoffMin and RetryBackoffMax bound the wait before a retry
	// (exponential in the retry count, jittered).
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
	// Consumer bounds the consumer's buffer per partition and sets its
	// group session timeout.
	Consumer queue.ConsumerSettings
	// NewConsumer makes the consumers (--queue); nil: Kafka's.
	NewConsumer queue.NewConsumerFunc
	// BroadcastTopic carries Broadcast tasks, one record per room keyed by
	// the room (--broadcast-topic, a Backends flag; default
	// "gomsg.broadcast"); its consumer group is GroupID+"-broadcast".
	BroadcastTopic string
	// BroadcastWorkers is how many rooms' broadcasts are handed to the
	// boats at once (--broadcast-workers, default 16).
	BroadcastWorkers int
	// BroadcastAttempts is how many times a broadcast is tried on one boat
	// before that boat's members miss it (--broadcast-attempts, default 3).
	BroadcastAttempts int
	// DeliveryRetention is how long carrier keeps a seq's receipts for
	// GetDelivery after its last one (--delivery-retention); the consumer
	// that keeps them runs with the receipts topic (internal/app).
	DeliveryRetention time.Duration
	// Unseen holds the notify-if-unseen timer; nil: a push that asks for it
	// is notified at once, as one that does not.
	Unseen *unseen.Store
	// UnseenPollInterval is how often the timer is polled
	// (--unseen-poll-interval, default 1s); UnseenLease how long a claimed
	// entry waits for its publish before it is due again (default 30s).
	UnseenPollInterval time.Duration
	UnseenLease        time.Duration
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	c.Consumer.Defaults()
	if c.TaskTopic == "" {
		c.TaskTopic = "gomsg.tasks"
	}
	if c.NotifyTopic == "" {
		c.NotifyTopic = "gomsg.notify"
	}
	if c.GroupID == "" {
		c.GroupID = "gomsg-carrier"
	}
	if c.Workers == 0 {
		c.Workers = 256
	}
	if len(c.Platforms.Names()) == 0 {
		c.Platforms = platform.MustParse(platform.DefaultSpec)
	}
	if c.AckWait == 0 {
		c.AckWait = 10 * time.Second
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.RetryTopic == "" {
		c.RetryTopic = c.TaskTopic + ".retry"
	}
	if c.DeadLetterTopic == "" {
		c.DeadLetterTopic = c.TaskTopic + ".dlq"
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 5
	}
	if c.RetryBackoffMin == 0 {
		c.RetryBackoffMin = time.Second
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = 30 * time.Second
	}
	if c.BroadcastTopic == "" {
		c.BroadcastTopic = "gomsg.broadcast"
	}
	if c.BroadcastWorkers == 0 {
		c.BroadcastWorkers = 16
	}
	if c.BroadcastAttempts == 0 {
		c.BroadcastAttempts = 3
	}
	if c.DeliveryRetention == 0 {
		c.DeliveryRetention = receipt.DefaultRetention
	}
	if c.UnseenPollInterval == 0 {
		c.UnseenPollInterval = time.Second
	}
	if c.UnseenLease == 0 {
		c.UnseenLease = 30 * time.Second
	}
}

// Validate names the first bad setting.
func (c *Config) Validate() error {
	if err := c.Consumer.Validate(); err != nil {
		return err
	}
	switch {
	case len(c.Brokers) == 0 && c.NewConsumer == nil:
		return errors.New("--kafka-brokers: must be set")
	case c.Workers < 1:
		return fmt.Errorf("--workers: %d, must be at least 1", c.Workers)
	case c.AckWait < 10*time.Millisecond:
		return fmt.Errorf("--ack-wait: %s, must be at least 10ms", c.AckWait)
	case c.MaxRetries < 0:
		return fmt.Errorf("--max-retries: %d, must not be negative", c.MaxRetries)
	case c.RetryBackoffMin <= 0 || c.RetryBackoffMax < c.RetryBackoffMin:
		return fmt.Errorf("--retry-backoff-min/--retry-backoff-max: %s/%s, want 0 < min <= max", c.RetryBackoffMin, c.RetryBackoffMax)
	case c.BroadcastWorkers < 1:
		return fmt.Errorf("--broadcast-workers: %d, must be at least 1", c.BroadcastWorkers)
	case c.BroadcastAttempts < 1:
		return fmt.Errorf("--broadcast-attempts: %d, must be at least 1", c.BroadcastAttempts)
	case c.DeliveryRetention < 0:
		return fmt.Errorf("--delivery-retention: %s, must be positive", c.DeliveryRetention)
	case c.UnseenPollInterval < time.Millisecond:
		return fmt.Errorf("--unseen-poll-interval: %s, must be at least 1ms", c.UnseenPollInterval)
	case c.UnseenLease < 2*time.Millisecond:
		return fmt.Errorf("unseen lease: %s, must be at least 2ms", c.UnseenLease)
	}
	return nil
}

// Boats finds the client of the boat holding a session; found is false when
// the boat is not registered. IDs lists the boats registered now (a
// broadcast goes to each).
type Boats interface {
	Client(ctx context.Context, boatID string) (client boatpb.BoatClient, found bool, err error)
	IDs() []string
}

// Carrier is the delivery service.
type Carrier struct {
	cfg      Config
	log      *zap.Logger
	metrics  *metrics.Metrics
	sessions *session.Store
	offline  *offline.Store
	boats    Boats
	queue    Publisher
	replays  replayLocks  // one replay at a time per uid and platform
	failing  failingBoats // boats given up on by a broadcast since they last answered

	unseen *unseen.Timer // notify-if-unseen timer; nil without cfg.Unseen

	// ackWait is cfg.AckWait as every PushMessagesRequest carries it, made
	// once rather than per push; requests only read it.
	ackWait *durationpb.Duration
}

// Publisher is what carrier needs of the queue to publish follow-up tasks
// (notifications, retries, dead letters).
type Publisher interface {
	Publish(ctx context.Context, recs ...queue.Record) error
}

// New builds a carrier.
func New(cfg Config, log *zap.Logger, m *metrics.Metrics, sessions *session.Store, off *offline.Store, boats Boats, q Publisher) (*Carrier, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Carrier{cfg: cfg, log: log.With(zap.String("component", "carrier")), metrics: m,
		sessions: sessions, offline: off, boats: boats, queue: q, ackWait: durationpb.New(cfg.AckWait)}
	if cfg.Unseen != nil {
		t, err := unseen.New(unseen.Config{Topic: cfg.NotifyTopic, PollInterval: cfg.UnseenPollInterval, Lease: cfg.UnseenLease},
			log, m, cfg.Unseen, q, cfg.Receipts)
		if err != nil {
			return nil, err
		}
		c.unseen = t
	}
	return c, nil
}

// CancelUnseen cancels uid's notify-if-unseen notifications about seqs: a
// session ACKed them (see unseen.Timer.Cancel).
func (c *Carrier) CancelUnseen(ctx context.Context, uid string, seqs []int64) error {
	if c.unseen == nil {
		return nil
	}
	return c.unseen.Cancel(ctx, uid, seqs)
}

// Run consumes the task topic, the retry topic and the broadcast topic until
// ctx ends. Offsets are committed only up to the lowest task not yet
// finished.
func (c *Carrier) Run(ctx context.Context) error {
	newConsumer := c.cfg.NewConsumer
	if newConsumer == nil {
		newConsumer = queue.NewKafkaConsumer
	}
	consume := func(topic, group string, workers int, h queue.Handler) queue.Runner {
		return newConsumer(c.cfg.Consumer.Apply(queue.ConsumerConfig{
			Brokers: c.cfg.Brokers, GroupID: group, Topic: topic, Workers: workers, Security: c.cfg.KafkaSecurity,
			OnLag:           func(lag int64) { c.metrics.ConsumerLag.WithLabelValues(topic).Set(float64(lag)) },
			OnBufferedBytes: func(n int64) { c.metrics.ConsumerBuffered.WithLabelValues(topic).Set(float64(n)) },
			OnResumeWait:    c.metrics.ResumeWaits.WithLabelValues(topic).Inc,
			OnError:         func(op string, _ error) { c.metrics.QueueError(op).Inc() },
		}), h, c.log)
	}
	main := consume(c.cfg.TaskTopic, c.cfg.GroupID, c.cfg.Workers, c.Handle)
	retry := consume(c.cfg.RetryTopic, c.cfg.GroupID+"-retry", max(1, c.cfg.Workers/4), c.handleRetry)
	bcast := consume(c.cfg.BroadcastTopic, c.cfg.GroupID+"-broadcast", c.cfg.BroadcastWorkers, c.HandleBroadcast)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return main.Run(gctx) })
	g.Go(func() error { return retry.Run(gctx) })
	g.Go(func() error { return bcast.Run(gctx) })
	if c.unseen != nil {
		g.Go(func() error { return c.unseen.Run(gctx) })
	}
	c.log.Info("carrier consuming", zap.String("topic", c.cfg.TaskTopic), zap.String("retry_topic", c.cfg.RetryTopic),
		zap.String("broadcast_topic", c.cfg.BroadcastTopic), zap.String("group", c.cfg.GroupID))
	return g.Wait()
}

// Handle processes one task record. An error means "not done yet": the
// consumer retries the record and does not commit past it. A task whose
// work Kafka can never take is set aside (setAside), never retried.
func (c *Carrier) Handle(ctx context.Context, m queue.Message) error {
	var p mqpb.Payload
	if err := proto.Unmarshal(m.Value, &p); err != nil {
		// A record no version of gomsg wrote: retrying cannot help.
		c.log.Error("dropping undecodable task", zap.Int("partition", m.Partition), zap.Int64("offset", m.Offset), zap.Error(err))
		return nil
	}
	return c.setAside(ctx, m, c.process(tracing.Extract(ctx, m.Headers), &p, m.Key))
}

// partial is a task whose work failed in part: retry the reduced body.
type partial struct {
	reason    error
	body      *mqpb.Payload // the task to retry (body reduced where it applies)
	platforms []string
}

// process runs one task. A returned error means nothing was done that a
// retry of the same record could not redo (a backend down): the consumer
// retries the record in place. Work that failed in part is republished to
// the retry topic instead, so the partition moves on. The task's receipts
// are published, in one call, before it counts as done: when Kafka refuses
// them the task is tried again, and publishes them again with the same ids.
func (c *Carrier) process(ctx context.Context, p *mqpb.Payload, key string) error {
	ctx, span := tracing.Start(ctx, "carrier.task", trace.SpanKindConsumer)
	defer span.End()
	// Attributes cost allocations on every task; without a tracer nothing
	// keeps them.
	recording := span.IsRecording()
	if recording {
		span.SetAttributes(attribute.String("gomsg.uid", key), attribute.Int64("gomsg.task_seq", p.GetSeq()),
			attribute.Int("gomsg.retry_count", int(p.GetRetryCount())))
	}
	var kind string
	var part *partial
	var rs []*receiptpb.Receipt
	var err error
	switch body := p.GetBody().(type) {
	case *mqpb.Payload_ToUid:
		kind = "to_uid"
		part, rs, err = c.toUid(ctx, p, body.ToUid)
	case *mqpb.Payload_KickoutSession:
		kind = "kickout_session"
		part, err = c.kickout(ctx, p, body.KickoutSession)
	case *mqpb.Payload_SendOfflineToSession:
		kind = "send_offline_to_session"
		part, err = c.sendOffline(ctx, p, body.SendOfflineToSession)
	default:
		c.log.Error("dropping task of unknown kind", zap.Int64("task_seq", p.GetSeq()), zap.String("key", key))
		kind = "unknown"
	}
	switch {
	case err == nil && part != nil:
		err = c.retryLater(ctx, part.body, key, part.reason, part.platforms, rs)
	case err == nil:
		err = c.cfg.Receipts.Record(ctx, rs...)
	}
	result := "ok"
	switch {
	case err != nil:
		result = "error"
		c.countBackendError(err)
	case part != nil:
		result = "partial"
	}
	c.metrics.TasksProcessed.WithLabelValues(kind, result).Inc()
	if recording {
		span.SetAttributes(attribute.String("gomsg.task_kind", kind), attribute.String("gomsg.result", result))
	}
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	return err
}

// countBackendError counts a failure by the backend it came from.
func (c *Carrier) countBackendError(err error) {
	switch {
	case errors.Is(err, session.ErrUnavailable):
		c.metrics.BackendErrors.WithLabelValues("redis", "sessions").Inc()
	case isRedisErr(err):
		c.metrics.BackendErrors.WithLabelValues("redis", "offline").Inc()
	case errors.Is(err, queue.ErrUnavailable):
		c.metrics.QueueError("publish").Inc()
	}
}

func isRedisErr(err error) bool {
	var re redis.Error
	return errors.As(err, &re) || strings.Contains(err.Error(), "offline:")
}
