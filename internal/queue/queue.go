// Package queue is gomsg's Kafka layer: a batching Producer that returns once
// the brokers acknowledged every record, a group Consumer that handles the
// records of one key strictly in order while different keys run in parallel
// and commits only offsets that are finished (at-least-once), and
// EnsureTopics for creating the topics at start-up. It speaks to Kafka through
// github.com/segmentio/kafka-go.
package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
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

func fromKafkaMessage(m kafka.Message) Message {
	var headers map[string]string
	if len(m.Headers) > 0 {
		headers = make(map[string]string, len(m.Headers))
		for _, h := range m.Headers {
			headers[h.Key] = string(h.Value)
		}
	}
	return Message{
		Topic:     m.Topic,
		Partition: m.Partition,
		Offset:    m.Offset,
		Key:       string(m.Key),
		Value:     m.Value,
		Headers:   headers,
		Time:      m.Time,
	}
}

// kafkaLogger adapts zap to kafka-go's printf-style logger: the message stays
// static and kafka-go's formatted text becomes a field.
func kafkaLogger(log *zap.Logger, msg string) kafka.Logger {
	return kafka.LoggerFunc(func(format string, args ...any) {
		log.Warn(msg, zap.String("detail", fmt.Sprintf(format, args...)))
	})
}
