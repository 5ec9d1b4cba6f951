package carrier

import (
	"context"
	"fmt"
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
// first attempt.
func (c *Carrier) notify(ctx context.Context, p *mqpb.Payload, t *mqpb.ToUid, undelivered []string) error {
	if p.GetRetryCount() > 0 {
		return nil
	}
	var msgs []*msgpb.Message
	for _, m := range t.GetMsgs() {
		if needNotification(m) {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) == 0 || len(undelivered) == 0 {
		return nil
	}
	now := time.Now().UnixMilli()
	var recs []queue.Record
	for _, pl := range undelivered {
		plat, ok := c.cfg.Platforms.Get(pl)
		if !ok || plat.Notifier == "" {
			continue
		}
		v, err := proto.Marshal(&mqpb.Payload{
			Seq:       msgs[0].GetSeq(),
			Timestamp: now,
			Body: &mqpb.Payload_Notification{Notification: &mqpb.Notification{
				Uid: t.GetUid(), Platform: pl, Msgs: msgs, Content: t.GetNotification(), Provider: plat.Notifier}},
		})
		if err != nil {
			return fmt.Errorf("marshal notification of %q: %w", t.GetUid(), err)
		}
		recs = append(recs, queue.Record{Topic: c.cfg.NotifyTopic, Key: t.GetUid(), Value: v})
	}
	if len(recs) == 0 {
		return nil
	}
	if err := c.queue.Publish(ctx, recs...); err != nil {
		return fmt.Errorf("publish %d notifications of %q: %w", len(recs), t.GetUid(), err)
	}
	c.metrics.Deliveries.WithLabelValues(metrics.Notified).Add(float64(len(recs)))
	return nil
}
