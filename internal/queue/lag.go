package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// PartitionLag is how far a consumer group is behind on one partition.
type PartitionLag struct {
	Partition int `json:"partition"`
	// End is the partition's high watermark (the offset the next record
	// gets); Committed the group's committed offset, -1 when the group has
	// committed none on it.
	End       int64 `json:"end"`
	Committed int64 `json:"committed"`
	// Lag is End minus Committed; a partition the group never committed on
	// counts every record it still holds (End minus its first offset),
	// since a group that starts there reads them all.
	Lag int64 `json:"lag"`
}

// TopicLag is a consumer group's lag on one topic: per partition, and
// their sum.
type TopicLag struct {
	Topic      string         `json:"topic"`
	Group      string         `json:"group"`
	Lag        int64          `json:"lag"`
	Partitions []PartitionLag `json:"partitions"`
}

// LagReader reads consumer groups' lag from the brokers, outside any group:
// it asks for high watermarks (ListOffsets) and committed offsets
// (OffsetFetch), commits nothing and joins nothing, so reading moves no
// consumer.
type LagReader struct {
	Brokers  []string
	Security Security
	// Timeout bounds each request; 0: 10s.
	Timeout time.Duration
}

// GroupLag returns group's lag on topic.
func (r LagReader) GroupLag(ctx context.Context, group, topic string) (TopicLag, error) {
	if len(r.Brokers) == 0 {
		return TopicLag{}, fmt.Errorf("%w: no brokers configured", ErrUnavailable)
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	transport := r.Security.transport(timeout)
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(r.Brokers...), Timeout: timeout, Transport: transport}

	layout, err := kafkaLayout(client)(ctx, topic)
	if err != nil {
		return TopicLag{}, fmt.Errorf("%w: partitions of %s: %w", ErrUnavailable, topic, err)
	}
	reqs := make([]kafka.OffsetRequest, 0, 2*len(layout.partitions))
	for _, p := range layout.partitions {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	offs, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return TopicLag{}, fmt.Errorf("%w: offsets of %s: %w", ErrUnavailable, topic, err)
	}
	ends := make(map[int]kafka.PartitionOffsets, len(layout.partitions))
	for _, po := range offs.Topics[topic] {
		if po.Error != nil {
			return TopicLag{}, fmt.Errorf("%w: offsets of %s/%d: %w", ErrUnavailable, topic, po.Partition, po.Error)
		}
		ends[po.Partition] = po
	}
	committed, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: layout.partitions}})
	if err == nil {
		err = committed.Error
	}
	// A group the brokers do not know has committed nothing (some brokers
	// answer so rather than with -1 offsets).
	if errors.Is(err, kafka.GroupIdNotFound) {
		committed, err = &kafka.OffsetFetchResponse{}, nil
	}
	if err != nil {
		return TopicLag{}, fmt.Errorf("%w: offsets group %s committed on %s: %w", ErrUnavailable, group, topic, err)
	}
	commits := make(map[int]int64, len(layout.partitions))
	for _, p := range committed.Topics[topic] {
		if p.Error != nil {
			return TopicLag{}, fmt.Errorf("%w: offset group %s committed on %s/%d: %w", ErrUnavailable, group, topic, p.Partition, p.Error)
		}
		commits[p.Partition] = p.CommittedOffset
	}

	out := TopicLag{Topic: topic, Group: group, Partitions: make([]PartitionLag, 0, len(layout.partitions))}
	for _, p := range layout.partitions {
		po, ok := ends[p]
		if !ok {
			return TopicLag{}, fmt.Errorf("%w: no offsets for %s/%d", ErrUnavailable, topic, p)
		}
		pl := PartitionLag{Partition: p, End: po.LastOffset, Committed: -1}
		from := po.FirstOffset
		if c, ok := commits[p]; ok && c >= 0 {
			pl.Committed, from = c, c
		}
		// A commit below the first offset (records deleted by retention)
		// leaves only what the partition still holds to read.
		from = max(from, po.FirstOffset)
		pl.Lag = max(0, pl.End-from)
		out.Lag += pl.Lag
		out.Partitions = append(out.Partitions, pl)
	}
	return out, nil
}
