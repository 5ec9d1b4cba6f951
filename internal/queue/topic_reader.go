package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// TopicReader reads a topic by partition and offset, outside any consumer
// group: it commits nothing, so reading a topic with it moves no consumer's
// position. Tools that inspect a topic (the dead-letter list) use it.
type TopicReader struct {
	Brokers  []string
	Security Security
	Topic    string
}

// PartitionRange is a partition's offsets: records are at First up to, not
// including, End.
type PartitionRange struct {
	ID         int
	First, End int64
}

// Ranges returns every partition's range, by partition id.
func (r TopicReader) Ranges(ctx context.Context) ([]PartitionRange, error) {
	var parts []kafka.Partition
	err := r.eachBroker(func(addr string) error {
		var err error
		parts, err = r.Security.dialer().LookupPartitions(ctx, "tcp", addr, r.Topic)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w: partitions of %s: %w", ErrUnavailable, r.Topic, err)
	}
	out := make([]PartitionRange, 0, len(parts))
	for _, p := range parts {
		conn, err := r.leader(ctx, p.ID)
		if err != nil {
			return nil, err
		}
		first, end, err := conn.ReadOffsets()
		_ = conn.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: offsets of %s/%d: %w", ErrUnavailable, r.Topic, p.ID, err)
		}
		out = append(out, PartitionRange{ID: p.ID, First: first, End: end})
	}
	for i := 1; i < len(out); i++ { // a handful of partitions: insertion sort
		for j := i; j > 0 && out[j].ID < out[j-1].ID; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// Read calls fn for each record of partition from offset from up to, not
// including, end, in order. It stops at fn's first error and returns it.
func (r TopicReader) Read(ctx context.Context, partition int, from, end int64, fn func(Message) error) error {
	if from >= end {
		return nil
	}
	conn, err := r.leader(ctx, partition)
	if err != nil {
		return err
	}
	defer conn.Close()
	for from < end {
		if err := ctx.Err(); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Seek(from, kafka.SeekAbsolute); err != nil {
			return fmt.Errorf("%w: seek %s/%d to %d: %w", ErrUnavailable, r.Topic, partition, from, err)
		}
		batch := conn.ReadBatch(1, 8<<20)
		read := 0
		for from < end {
			m, err := batch.ReadMessage()
			if err != nil {
				break
			}
			read++
			from = m.Offset + 1
			if err := fn(fromKafka(m)); err != nil {
				_ = batch.Close()
				return err
			}
		}
		if err := batch.Close(); err != nil && read == 0 && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%w: read %s/%d at %d: %w", ErrUnavailable, r.Topic, partition, from, err)
		}
		if read == 0 {
			return fmt.Errorf("%w: read %s/%d at %d: no records below %d", ErrUnavailable, r.Topic, partition, from, end)
		}
	}
	return nil
}

// ReadOne returns the record at offset of partition.
func (r TopicReader) ReadOne(ctx context.Context, partition int, offset int64) (Message, error) {
	var out Message
	found := errors.New("found")
	err := r.Read(ctx, partition, offset, offset+1, func(m Message) error {
		out = m
		return found
	})
	if errors.Is(err, found) {
		return out, nil
	}
	if err == nil {
		err = fmt.Errorf("%w: %s/%d has no record at %d", ErrUnavailable, r.Topic, partition, offset)
	}
	return Message{}, err
}

func (r TopicReader) leader(ctx context.Context, partition int) (*kafka.Conn, error) {
	var conn *kafka.Conn
	err := r.eachBroker(func(addr string) error {
		var err error
		conn, err = r.Security.dialer().DialLeader(ctx, "tcp", addr, r.Topic, partition)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%w: leader of %s/%d: %w", ErrUnavailable, r.Topic, partition, err)
	}
	return conn, nil
}

// eachBroker runs fn against each broker in turn until one succeeds.
func (r TopicReader) eachBroker(fn func(addr string) error) error {
	if len(r.Brokers) == 0 {
		return errors.New("no brokers configured")
	}
	var err error
	for _, b := range r.Brokers {
		if err = fn(b); err == nil {
			return nil
		}
	}
	return err
}

func fromKafka(m kafka.Message) Message {
	h := make(map[string]string, len(m.Headers))
	for _, x := range m.Headers {
		h[x.Key] = string(x.Value)
	}
	return Message{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: string(m.Key), Value: m.Value, Headers: h, Time: m.Time}
}
