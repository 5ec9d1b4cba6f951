package horn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/notification"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// decode reads a Notification record; ok is false for a record no retry
// can fix (it is logged and skipped).
func (h *Horn) decode(m queue.Message) (*mqpb.Payload, *mqpb.Notification, bool) {
	var p mqpb.Payload
	if err := proto.Unmarshal(m.Value, &p); err != nil || p.GetNotification() == nil {
		h.log.Error("dropping record that is not a notification", zap.String("topic", m.Topic),
			zap.Int("partition", m.Partition), zap.Int64("offset", m.Offset), zap.Error(err))
		return nil, nil, false
	}
	return &p, p.GetNotification(), true
}

// handle sends a carrier task to every device of the user's platform, in
// parallel (bounded per provider). It returns an error only when a retry or
// dead letter could not be published, the registry could not be read or
// Kafka refused the receipts: the consumer then tries the record again.
func (h *Horn) handle(ctx context.Context, m queue.Message) error {
	p, n, ok := h.decode(m)
	if !ok {
		return nil
	}
	devices, err := h.devices.List(ctx, n.GetUid(), n.GetPlatform())
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(devices))
	steps := make([][]*receiptpb.Receipt, len(devices))
	for i, d := range devices {
		if n.GetToken() != "" && d.Token != n.GetToken() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			steps[i], errs[i] = h.attempt(ctx, p, n, d)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return h.recordSent(ctx, distinct(slices.Concat(steps...)))
}

// receiptTries bounds recordSent's tries, receiptBackoff the wait before
// the second (doubled after each, up to 2s): about 4s in all.
const (
	receiptTries   = 5
	receiptBackoff = 250 * time.Millisecond
)

// recordSent records the receipts of notifications already handed to the
// providers. A refusal is tried again here, a few times, rather than at
// once failing the task: the consumer would handle the task again and
// every device would get the notification again.
func (h *Horn) recordSent(ctx context.Context, rs []*receiptpb.Receipt) error {
	pol := backoff.Policy{Min: receiptBackoff, Max: 2 * time.Second}
	var err error
	for try := range receiptTries {
		if err = h.cfg.Receipts.Record(ctx, rs...); err == nil {
			return nil
		}
		h.log.Warn("receipts of sent notifications refused", zap.Int("try", try+1), zap.Error(err))
		if try+1 < receiptTries && !backoff.Sleep(ctx, pol.Exp(try+1)) {
			return ctx.Err()
		}
	}
	return err
}

// distinct drops the receipts of a step already listed: the devices of one
// platform each report NOTIFIED for the same messages, which is one step of
// the (uid, platform).
func distinct(rs []*receiptpb.Receipt) []*receiptpb.Receipt {
	if len(rs) < 2 {
		return rs
	}
	seen := make(map[string]bool, len(rs))
	return slices.DeleteFunc(rs, func(rc *receiptpb.Receipt) bool {
		id := receipt.ID(rc)
		if seen[id] {
			return true
		}
		seen[id] = true
		return false
	})
}

// steps returns a receipt of state per message of a notification that
// asked NEED_RECEIPTS, none when receipts are off.
func (h *Horn) steps(n *mqpb.Notification, state receiptpb.State, detail string) []*receiptpb.Receipt {
	if !h.cfg.Receipts.Enabled() {
		return nil
	}
	var rs []*receiptpb.Receipt
	for _, m := range n.GetMsgs() {
		if !receipt.Wanted(m) {
			continue
		}
		rs = append(rs, &receiptpb.Receipt{Seq: m.GetSeq(), Uid: n.GetUid(), Platform: n.GetPlatform(), State: state, Detail: detail})
	}
	return rs
}

// handleRetry waits until the record is due (last_attempt_at + backoff),
// then sends it to its one device if the token is still registered. runCtx
// ends the wait at shutdown (the record stays uncommitted).
//
// Retry records are keyed by uid + token, and each key maps to one of the
// consumer's workers, so a waiting retry holds up only the records that
// share its worker, never the notification topic (consumed separately).
// Records of one partition are published in the order they failed, so a
// later record is rarely due before an earlier one.
func (h *Horn) handleRetry(runCtx, ctx context.Context, m queue.Message) error {
	p, n, ok := h.decode(m)
	if !ok {
		return nil
	}
	due := time.UnixMilli(p.GetLastAttemptAt()).Add(h.backoff(p.GetRetryCount(), time.Duration(n.GetRetryAfterMs())*time.Millisecond))
	if !backoff.Sleep(runCtx, time.Until(due)) {
		return runCtx.Err()
	}
	devices, err := h.devices.List(ctx, n.GetUid(), n.GetPlatform())
	if err != nil {
		return err
	}
	for _, d := range devices {
		if d.Token == n.GetToken() && d.Provider == n.GetProvider() {
			rs, err := h.attempt(ctx, p, n, d)
			if err != nil {
				return err
			}
			return h.recordSent(ctx, rs)
		}
	}
	h.log.Info("dropping retry of a token no longer registered", zap.String("uid", n.GetUid()),
		zap.String("platform", n.GetPlatform()))
	return nil
}

// backoff is how long after the last attempt retry number n (1-based) is
// due: RetryBackoff doubled per retry up to RetryBackoffMax, or the
// provider's Retry-After when longer, capped at RetryAfterMax.
func (h *Horn) backoff(n int32, retryAfter time.Duration) time.Duration {
	d := backoff.Policy{Min: h.cfg.RetryBackoff, Max: h.cfg.RetryBackoffMax}.Exp(int(n))
	if retryAfter > d {
		d = min(retryAfter, h.cfg.RetryAfterMax)
	}
	return d
}

