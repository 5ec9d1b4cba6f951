package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/outage"
)

// ProducerConfig configures a Producer. Zero values take the defaults.
type ProducerConfig struct {
	Brokers []string
	// BatchTimeout is how long a partition's batch waits for more records
	// before it is sent. Default 2ms (kafka-go's own default is 1s, which
	// makes a lone synchronous write take a second).
	BatchTimeout time.Duration
	// BatchSize is the most records sent to one partition in one request.
	// Default 1000.
	BatchSize int
	// WriteTimeout bounds one Publish call, retries included. Default 10s.
	WriteTimeout time.Duration
	// Security is SASL and TLS towards the brokers.
	Security Security
}

func (c ProducerConfig) withDefaults() ProducerConfig {
	if c.BatchTimeout <= 0 {
		c.BatchTimeout = 2 * time.Millisecond
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 1000
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	return c
}

// smallBatch is the batch size of the writer for calls of a few records.
// kafka-go allocates a batch's full capacity up front (BatchSize messages):
// with 1,000 that is ~50 KB for every lone record, and most pushes are one
// record per uid. Calls with more records take the large-batch writer.
const smallBatch = 32

// Producer publishes records to Kafka. It is safe for concurrent use;
// concurrent Publish calls share batches.
type Producer struct {
	cfg       ProducerConfig
	transport *kafka.Transport
	outage    *outage.Tracker
	small     *kafka.Writer // calls of up to smallBatch records
	large     *kafka.Writer // bigger calls: a push to 10,000 uids
	// batcher writes small calls together, one request per leader; what it
	// cannot write goes to small.
	batcher *produceBatcher
}

// NewProducer returns a producer for cfg.Brokers. It connects lazily, on the
// first Publish.
func NewProducer(cfg ProducerConfig, log *zap.Logger) *Producer {
	cfg = cfg.withDefaults()
	log = log.Named("queue")
	tr := outage.New(log, "kafka")
	transport := cfg.Security.transport(5 * time.Second)
	writer := func(batch int) *kafka.Writer {
		return &kafka.Writer{
			Addr:         kafka.TCP(cfg.Brokers...),
			Balancer:     &kafka.Murmur2Balancer{},
			BatchSize:    batch,
			BatchTimeout: cfg.BatchTimeout,
			ReadTimeout:  cfg.WriteTimeout,
			WriteTimeout: cfg.WriteTimeout,
			RequiredAcks: kafka.RequireAll,
			// kafka-go retries a failed batch in the background, even after
			// Publish gave up, and Close waits for it: keep that short.
			MaxAttempts: 3,
			ErrorLogger: kafkaLogger(log, "kafka writer", tr),
			Logger:      kafkaInfoLogger(log, "kafka writer", tr),
			Transport:   transport,
		}
	}
	client := &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Transport: transport}
	return &Producer{cfg: cfg, transport: transport, outage: tr,
		small: writer(min(smallBatch, cfg.BatchSize)), large: writer(cfg.BatchSize),
		batcher: newProduceBatcher(client, cfg.BatchTimeout, cfg.WriteTimeout)}
}

// Publish writes recs and returns once the brokers acknowledged every one of
// them (acks=all), or WriteTimeout passed. A failure, even for some of the
// records only, returns an error wrapping ErrUnavailable (and ctx's error when
// ctx ended first); records may then have been written anyway, so a retry can
// duplicate them.
// A record that can never be written returns an error wrapping
// ErrInvalidRecord: nothing is written when it has no topic or is larger
// than the client sends, and the call's other records may have been written
// when the brokers refused it as larger than the topic accepts.
func (p *Producer) Publish(ctx context.Context, recs ...Record) error {
	if len(recs) == 0 {
		return nil
	}
	if len(p.cfg.Brokers) == 0 {
		return fmt.Errorf("%w: no brokers configured", ErrUnavailable)
	}
	now := time.Now()
	msgs := make([]kafka.Message, len(recs))
	for i, r := range recs {
		if r.Topic == "" {
			return fmt.Errorf("%w: record %d has no topic", ErrInvalidRecord, i)
		}
		msgs[i] = kafka.Message{
			Topic:   r.Topic,
			Value:   r.Value,
			Headers: toKafkaHeaders(r.Headers),
			Time:    now,
		}
		if r.Key != "" {
			msgs[i].Key = []byte(r.Key)
		}
	}

	wctx, cancel := context.WithTimeout(ctx, p.cfg.WriteTimeout)
	defer cancel()
	w := p.small
	if len(msgs) > smallBatch {
		w = p.large
	} else if p.batcher.write(wctx, msgs) {
		p.outage.OK()
		return nil
	}
	err := w.WriteMessages(wctx, msgs...)
	switch {
	case err == nil:
		p.outage.OK()
		return nil
	case ctx.Err() != nil: // the caller gave up
		return fmt.Errorf("%w: publish %d records: %w", ErrUnavailable, len(recs), ctx.Err())
	case wctx.Err() != nil:
		p.outage.Fail(err)
		return fmt.Errorf("%w: %d records not acknowledged within %s", ErrUnavailable, len(recs), p.cfg.WriteTimeout)
	}
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("%w: %w", ErrInvalidRecord, err)
	}
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) {
		var first, tooLarge error
		for _, e := range werrs {
			if e != nil && first == nil {
				first = e
			}
			if tooLarge == nil && errors.Is(e, kafka.MessageSizeTooLarge) {
				tooLarge = e
			}
		}
		if tooLarge != nil {
			// Larger than the topic's max.message.bytes: the brokers will
			// refuse it whenever it is retried.
			return fmt.Errorf("%w: %d of %d records not acknowledged: %w",
				ErrInvalidRecord, werrs.Count(), len(recs), tooLarge)
		}
		p.outage.Fail(first)
		return fmt.Errorf("%w: %d of %d records not acknowledged: %w",
			ErrUnavailable, werrs.Count(), len(recs), first)
	}
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		// The cluster could not be reached before any record was batched.
		// A kafka-go transport that never got the cluster's metadata keeps
		// returning that error until its next refresh (6s); dropping its
		// connection pool makes the next Publish dial again at once.
		p.transport.CloseIdleConnections()
	}
	p.outage.Fail(err)
	return fmt.Errorf("%w: publish %d records: %w", ErrUnavailable, len(recs), err)
}

// Close flushes pending batches and closes the connections. With brokers that
// do not answer it can take up to three times WriteTimeout.
func (p *Producer) Close() error {
	err := errors.Join(p.small.Close(), p.large.Close())
	p.transport.CloseIdleConnections()
	if err != nil {
		return fmt.Errorf("close kafka writer: %w", err)
	}
	return nil
}

// writes reports (and resets) how many produce requests the producer sent;
// tests use it to check that records are batched.
func (p *Producer) writes() int64 {
	return p.small.Stats().Writes + p.large.Stats().Writes + p.batcher.requests.Swap(0)
}
