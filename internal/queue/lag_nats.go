package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// GroupLag returns group's lag on topic on JetStream, as LagReader does on
// Kafka: per partition, how many messages its subject holds from the
// group's committed position on — what a member taking the partition now
// would read. A consumer made for the count (ephemeral, acking nothing) is
// deleted at once; reading moves no member and commits nothing.
//
// Committed and End are stream sequences: the group's position (-1 when it
// has committed none) and one past the partition's last message (0 when it
// holds none).
func (j *JetStream) GroupLag(ctx context.Context, group, topic string) (TopicLag, error) {
	parts, err := j.partitionsOf(ctx, topic)
	if err != nil {
		return TopicLag{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	name := StreamName(topic)
	stream, err := j.js.Stream(ctx, name)
	if err != nil {
		return TopicLag{}, fmt.Errorf("%w: stream %s: %w", ErrUnavailable, name, err)
	}
	offs, err := j.js.KeyValue(ctx, offsetsBucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		offs = nil // no group has committed anything yet
	case err != nil:
		return TopicLag{}, fmt.Errorf("%w: bucket %s: %w", ErrUnavailable, offsetsBucket, err)
	}
	out := TopicLag{Topic: topic, Group: group, Partitions: make([]PartitionLag, 0, len(parts))}
	for _, p := range parts {
		pl, err := partitionLag(ctx, stream, offs, group, topic, p)
		if err != nil {
			return TopicLag{}, fmt.Errorf("%w: %s partition %d: %w", ErrUnavailable, topic, p, err)
		}
		out.Partitions = append(out.Partitions, pl)
		out.Lag += pl.Lag
	}
	return out, nil
}

func partitionLag(ctx context.Context, stream jetstream.Stream, offs jetstream.KeyValue, group, topic string, p int) (PartitionLag, error) {
	pl := PartitionLag{Partition: p, Committed: -1}
	if offs != nil {
		e, err := offs.Get(ctx, offsetKey(group, topic, p))
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return pl, fmt.Errorf("position: %w", err)
		default:
			if pl.Committed, err = strconv.ParseInt(string(e.Value()), 10, 64); err != nil {
				return pl, fmt.Errorf("position %q: %w", e.Value(), err)
			}
		}
	}
	sub := subject(topic, p)
	last, err := stream.GetLastMsgForSubject(ctx, sub)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return pl, nil // nothing on the partition: no lag
	case err != nil:
		return pl, fmt.Errorf("last message: %w", err)
	}
	pl.End = int64(last.Sequence) + 1
	cfg := jetstream.ConsumerConfig{FilterSubject: sub, AckPolicy: jetstream.AckNonePolicy,
		InactiveThreshold: 5 * time.Second, MemoryStorage: true, DeliverPolicy: jetstream.DeliverAllPolicy}
	if pl.Committed > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, uint64(pl.Committed)
	}
	cons, err := stream.CreateConsumer(ctx, cfg)
	if err != nil {
		return pl, fmt.Errorf("counting consumer: %w", err)
	}
	info := cons.CachedInfo()
	// Deleted now; if this fails the server drops it after InactiveThreshold.
	_ = stream.DeleteConsumer(ctx, info.Name)
	pl.Lag = int64(info.NumPending)
	return pl, nil
}

// offsetKey is the offsets bucket's key of group's position on topic's
// partition p.
func offsetKey(group, topic string, p int) string {
	return invalidName.ReplaceAllString(group, "_") + "." + StreamName(topic) + "." + strconv.Itoa(p)
}
