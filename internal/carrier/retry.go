package carrier

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/tracing"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// retryLater republishes a task whose work failed in part: body replaces the
// task's body (a ToUid reduced to the platforms that failed), the retry count
// goes up and the failure joins the attempt history. Past MaxRetries the task
// goes to the dead-letter topic with the reason instead. The task's receipts
// rs, with a RETRIED or DEAD_LETTERED one per message of each platform
// retried, go in the same Publish call. The original record counts as done
// once this returns nil.
func (c *Carrier) retryLater(ctx context.Context, p *mqpb.Payload, key string, reason error, platforms []string, rs []*receiptpb.Receipt) error {
	now := time.Now()
	next := proto.Clone(p).(*mqpb.Payload)
	next.Attempts = append(next.Attempts, &mqpb.Attempt{At: now.UnixMilli(), Error: reason.Error(), Platforms: platforms})
	next.LastAttemptAt = now.UnixMilli()
	if int(p.GetRetryCount()) >= c.cfg.MaxRetries {
		dl := &mqpb.DeadLetter{Payload: next, DeadAt: now.UnixMilli(),
			Reason: fmt.Sprintf("failed %d attempts; last: %v", len(next.Attempts), reason)}
		v, err := proto.Marshal(dl)
		if err != nil {
			return err
		}
		recs, err := c.retrySteps(p, platforms, rs, step{state: receiptpb.State_DEAD_LETTERED, detail: dl.GetReason()})
		if err != nil {
			return err
		}
		recs = append(recs, queue.Record{Topic: c.cfg.DeadLetterTopic, Key: key, Value: v, Headers: traceHeaders(ctx)})
		if err := c.queue.Publish(ctx, recs...); err != nil {
			return err
		}
		c.log.Error("task dead-lettered", zap.String("key", key), zap.Int64("task_seq", p.GetSeq()),
			zap.Strings("platforms", platforms), zap.Int("attempts", len(next.Attempts)), zap.Error(reason))
		c.metrics.Deliveries.WithLabelValues(metrics.DeadLettered).Add(float64(max(1, len(platforms))))
		return nil
	}
	next.RetryCount++
	v, err := proto.Marshal(next)
	if err != nil {
		return err
	}
	recs, err := c.retrySteps(p, platforms, rs, step{state: receiptpb.State_RETRIED, attempt: next.GetRetryCount(), detail: reason.Error()})
	if err != nil {
		return err
	}
	recs = append(recs, queue.Record{Topic: c.cfg.RetryTopic, Key: key, Value: v, Headers: traceHeaders(ctx)})
	if err := c.queue.Publish(ctx, recs...); err != nil {
		return err
	}
	c.log.Info("task queued for retry", zap.String("key", key), zap.Int64("task_seq", p.GetSeq()),
		zap.Int32("retry", next.RetryCount), zap.Strings("platforms", platforms), zap.Error(reason))
	c.metrics.Deliveries.WithLabelValues(metrics.Retried).Add(float64(max(1, len(platforms))))
	return nil
}

// retrySteps returns rs and a receipt of st per message of each platform a
// ToUid task retries (or dead-letters), as records of the receipts topic,
// with room for the caller's one record.
func (c *Carrier) retrySteps(p *mqpb.Payload, platforms []string, rs []*receiptpb.Receipt, st step) ([]queue.Record, error) {
	if !c.cfg.Receipts.Enabled() {
		return make([]queue.Record, 0, 1), nil
	}
	t := p.GetToUid()
	for _, pl := range platforms {
		rs = c.addSteps(rs, t.GetUid(), pl, t.GetMsgs(), nil, st)
	}
	recs, err := c.cfg.Receipts.Records(rs...)
	if err != nil {
		return nil, err
	}
	return slices.Grow(recs, 1), nil
}

// handleRetry processes a record of the retry topic once its backoff has
// passed: capped exponential in the retry count, with jitter, from the last
// attempt. Waiting here holds only the retry topic's worker, never the main
// topic's partitions.
func (c *Carrier) handleRetry(ctx context.Context, m queue.Message) error {
	var p mqpb.Payload
	if err := proto.Unmarshal(m.Value, &p); err != nil {
		c.log.Error("dropping undecodable retry task", zap.Int64("offset", m.Offset), zap.Error(err))
		return nil
	}
	wait := backoff.Policy{Min: c.cfg.RetryBackoffMin, Max: c.cfg.RetryBackoffMax}.Exp(int(p.GetRetryCount()))
	due := time.UnixMilli(p.GetLastAttemptAt()).Add(backoff.Jitter(wait, 0.8, 1.2))
	if !backoff.Sleep(ctx, time.Until(due)) {
		return ctx.Err()
	}
	return c.setAside(ctx, m, c.process(tracing.Extract(ctx, m.Headers), &p, m.Key))
}

func traceHeaders(ctx context.Context) map[string]string {
	h := map[string]string{}
	tracing.Inject(ctx, h)
	return h
}
