// Package receipt records the steps of message deliveries: every service
// that takes a step (station accepts, carrier delivers, stores, replays,
// retries and dead-letters, horn notifies) publishes a receiptpb.Receipt per
// target of each message that asked NEED_RECEIPTS to the receipts topic,
// keyed by uid, before the work counts as done. Backends consume the topic;
// carrier keeps the records per seq for the Push API's GetDelivery.
package receipt

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// Publisher is what a Recorder needs of the queue: Publish returns once
// Kafka acknowledged every record.
type Publisher interface {
	Publish(ctx context.Context, recs ...queue.Record) error
}

// Recorder publishes receipts. A nil *Recorder records nothing: receipts
// are off (--receipts-topic empty).
type Recorder struct {
	topic string
	q     Publisher
	now   func() time.Time
}

// New returns a recorder publishing to topic; an empty topic returns nil
// (receipts off).
func New(topic string, q Publisher) *Recorder {
	if topic == "" {
		return nil
	}
	return &Recorder{topic: topic, q: q, now: time.Now}
}

// Wanted reports whether m asked for receipts (NEED_RECEIPTS): only such
// messages get theirs recorded, and only while receipts are on.
func Wanted(m *msgpb.Message) bool {
	return m.GetOptions()&uint32(msgpb.Option_NEED_RECEIPTS) != 0
}

// Accepted appends to rs the ACCEPTED receipt of every message of msgs that
// asked NEED_RECEIPTS, per platform, sent to uid, at the message's time.
// Station writes them with a push's tasks, and carrier again ahead of a
// task's first steps: made here, both are the same records, with the same
// ids.
func Accepted(rs []*receiptpb.Receipt, uid string, platforms []string, msgs []*msgpb.Message) []*receiptpb.Receipt {
	for _, pl := range platforms {
		for _, m := range msgs {
			if Wanted(m) {
				rs = append(rs, &receiptpb.Receipt{Seq: m.GetSeq(), Uid: uid, Platform: pl,
					State: receiptpb.State_ACCEPTED, At: m.GetTimestamp()})
			}
		}
	}
	return rs
}

// Enabled reports whether receipts are recorded.
func (r *Recorder) Enabled() bool { return r != nil }

// Topic is the receipts topic ("" when off).
func (r *Recorder) Topic() string {
	if r == nil {
		return ""
	}
	return r.topic
}

// Record publishes rs, filling in a missing time and every id. It returns
// an error when Kafka did not take them all: the caller's work is then not
// done, and is tried again (which may publish some receipts twice, with the
// same ids).
func (r *Recorder) Record(ctx context.Context, rs ...*receiptpb.Receipt) error {
	if r == nil || len(rs) == 0 {
		return nil
	}
	recs, err := r.Records(rs...)
	if err != nil {
		return err
	}
	if err := r.q.Publish(ctx, recs...); err != nil {
		return fmt.Errorf("publish %d receipts: %w", len(recs), err)
	}
	return nil
}

// Records returns rs as queue records, for a caller that publishes them in
// one call with its own records (station: with the tasks they report).
// A nil Recorder returns none.
func (r *Recorder) Records(rs ...*receiptpb.Receipt) ([]queue.Record, error) {
	if r == nil {
		return nil, nil
	}
	now := r.now().UnixMilli()
	recs := make([]queue.Record, 0, len(rs))
	for _, rc := range rs {
		if rc.GetAt() == 0 {
			rc.At = now
		}
		rc.Id = ID(rc)
		v, err := proto.Marshal(rc)
		if err != nil {
			return nil, fmt.Errorf("marshal receipt of seq %d: %w", rc.GetSeq(), err)
		}
		recs = append(recs, queue.Record{Topic: r.topic, Key: rc.GetUid(), Value: v})
	}
	return recs, nil
}

// ID identifies a receipt's step: the same step recorded again (a task
// handled twice) gets the same id, whatever its time.
func ID(rc *receiptpb.Receipt) string {
	return fmt.Sprintf("%d/%s/%s/%d/%s/%d", rc.GetSeq(), rc.GetUid(), rc.GetPlatform(), rc.GetState(), rc.GetSid(), rc.GetAttempt())
}
