package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// NATSTopicReader reads a topic's stream by partition and stream sequence,
// outside any consumer group, as TopicReader does on Kafka: a partition's
// offsets are the stream sequences of its subject's records, so they are
// increasing but not contiguous, and every partition has the stream's range.
type NATSTopicReader struct {
	J     *JetStream
	Topic string
}

// Ranges returns every partition's range: the stream's first sequence up
// to, not including, the one after its last.
func (r NATSTopicReader) Ranges(ctx context.Context) ([]PartitionRange, error) {
	parts, err := r.J.partitionsOf(ctx, r.Topic)
	if err != nil {
		return nil, fmt.Errorf("%w: partitions of %s: %w", ErrUnavailable, r.Topic, err)
	}
	s, err := r.J.js.Stream(ctx, StreamName(r.Topic))
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, StreamName(r.Topic), err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, StreamName(r.Topic), err)
	}
	first, end := int64(info.State.FirstSeq), int64(info.State.LastSeq)+1
	if info.State.Msgs == 0 {
		first = end
	}
	out := make([]PartitionRange, 0, len(parts))
	for _, p := range parts {
		out = append(out, PartitionRange{ID: p, First: first, End: end})
	}
	return out, nil
}

// Read calls fn for each record of partition with a sequence from from up
// to, not including, end, in order. It stops at fn's first error and
// returns it.
func (r NATSTopicReader) Read(ctx context.Context, partition int, from, end int64, fn func(Message) error) error {
	if from >= end {
		return nil
	}
	s, err := r.J.js.Stream(ctx, StreamName(r.Topic))
	if err != nil {
		return fmt.Errorf("%w: stream %s: %w", ErrUnavailable, StreamName(r.Topic), err)
	}
	subj := subject(r.Topic, partition)
	for seq := from; seq < end; {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The partition's next record at or after seq.
		m, err := s.GetMsg(ctx, uint64(max(seq, 1)), jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: read %s at %d: %w", ErrUnavailable, subj, seq, err)
		}
		if int64(m.Sequence) >= end {
			return nil
		}
		if err := fn(fromNATS(r.Topic, partition, m)); err != nil {
			return err
		}
		seq = int64(m.Sequence) + 1
	}
	return nil
}

// ReadOne returns the record at sequence offset, which must be partition's.
func (r NATSTopicReader) ReadOne(ctx context.Context, partition int, offset int64) (Message, error) {
	s, err := r.J.js.Stream(ctx, StreamName(r.Topic))
	if err != nil {
		return Message{}, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, StreamName(r.Topic), err)
	}
	if offset < 1 {
		return Message{}, fmt.Errorf("%w: %s has no record at %d", ErrUnavailable, subject(r.Topic, partition), offset)
	}
	m, err := s.GetMsg(ctx, uint64(offset))
	if err == nil && m.Subject != subject(r.Topic, partition) {
		err = jetstream.ErrMsgNotFound
	}
	if err != nil {
		return Message{}, fmt.Errorf("%w: %s has no record at %d: %w", ErrUnavailable, subject(r.Topic, partition), offset, err)
	}
	return fromNATS(r.Topic, partition, m), nil
}

func fromNATS(topic string, partition int, m *jetstream.RawStreamMsg) Message {
	out := Message{Topic: topic, Partition: partition, Offset: int64(m.Sequence), Value: m.Data, Time: m.Time}
	if len(m.Header) > 0 {
		out.Headers = make(map[string]string, len(m.Header))
		for k := range m.Header {
			if k == keyHeader {
				out.Key = m.Header.Get(k)
			} else {
				out.Headers[k] = m.Header.Get(k)
			}
		}
	}
	return out
}
