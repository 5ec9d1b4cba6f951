package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"
)

// keyHeader carries a record's key on NATS, which has none of its own.
const keyHeader = "Gomsg-Key"

// publishWindow is the most records one Publish has in flight before it
// waits for their acknowledgements (JetStream's async publisher stalls
// beyond its own limit).
const publishWindow = 1024

// murmur2 maps keys to partitions exactly as the Kafka producer does, so a
// key's partition is the same number on either queue.
var murmur2 = &kafka.Murmur2Balancer{}

// Publish writes recs and returns once JetStream stored every one (its
// PubAck). A record goes to the subject <topic>.<partition>, the partition
// chosen from the key as on Kafka (murmur2). An error wraps ErrUnavailable
// (the servers could not be reached or did not acknowledge in
// NATSConfig.WriteTimeout: some records may be stored) or ErrInvalidRecord
// (a record that can never be written).
func (j *JetStream) Publish(ctx context.Context, recs ...Record) error {
	if len(recs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, j.cfg.WriteTimeout)
	defer cancel()
	msgs := make([]*nats.Msg, len(recs))
	max := j.nc.MaxPayload()
	for i, r := range recs {
		if r.Topic == "" {
			return fmt.Errorf("%w: record %d has no topic", ErrInvalidRecord, i)
		}
		m := &nats.Msg{Data: r.Value, Header: make(nats.Header, len(r.Headers)+1)}
		for k, v := range r.Headers {
			m.Header.Set(k, v)
		}
		if r.Key != "" {
			m.Header.Set(keyHeader, r.Key)
		}
		if max > 0 && int64(len(r.Value)+len(r.Key)+headerBytes(r.Headers)) > max {
			return fmt.Errorf("%w: record %d (topic %s): %d bytes, the servers take at most %d", ErrInvalidRecord, i, r.Topic, len(r.Value), max)
		}
		parts, err := j.partitionsOf(ctx, r.Topic)
		if err != nil {
			return j.unavailable(err)
		}
		p := murmur2.Balance(kafka.Message{Key: keyBytes(r.Key)}, parts...)
		m.Subject = subject(r.Topic, p)
		msgs[i] = m
	}
	for start := 0; start < len(msgs); start += publishWindow {
		if err := j.publishWindow(ctx, msgs[start:min(len(msgs), start+publishWindow)]); err != nil {
			return err
		}
	}
	j.outage.OK()
	return nil
}

func (j *JetStream) publishWindow(ctx context.Context, msgs []*nats.Msg) error {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := j.js.PublishMsgAsync(m)
		if err != nil {
			return j.unavailable(fmt.Errorf("publish to %s: %w", m.Subject, err))
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if errors.Is(err, nats.ErrMaxPayload) {
				return fmt.Errorf("%w: %v", ErrInvalidRecord, err)
			}
			return j.unavailable(fmt.Errorf("publish to %s: %w", f.Msg().Subject, err))
		case <-ctx.Done():
			return j.unavailable(fmt.Errorf("publish to %s: no acknowledgement: %w", f.Msg().Subject, ctx.Err()))
		}
	}
	return nil
}

func (j *JetStream) unavailable(err error) error {
	j.outage.Fail(err)
	return fmt.Errorf("%w: nats: %w", ErrUnavailable, err)
}

func keyBytes(k string) []byte {
	if k == "" {
		return nil // no key: the balancer spreads such records
	}
	return []byte(k)
}

func headerBytes(h map[string]string) int {
	n := 0
	for k, v := range h {
		n += len(k) + len(v) + 4
	}
	return n
}
