// Package horn is gomsg's notification service: it
// consumes the Notification tasks carrier publishes for platforms that were
// not reached online, looks up the user's device tokens and sends each
// through the platform's provider (APNs, FCM or the log provider).
//
// Provider answers decide what happens next: a token the provider reports as
// unregistered is removed from the registry; throttling (429), 5xx and
// network errors go to horn's retry topic, for that one device, and are
// tried again after a backoff (honouring Retry-After, capped) until
// MaxRetries, then go to the dead-letter topic with the provider's answer;
// any other rejection is dead-lettered at once.
package horn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
)

// Config is horn's configuration.
type Config struct {
	// Receipts records delivery steps (--receipts-topic); nil: off.
	Receipts *receipt.Recorder
	Brokers  []string
	// KafkaSecurity is SASL and TLS towards the brokers.
	KafkaSecurity queue.Security
	// Topic carries carrier's Notification tasks; RetryTopic horn's own
	// retries; DeadTopic what could not be sent.
	Topic      string
	RetryTopic string
	DeadTopic  string
	// GroupID is the consumer group of Topic; RetryTopic is consumed as
	// GroupID + ".retry".
	GroupID string
	// Workers is how many users (retry topic: devices) are served in
	// parallel.
	Workers   int
	Platforms platform.Set
	// Consumer bounds the consumers' buffer per partition and sets their
	// group session timeout.
	Consumer queue.ConsumerSettings
	// NewConsumer makes the consumers (--queue); nil: Kafka's.
	NewConsumer queue.NewConsumerFunc
	// MaxRetries is how many times a retryable failure is tried again
	// before the notification is dead-lettered.
	MaxRetries int
	// RetryBackoff is the wait before the first retry, doubled for each
	// further one up to RetryBackoffMax. A provider's Retry-After, when
	// longer, is honoured up to RetryAfterMax.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	RetryAfterMax   time.Duration
	// Concurrency bounds the requests in flight per provider.
	Concurrency int
	// SendTimeout bounds one provider request.
	SendTimeout time.Duration
	APNs        APNsConfig
	FCM         FCMConfig
	// LogUnconfigured serves platforms whose provider has no credentials
	// with the log provider instead of failing (`gomsg dev`).
	LogUnconfigured bool
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	c.Consumer.Defaults()
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&c.Topic, "gomsg.notify")
	def(&c.RetryTopic, "gomsg.notify.retry")
	def(&c.DeadTopic, "gomsg.notify.dead")
	def(&c.GroupID, "gomsg-horn")
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defD(&c.RetryBackoff, time.Second)
	defD(&c.RetryBackoffMax, 5*time.Minute)
	defD(&c.RetryAfterMax, 10*time.Minute)
	defD(&c.SendTimeout, 10*time.Second)
	if c.Workers == 0 {
		c.Workers = 64
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 5
	}
	if len(c.Platforms.Names()) == 0 {
		c.Platforms = platform.MustParse(platform.DefaultSpec)
	}
	c.APNs.Defaults()
	c.FCM.Defaults()
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
		return fmt.Errorf("--horn-workers: %d, must be at least 1", c.Workers)
	case c.Concurrency < 1:
		return fmt.Errorf("--notify-concurrency: %d, must be at least 1", c.Concurrency)
	case c.MaxRetries < 0:
		return fmt.Errorf("--notify-max-retries: %d, must not be negative", c.MaxRetries)
	case c.RetryBackoff < time.Millisecond || c.RetryBackoffMax < c.RetryBackoff:
		return fmt.Errorf("--notify-retry-backoff/--notify-retry-backoff-max: %s/%s, want 1ms <= backoff <= max", c.RetryBackoff, c.RetryBackoffMax)
	}
	return nil
}

// Publisher is what horn needs of the queue.
type Publisher interface {
	Publish(ctx context.Context, recs ...queue.Record) error
}

