// Package unseen is the timer of "notify only if unseen" pushes
// (PushRequest.notify_if_unseen_after): carrier schedules the mobile
// notifications of such a push instead of publishing them, a poller
// publishes them to the notify topic when they are due, and an ACK of the
// message by any session of the user cancels them before.
//
// The timer lives in Redis (a sorted set of due times standing in for a
// time wheel, so that it outlives a carrier), split in Shards by uid. Polling needs no
// leader: every carrier polls every shard, and a Lua script claims due
// entries atomically by pushing their due time to the end of a lease. The
// claimer publishes them, then removes them; one that crashed in between
// leaves them to be claimed again when the lease ends. So a due
// notification is published at least once, never lost; it may be published
// twice when a claimer outlives its lease, or when an ACK lands between its
// claim and its removal (then it is also counted cancelled).
package unseen

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// MaxDelay is the longest notify_if_unseen_after a push may ask for.
const MaxDelay = 24 * time.Hour

// Config is the timer's configuration.
type Config struct {
	// Topic is the notify topic the due notifications go to.
	Topic string
	// PollInterval is how often due entries are looked for: a notification
	// goes out up to this late (--unseen-poll-interval, default 1s).
	PollInterval time.Duration
	// Lease is how long a claimed entry waits for its publish before it is
	// due again (default 30s); a publish is given half of it.
	Lease time.Duration
	// Batch is how many entries of a shard one claim takes (default 256).
	Batch int
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.Topic == "" {
		c.Topic = "gomsg.notify"
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.Batch == 0 {
		c.Batch = 256
	}
}

// Validate names the first bad setting.
func (c *Config) Validate() error {
	switch {
	case c.PollInterval < time.Millisecond:
		return fmt.Errorf("--unseen-poll-interval: %s, must be at least 1ms", c.PollInterval)
	case c.Lease < 2*time.Millisecond:
		return fmt.Errorf("unseen lease: %s, must be at least 2ms", c.Lease)
	case c.Batch < 1:
		return fmt.Errorf("unseen batch: %d, must be at least 1", c.Batch)
	}
	return nil
}

// Publisher is what the timer needs of the queue: Publish returns once
// Kafka acknowledged every record.
type Publisher interface {
	Publish(ctx context.Context, recs ...queue.Record) error
}

// Timer schedules, cancels and publishes notify-if-unseen notifications.
// Carrier runs it; anything that sees a session ACK stored messages (a
// device's paged pull through station) may build one to Cancel.
type Timer struct {
	cfg   Config
	log   *zap.Logger
	m     *metrics.Metrics
	store *Store
	q     Publisher
	rec   *receipt.Recorder
}

// New builds a timer on store; rec records NOTIFY_CANCELLED receipts (nil:
// none).
func New(cfg Config, log *zap.Logger, m *metrics.Metrics, store *Store, q Publisher, rec *receipt.Recorder) (*Timer, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Timer{cfg: cfg, log: log.With(zap.String("component", "unseen")), m: m, store: store, q: q, rec: rec}, nil
}

// Schedule keeps the notifications of uid's messages seqs (marshalled
// mqpb.Payload Notification tasks) to be published at due. It returns once
// Redis has them.
func (t *Timer) Schedule(ctx context.Context, uid string, seqs []int64, due time.Time, notifications [][]byte) error {
	added, err := t.store.Schedule(ctx, Entry{UID: uid, Seqs: seqs, Due: due, Notifications: notifications})
	if err != nil {
		return err
	}
	if added {
		t.m.UnseenNotifications.WithLabelValues(metrics.UnseenScheduled).Add(float64(len(notifications)))
	}
	return nil
}

// Cancel removes uid's scheduled notifications about any of seqs (a session
// ACKed them) and, with receipts on, records NOTIFY_CANCELLED per message
// and platform first: an error leaves them scheduled, for the caller to try
// again.
func (t *Timer) Cancel(ctx context.Context, uid string, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	if t.rec.Enabled() {
		found, err := t.store.Peek(ctx, uid, seqs)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return err
		}
		if len(found) == 0 {
			return nil // the common case of a replay page: nothing scheduled
		}
		if err := t.rec.Record(ctx, cancelReceipts(found)...); err != nil {
			return err
		}
	}
	gone, err := t.store.Cancel(ctx, uid, seqs)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return err
	}
	n := 0
	for _, e := range gone {
		n += len(e.Notifications)
	}
	if n > 0 {
		t.m.UnseenNotifications.WithLabelValues(metrics.UnseenCancelled).Add(float64(n))
		t.log.Debug("notifications cancelled by an ACK", zap.String("uid", uid), zap.Int("notifications", n))
	}
	return nil
}

// cancelReceipts are the NOTIFY_CANCELLED receipts of entries: one per
// message that asked NEED_RECEIPTS and platform.
func cancelReceipts(entries []Entry) []*receiptpb.Receipt {
	var out []*receiptpb.Receipt
	for _, e := range entries {
		for _, v := range e.Notifications {
			var p mqpb.Payload
			if proto.Unmarshal(v, &p) != nil {
				continue
			}
			n := p.GetNotification()
			for _, m := range n.GetMsgs() {
				if !receipt.Wanted(m) {
					continue
				}
				out = append(out, &receiptpb.Receipt{Seq: m.GetSeq(), Uid: e.UID, Platform: n.GetPlatform(),
					State: receiptpb.State_NOTIFY_CANCELLED})
			}
		}
	}
	return out
}

