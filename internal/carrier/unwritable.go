package carrier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// Outcomes of a task set aside by setAside (label "outcome" of
// gomsg_unwritable_records_total).
const (
	unwritableDeadLettered = "dead_lettered"
	unwritableDropped      = "dropped"
)

// setAside settles a task whose work failed with err. When err is
// queue.ErrInvalidRecord, the work produced a record Kafka will never take
// (a retry, notification or dead letter larger than its topic accepts):
// trying the task again would produce the same record, and the consumer
// would hold the partition's commit point on it, and every later task of
// the partition behind it, for good. The task goes to the dead-letter topic
// instead, as it was consumed, with the reason (and a DEAD_LETTERED receipt
// per platform of a ToUid's messages that asked for receipts), and counts
// as done. When the dead-letter topic refuses it too, it is logged at
// ERROR with its place in the topic and skipped: nothing else could take
// it. Both are counted. Any other error is returned as it is: the consumer
// tries the task again.
func (c *Carrier) setAside(ctx context.Context, m queue.Message, err error) error {
	if !errors.Is(err, queue.ErrInvalidRecord) {
		return err
	}
	var p mqpb.Payload
	if uerr := proto.Unmarshal(m.Value, &p); uerr != nil {
		return errors.Join(err, uerr)
	}
	reason := fmt.Sprintf("a record of its work is refused by Kafka for good: %v", err)
	v, merr := proto.Marshal(&mqpb.DeadLetter{Payload: &p, Reason: reason, DeadAt: time.Now().UnixMilli()})
	if merr != nil {
		return errors.Join(err, merr)
	}
	platforms := p.GetToUid().GetPlatforms()
	recs, rerr := c.retrySteps(&p, platforms, c.acceptedSteps(nil, &p), step{state: receiptpb.State_DEAD_LETTERED, detail: reason})
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	recs = append(recs, queue.Record{Topic: c.cfg.DeadLetterTopic, Key: m.Key, Value: v, Headers: m.Headers})
	fields := []zap.Field{zap.String("topic", m.Topic), zap.Int("partition", m.Partition), zap.Int64("offset", m.Offset),
		zap.String("key", m.Key), zap.Int64("task_seq", p.GetSeq()), zap.Error(err)}
	perr := c.queue.Publish(ctx, recs...)
	switch {
	case perr == nil:
		c.log.Error("task dead-lettered: Kafka refuses a record of its work", fields...)
		c.metrics.UnwritableRecords.WithLabelValues("carrier", unwritableDeadLettered).Inc()
		c.metrics.Deliveries.WithLabelValues(metrics.DeadLettered).Add(float64(max(1, len(platforms))))
		return nil
	case errors.Is(perr, queue.ErrInvalidRecord):
		c.log.Error("task dropped: Kafka refuses a record of its work and its dead letter",
			append(fields, zap.NamedError("dead_letter_error", perr))...)
		c.metrics.UnwritableRecords.WithLabelValues("carrier", unwritableDropped).Inc()
		return nil
	}
	return fmt.Errorf("dead-letter a task Kafka refuses a record of (%v): %w", err, perr)
}