// attempt sends to one device and acts on the answer. It returns the
// receipts of what became of the notification's messages (NOTIFIED,
// DEAD_LETTERED; none when receipts are off), for the caller to publish
// before the record counts as done.
func (h *Horn) attempt(ctx context.Context, p *mqpb.Payload, n *mqpb.Notification, d device.Device) ([]*receiptpb.Receipt, error) {
	s := h.providers[d.Provider]
	if s == nil {
		h.log.Warn("no provider for device; dropped", zap.String("uid", d.UID), zap.String("provider", d.Provider))
		return nil, nil
	}
	r := s.send(ctx, d, notification.Resolve(n.GetContent(), n.GetMsgs()))
	switch r.Verdict {
	case Sent:
		return h.steps(n, receiptpb.State_NOTIFIED, r.detail(d.Provider)), nil
	case Unregistered:
		if _, err := h.devices.Remove(ctx, d.UID, d.Platform, d.Provider, d.Token); err != nil {
			return nil, err
		}
		h.metrics.DeviceTokensPruned.WithLabelValues(d.Provider).Inc()
		h.log.Info("removed device token the provider rejected", zap.String("uid", d.UID),
			zap.String("platform", d.Platform), zap.String("provider", d.Provider), zap.String("answer", r.Answer()))
		return nil, nil
	case Retry:
		if p.GetRetryCount() < int32(h.cfg.MaxRetries) {
			err := h.republish(ctx, h.cfg.RetryTopic, p, n, d, r, p.GetRetryCount()+1)
			if !errors.Is(err, queue.ErrInvalidRecord) {
				return nil, err
			}
			// The retry topic will never take it: trying again would hold
			// the partition for good. It goes to the dead-letter topic.
			h.log.Error("retry of notification refused by Kafka for good", zap.String("uid", d.UID),
				zap.String("platform", d.Platform), zap.String("provider", d.Provider), zap.Error(err))
			return h.deadLetter(ctx, s, p, n, d, r, true)
		}
	}
	return h.deadLetter(ctx, s, p, n, d, r, false)
}

// deadLetter writes the notification for d to the dead-letter topic with
// the provider's answer. unwritable says that the retry topic refused it
// for good (it is counted as such). When the dead-letter topic refuses it
// for good too, it is logged at ERROR, counted and dropped: an error would
// make the consumer try the record again, and hold the partition on it, for
// ever.
func (h *Horn) deadLetter(ctx context.Context, s *sender, p *mqpb.Payload, n *mqpb.Notification, d device.Device, r Result,
	unwritable bool) ([]*receiptpb.Receipt, error) {
	s.m.NotificationsSent.WithLabelValues(d.Provider, "dead_lettered").Inc()
	h.log.Warn("notification dead-lettered", zap.String("uid", d.UID), zap.String("platform", d.Platform),
		zap.String("provider", d.Provider), zap.Int32("retries", p.GetRetryCount()), zap.String("answer", r.Answer()))
	err := h.republish(ctx, h.cfg.DeadTopic, p, n, d, r, p.GetRetryCount())
	switch {
	case errors.Is(err, queue.ErrInvalidRecord):
		h.log.Error("notification dropped: Kafka refuses its dead letter for good", zap.String("uid", d.UID),
			zap.String("platform", d.Platform), zap.String("provider", d.Provider), zap.Error(err))
		h.metrics.UnwritableRecords.WithLabelValues("horn", "dropped").Inc()
	case err != nil:
		return nil, err
	case unwritable:
		h.metrics.UnwritableRecords.WithLabelValues("horn", "dead_lettered").Inc()
	}
	return h.steps(n, receiptpb.State_DEAD_LETTERED, r.detail(d.Provider)), nil
}

// republish writes the notification for one device to topic, with the
// provider's answer, keyed by uid + token.
func (h *Horn) republish(ctx context.Context, topic string, p *mqpb.Payload, n *mqpb.Notification, d device.Device, r Result, retries int32) error {
	out := proto.CloneOf(n)
	out.Token, out.Provider, out.LastError = d.Token, d.Provider, r.Answer()
	out.RetryAfterMs = r.RetryAfter.Milliseconds()
	v, err := proto.Marshal(&mqpb.Payload{Seq: p.GetSeq(), Timestamp: p.GetTimestamp(), RetryCount: retries,
		LastAttemptAt: time.Now().UnixMilli(), Body: &mqpb.Payload_Notification{Notification: out}})
	if err != nil {
		return fmt.Errorf("marshal notification: %w", err)
	}
	err = h.queue.Publish(ctx, queue.Record{Topic: topic, Key: d.UID + "/" + d.Token, Value: v,
		Headers: map[string]string{"answer": r.Answer()}})
	if err != nil {
		return fmt.Errorf("publish notification to %s: %w", topic, err)
	}
	return nil
}

// Send sends content to one device through its provider, with the
// provider's concurrency bound and metrics, and returns the answer without
// acting on it (attempt does that).
func (h *Horn) Send(ctx context.Context, d device.Device, n *pushpb.Notification) (Result, error) {
	s := h.providers[d.Provider]
	if s == nil {
		return Result{}, fmt.Errorf("%w %q", errNoProvider, d.Provider)
	}
	return s.send(ctx, d, n), nil
}
