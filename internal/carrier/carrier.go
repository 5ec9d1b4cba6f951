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
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/mqpb"
)

// Config is carrier's configuration.
type Config struct {
	Brokers   []string
	TaskTopic string
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
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
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
}

// Validate names the first bad setting.
func (c *Config) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return errors.New("carrier kafka-brokers: must be set")
	case c.Workers < 1:
		return fmt.Errorf("carrier workers: %d, must be at least 1", c.Workers)
	case c.AckWait < 10*time.Millisecond:
		return fmt.Errorf("carrier ack-wait: %s, must be at least 10ms", c.AckWait)
	}
	return nil
}

// Boats finds the client of the boat holding a session; found is false when
// the boat is not registered.
type Boats interface {
	Client(ctx context.Context, boatID string) (client boatpb.BoatClient, found bool, err error)
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
	return &Carrier{cfg: cfg, log: log.With(zap.String("component", "carrier")), metrics: m,
		sessions: sessions, offline: off, boats: boats, queue: q}, nil
}

// Run consumes the task topic until ctx ends. Offsets are committed only up
// to the lowest task not yet finished.
func (c *Carrier) Run(ctx context.Context) error {
	consumer := queue.NewConsumer(queue.ConsumerConfig{
		Brokers: c.cfg.Brokers, GroupID: c.cfg.GroupID, Topic: c.cfg.TaskTopic, Workers: c.cfg.Workers,
		OnLag: func(lag int64) { c.metrics.ConsumerLag.WithLabelValues(c.cfg.TaskTopic).Set(float64(lag)) },
	}, c.Handle, c.log)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return consumer.Run(gctx) })
	c.log.Info("carrier consuming", zap.String("topic", c.cfg.TaskTopic), zap.String("group", c.cfg.GroupID))
	return g.Wait()
}

// Handle processes one task record. An error means "not done yet": the
// consumer retries the record and does not commit past it.
func (c *Carrier) Handle(ctx context.Context, m queue.Message) error {
	var p mqpb.Payload
	if err := proto.Unmarshal(m.Value, &p); err != nil {
		// A record no version of gomsg wrote: retrying cannot help.
		c.log.Error("dropping undecodable task", zap.Int("partition", m.Partition), zap.Int64("offset", m.Offset), zap.Error(err))
		return nil
	}
	var kind string
	var err error
	switch body := p.GetBody().(type) {
	case *mqpb.Payload_ToUid:
		kind, err = "to_uid", c.toUid(ctx, &p, body.ToUid)
	case *mqpb.Payload_KickoutSession:
		kind, err = "kickout_session", c.kickout(ctx, body.KickoutSession)
	case *mqpb.Payload_SendOfflineToSession:
		kind, err = "send_offline_to_session", c.sendOffline(ctx, body.SendOfflineToSession)
	default:
		c.log.Error("dropping task of unknown kind", zap.Int64("task_seq", p.GetSeq()), zap.String("key", m.Key))
		kind = "unknown"
	}
	result := "ok"
	if err != nil {
		result = "error"
		c.countBackendError(err)
	}
	c.metrics.TasksProcessed.WithLabelValues(kind, result).Inc()
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
		c.metrics.BackendErrors.WithLabelValues("kafka", "publish").Inc()
	}
}

func isRedisErr(err error) bool {
	var re redis.Error
	return errors.As(err, &re) || strings.Contains(err.Error(), "offline:")
}
