package carrier

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

func needNotification(m *msgpb.Message) bool {
	return m.GetOptions()&uint32(msgpb.Option_NEED_NOTIFICATION) != 0
}

// notify publishes one Notification task per platform of undelivered whose
// platform has a notifier, carrying the task's NEED_NOTIFICATION messages, to
// the notification topic keyed by uid (so horn handles one user's
// notifications in order). It returns an error when Kafka did not
// acknowledge them: the task is then tried again (a platform may get a
// duplicate notification, never none). A task from the retry topic
// notifies nobody: its platforms were all undelivered, so notified, on the
// first attempt. A notify-if-unseen task goes to notifyUnseen instead.
func (c *Carrier) notify(ctx context.Context, p *mqpb.Payload, t *mqpb.ToUid, undelivered []string) error {
	if t.GetNotifyIfUnseenMs() > 0 && c.unseen != nil {
		return c.notifyUnseen(ctx, p, t, undelivered)
	}
	if p.GetRetryCount() > 0 {
		return nil
	}
	recs, err := c.notifications(t, undelivered, time.Now())
	if err != nil || len(recs) == 0 {
		return err
	}
	if err := c.queue.Publish(ctx, recs...); err != nil {
		return fmt.Errorf("publish %d notifications of %q: %w", len(recs), t.GetUid(), err)
	}
	c.metrics.Deliveries.WithLabelValues(metrics.Notified).Add(float64(len(recs)))
	return nil
}

// notifyUnseen handles the notifications of a notify-if-unseen task. When a
// platform got the messages live, ACKed, the user has seen them: any
// notification an earlier run of the task scheduled is cancelled, and none
// is scheduled. Otherwise, on the first attempt, the notifications of the
// undelivered platforms are scheduled for the task's time plus the delay; a
// retry schedules nothing (the first attempt did). An error means Redis did
// not take it: the task is tried again.
func (c *Carrier) notifyUnseen(ctx context.Context, p *mqpb.Payload, t *mqpb.ToUid, undelivered []string) error {
	if len(undelivered) < len(t.GetPlatforms()) && slices.ContainsFunc(t.GetMsgs(), asksAck) {
		seqs := make([]int64, len(t.GetMsgs()))
		for i, m := range t.GetMsgs() {
			seqs[i] = m.GetSeq()
		}
		return c.unseen.Cancel(ctx, t.GetUid(), seqs)
	}
	if p.GetRetryCount() > 0 {
		return nil
	}
	due := time.UnixMilli(p.GetTimestamp() + t.GetNotifyIfUnseenMs())
	recs, err := c.notifications(t, undelivered, due)
	if err != nil || len(recs) == 0 {
		return err
	}
	var seqs []int64
	for _, m := range t.GetMsgs() {
		if needNotification(m) {
			seqs = append(seqs, m.GetSeq())
		}
	}
	values := make([][]byte, len(recs))
	for i, r := range recs {
		values[i] = r.Value
	}
	return c.unseen.Schedule(ctx, t.GetUid(), seqs, due, values)
}

// notifications builds the Notification tasks of undelivered for the
// task's NEED_NOTIFICATION messages, one per platform with a notifier,
// stamped at.
func (c *Carrier) notifications(t *mqpb.ToUid, undelivered []string, at time.Time) ([]queue.Record, error) {
	var msgs []*msgpb.Message
	for _, m := range t.GetMsgs() {
		if needNotification(m) {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) == 0 || len(undelivered) == 0 {
		return nil, nil
	}
	var recs []queue.Record
	for _, pl := range undelivered {
		plat, ok := c.cfg.Platforms.Get(pl)
		if !ok || plat.Notifier == "" {
			continue
		}
		v, err := proto.Marshal(&mqpb.Payload{
			Seq:       msgs[0].GetSeq(),
			Timestamp: at.UnixMilli(),
			Body: &mqpb.Payload_Notification{Notification: &mqpb.Notification{
				Uid: t.GetUid(), Platform: pl, Msgs: msgs, Content: t.GetNotification(), Provider: plat.Notifier}},
		})
		if err != nil {
			return nil, fmt.Errorf("marshal notification of %q: %w", t.GetUid(), err)
		}
		recs = append(recs, queue.Record{Topic: c.cfg.NotifyTopic, Key: t.GetUid(), Value: v})
	}
	return recs, nil
}