// Horn is the notification service.
type Horn struct {
	cfg       Config
	log       *zap.Logger
	metrics   *metrics.Metrics
	devices   *device.Store
	queue     Publisher
	providers map[string]*sender
}

// New builds horn and its providers. Credentials are read and checked here:
// an unreadable .p8 key or a bad service-account JSON is an error naming the
// setting.
func New(cfg Config, log *zap.Logger, m *metrics.Metrics, devices *device.Store, q Publisher) (*Horn, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Horn{cfg: cfg, log: log.With(zap.String("component", "horn")), metrics: m, devices: devices, queue: q,
		providers: map[string]*sender{}}
	add := func(p Provider) {
		h.providers[p.Name()] = newSender(p, cfg.Concurrency, cfg.SendTimeout, m, h.log)
	}
	if cfg.APNs.configured() {
		p, err := NewAPNs(cfg.APNs)
		if err != nil {
			return nil, fmt.Errorf("horn: %w", err)
		}
		add(p)
	}
	if cfg.FCM.configured() {
		p, err := NewFCM(cfg.FCM)
		if err != nil {
			return nil, fmt.Errorf("horn: %w", err)
		}
		add(p)
	}
	for _, name := range cfg.Platforms.Names() {
		pl, _ := cfg.Platforms.Get(name)
		n := pl.Notifier
		if n == "" || h.providers[n] != nil {
			continue
		}
		switch {
		case n == "log", (n == "apns" || n == "fcm") && cfg.LogUnconfigured:
			add(NewLogProvider(n, log))
			if n != "log" {
				h.log.Warn("provider has no credentials; notifications are only logged", zap.String("provider", n),
					zap.String("platform", name))
			}
		case n == "apns":
			return nil, fmt.Errorf("horn: platform %q notifies through apns: --apns-key-file or --apns-cert-file must be set", name)
		case n == "fcm":
			return nil, fmt.Errorf("horn: platform %q notifies through fcm: --fcm-credentials-file must be set", name)
		default:
			return nil, fmt.Errorf("--platforms: platform %q: unknown notifier %q (known: apns, fcm, log)", name, n)
		}
	}
	return h, nil
}

// Run consumes the notification and retry topics until ctx ends.
func (h *Horn) Run(ctx context.Context) error {
	lag := func(topic string) func(int64) {
		return func(n int64) { h.metrics.ConsumerLag.WithLabelValues(topic).Set(float64(n)) }
	}
	consumer := func(topic, group string) queue.ConsumerConfig {
		return h.cfg.Consumer.Apply(queue.ConsumerConfig{Brokers: h.cfg.Brokers, GroupID: group, Topic: topic,
			Workers: h.cfg.Workers, OnLag: lag(topic), Security: h.cfg.KafkaSecurity,
			OnBufferedBytes: func(n int64) { h.metrics.ConsumerBuffered.WithLabelValues(topic).Set(float64(n)) },
			OnError:         func(op string, _ error) { h.metrics.QueueError(op).Inc() },
		})
	}
	newConsumer := h.cfg.NewConsumer
	if newConsumer == nil {
		newConsumer = queue.NewKafkaConsumer
	}
	main := newConsumer(consumer(h.cfg.Topic, h.cfg.GroupID), h.handle, h.log)
	retry := newConsumer(consumer(h.cfg.RetryTopic, h.cfg.GroupID+".retry"),
		func(hctx context.Context, m queue.Message) error { return h.handleRetry(ctx, hctx, m) }, h.log)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return main.Run(gctx) })
	g.Go(func() error { return retry.Run(gctx) })
	names := make([]string, 0, len(h.providers))
	for n := range h.providers {
		names = append(names, n)
	}
	h.log.Info("horn consuming", zap.String("topic", h.cfg.Topic), zap.String("retry_topic", h.cfg.RetryTopic),
		zap.Strings("providers", names))
	return g.Wait()
}
