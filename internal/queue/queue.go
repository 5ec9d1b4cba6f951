// Package queue is gomsg's queue layer: a batching Producer that returns once
// the brokers acknowledged every record, a group Consumer that handles the
// records of one key strictly in order while different keys run in parallel
// and commits only offsets that are finished (at-least-once), and
// EnsureTopics for creating the topics at start-up. It speaks to Kafka through
// github.com/segmentio/kafka-go (the default) and to NATS JetStream through
// github.com/nats-io/nats.go (JetStream, NATSConsumer), with the same
// guarantees.
package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/outage"
)

// ErrUnavailable is wrapped into every error Publish returns: the records
// may or may not have been written, and the caller should report a temporary
// failure (gRPC Unavailable) and let its client retry.
var ErrUnavailable = errors.New("queue: unavailable")

// ErrInvalidRecord is returned by Publish for a record that can never be
// written (no topic, larger than the broker accepts). Retrying does not help.
var ErrInvalidRecord = errors.New("queue: invalid record")

// Record is one message to publish. Records with the same Key go to the same
// partition (murmur2, Kafka's default partitioner) and so are consumed in the
// order they were published. An empty Key means "no key": the record goes to
// a random partition.
type Record struct {
	Topic   string
	Key     string
	Value   []byte
	Headers map[string]string
}

// Message is one consumed record.
type Message struct {
	Topic     string
	Partition int
	Offset    int64
	Key       string
	Value     []byte
	Headers   map[string]string
	Time      time.Time
}

// Handler processes one message. Returning an error means "not done": the
// consumer retries the same message with capped, jittered exponential backoff
// until it succeeds or the consumer stops, and never commits past it.
type Handler func(ctx context.Context, m Message) error

// Runner is a consumer: it consumes until ctx ends, then finishes what it
// handles, commits and returns.
type Runner interface {
	Run(ctx context.Context) error
}

// NewConsumerFunc makes a consumer; a service takes one to run on either
// queue. NewKafkaConsumer is Kafka's, JetStream.Consumer NATS's.
type NewConsumerFunc func(cfg ConsumerConfig, h Handler, log *zap.Logger) Runner

// NewKafkaConsumer is NewConsumer as a NewConsumerFunc.
func NewKafkaConsumer(cfg ConsumerConfig, h Handler, log *zap.Logger) Runner {
	return NewConsumer(cfg, h, log)
}

func toKafkaHeaders(h map[string]string) []kafka.Header {
	if len(h) == 0 {
		return nil
	}
	out := make([]kafka.Header, 0, len(h))
	for k, v := range h {
		out = append(out, kafka.Header{Key: k, Value: []byte(v)})
	}
	return out
}

// kafkaLogger adapts zap to kafka-go's printf-style error logger: the
// message stays static and kafka-go's formatted text becomes a field. Its
// routine chatter (read timeouts of an idle fetch, rebalances) goes to debug
// level; a line saying the brokers cannot be reached is a failure of tr,
// which logs the outage once.
func kafkaLogger(log *zap.Logger, msg string, tr *outage.Tracker) kafka.Logger {
	return kafka.LoggerFunc(func(format string, args ...any) {
		detail := fmt.Sprintf(format, args...)
		if unreachable(detail) {
			tr.Fail(errors.New(detail))
			return
		}
		log.Debug(msg, zap.String("detail", detail))
	})
}

// kafkaInfoLogger adapts kafka-go's informational logger: its lines go to
// debug level, and a consumer (re)joining its group ends an outage of tr.
func kafkaInfoLogger(log *zap.Logger, msg string, tr *outage.Tracker) kafka.Logger {
	return kafka.LoggerFunc(func(format string, args ...any) {
		detail := fmt.Sprintf(format, args...)
		if strings.HasPrefix(detail, "joined group") || strings.HasPrefix(detail, "subscribed to topics") {
			tr.OK()
		}
		log.Debug(msg, zap.String("detail", detail))
	})
}

// unreachable reports whether a kafka-go log line says that brokers could not
// be reached (as opposed to an idle fetch timing out or a rebalance).
func unreachable(line string) bool {
	for _, s := range []string{"connection refused", "no such host", "network is unreachable",
		"connection reset", "broken pipe", "Broker Not Available", "no route to host"} {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}