// Run polls every PollInterval until ctx ends.
func (t *Timer) Run(ctx context.Context) error {
	tick := time.NewTicker(t.cfg.PollInterval)
	defer tick.Stop()
	for {
		if _, err := t.Poll(ctx, time.Now()); err != nil && ctx.Err() == nil {
			t.log.Warn("unseen poll", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Poll publishes every entry due at now, shard by shard, a batch at a
// time, and updates the entry gauges. A batch whose publish fails stays
// claimed: it is due again when the lease ends.
func (t *Timer) Poll(ctx context.Context, now time.Time) (sent int, err error) {
	var errs []error
	for sh := range Shards {
		for {
			n, more, err := t.pollBatch(ctx, sh, now)
			sent += n
			if err != nil {
				errs = append(errs, err)
			}
			if !more {
				break
			}
		}
	}
	if scheduled, due, err := t.store.Backlog(ctx, now); err != nil {
		errs = append(errs, err)
	} else {
		t.m.UnseenEntries.WithLabelValues("scheduled").Set(float64(scheduled))
		t.m.UnseenEntries.WithLabelValues("due").Set(float64(due))
	}
	return sent, errors.Join(errs...)
}

// pollBatch claims and publishes one batch of shard; more is true when the
// batch was full and published, so the shard may hold more.
func (t *Timer) pollBatch(ctx context.Context, shard int, now time.Time) (sent int, more bool, err error) {
	entries, err := t.store.Claim(ctx, shard, now, t.cfg.Lease, t.cfg.Batch)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		t.m.BackendErrors.WithLabelValues("redis", "unseen").Inc()
		return 0, false, err
	}
	if len(entries) == 0 {
		return 0, false, err
	}
	var recs []queue.Record
	for _, e := range entries {
		for _, v := range e.Notifications {
			recs = append(recs, queue.Record{Topic: t.cfg.Topic, Key: e.UID, Value: v})
		}
	}
	pctx, cancel := context.WithTimeout(ctx, t.cfg.Lease/2)
	perr := t.q.Publish(pctx, recs...)
	cancel()
	var dropErr error // Redis's, removing entries Kafka refused: not a publish failure
	if errors.Is(perr, queue.ErrInvalidRecord) {
		entries, recs, perr, dropErr = t.dropUnwritable(ctx, entries)
	}
	if perr != nil {
		t.m.QueueError("publish").Inc()
		return 0, false, errors.Join(fmt.Errorf("unseen: publish %d notifications: %w", len(recs), perr), dropErr)
	}
	t.m.UnseenNotifications.WithLabelValues(metrics.UnseenSent).Add(float64(len(recs)))
	t.m.Deliveries.WithLabelValues(metrics.Notified).Add(float64(len(recs)))
	if derr := t.store.Done(ctx, entries); derr != nil {
		// Published: they go out again when the lease ends (at least once).
		t.m.BackendErrors.WithLabelValues("redis", "unseen").Inc()
		return len(recs), false, errors.Join(dropErr, derr)
	}
	return len(recs), len(entries) == t.cfg.Batch, errors.Join(err, dropErr)
}

// dropUnwritable publishes a batch Kafka refused a record of for good
// (larger than the notify topic accepts) entry by entry: an entry whose
// notifications Kafka will never take would otherwise be due again at
// every lease, with the batch around it published again each time. Such an
// entry is logged at ERROR, removed and then counted; the others are
// returned with their records, published, or with the error that stopped
// them (err). dropErr is Redis's failure to remove the refused entries:
// they stay claimed, to be refused and dropped again when the lease ends.
func (t *Timer) dropUnwritable(ctx context.Context, entries []Entry) (kept []Entry, recs []queue.Record, err, dropErr error) {
	var dropped []Entry
	for _, e := range entries {
		er := make([]queue.Record, len(e.Notifications))
		for i, v := range e.Notifications {
			er[i] = queue.Record{Topic: t.cfg.Topic, Key: e.UID, Value: v}
		}
		pctx, cancel := context.WithTimeout(ctx, t.cfg.Lease/2)
		perr := t.q.Publish(pctx, er...)
		cancel()
		switch {
		case errors.Is(perr, queue.ErrInvalidRecord):
			t.log.Error("notify-if-unseen entry dropped: Kafka refuses its notifications for good",
				zap.String("uid", e.UID), zap.Int64s("seqs", e.Seqs), zap.Error(perr))
			dropped = append(dropped, e)
		case perr != nil:
			err = perr
		default:
			kept = append(kept, e)
			recs = append(recs, er...)
		}
	}
	if len(dropped) > 0 {
		if derr := t.store.Done(ctx, dropped); derr != nil {
			t.m.BackendErrors.WithLabelValues("redis", "unseen").Inc()
			return kept, recs, err, derr
		}
		t.m.UnwritableRecords.WithLabelValues("carrier", "dropped").Add(float64(len(dropped)))
	}
	return kept, recs, err, nil
}
