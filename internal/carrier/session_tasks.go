package carrier

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// sessionTarget finds a recorded session and its boat; ok is false when the
// session is gone (a record of a vanished boat is removed on the way).
func (c *Carrier) sessionTarget(ctx context.Context, uid, sid string) (t target, ok bool, err error) {
	s, ok, err := c.sessions.Get(ctx, uid, sid)
	if err != nil || !ok {
		return target{}, false, err
	}
	client, found, err := c.boats.Client(ctx, s.BoatID)
	if err != nil {
		return target{}, false, err
	}
	if !found {
		return target{}, false, c.sessions.Remove(ctx, uid, s)
	}
	return target{Session: s, uid: uid, boat: client}, true, nil
}

// kickout ends a session through its boat and removes its record. A boat
// that cannot be reached makes it a partial failure, retried later.
func (c *Carrier) kickout(ctx context.Context, p *mqpb.Payload, k *mqpb.KickoutSession) (*partial, error) {
	t, ok, err := c.sessionTarget(ctx, k.GetUid(), k.GetSid())
	if err != nil || !ok {
		return nil, err
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	_, err = t.boat.Kickout(callCtx, &boatpb.KickoutRequest{Sid: k.GetSid(), Reason: k.GetReason()})
	cancel()
	if err != nil && !isNotHeld(err) {
		return &partial{reason: fmt.Errorf("kickout %s: %w", k.GetSid(), err), body: p}, nil
	}
	return nil, c.sessions.Remove(ctx, k.GetUid(), t.Session)
}

// sendOffline replays a session's stored messages, oldest first, a page at a
// time: each page is pushed with ACK and deleted only once ACKed. A session
// that goes away mid-way loses nothing: what it did not ACK stays stored.
// When the store is empty the session is marked ready for live messages, and
// the store is read once more: the retry consumer runs beside this one, so a
// live message it found the session not ready for may have been stored after
// the replay's last read. A boat that cannot be reached makes it a partial
// failure, retried later.
//
// A session in pull mode (t.pull) pages through the store itself (station's
// PullOffline): it is only marked ready, with no replay and no second read.
func (c *Carrier) sendOffline(ctx context.Context, p *mqpb.Payload, t *mqpb.SendOfflineToSession) (*partial, error) {
	tg, ok, err := c.sessionTarget(ctx, t.GetUid(), t.GetSid())
	if err != nil || !ok {
		return nil, err
	}
	log := c.log.With(zap.String("uid", t.GetUid()), zap.String("sid", t.GetSid()), zap.String("platform", t.GetPlatform()))
	pl, ok := c.cfg.Platforms.Get(t.GetPlatform())
	stores := ok && pl.Offline.Store && !t.GetPull()
	if stores {
		part, done, err := c.replayTask(ctx, p, tg, pl.Offline, log)
		if part != nil || err != nil || !done {
			return part, err
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	_, err = tg.boat.FinishReplay(callCtx, &boatpb.FinishReplayRequest{Sid: t.GetSid()})
	switch {
	case isNotHeld(err):
		return nil, nil
	case err != nil:
		return &partial{reason: fmt.Errorf("finish replay of %s: %w", t.GetSid(), err), body: p}, nil
	case !stores:
		return nil, nil
	}
	part, _, err := c.replayTask(ctx, p, tg, pl.Offline, log)
	return part, err
}

// replayTask runs replay for a SendOfflineToSession task: a boat failure
// becomes a partial failure of the task.
func (c *Carrier) replayTask(ctx context.Context, p *mqpb.Payload, tg target, pol offline.Policy, log *zap.Logger) (part *partial, done bool, err error) {
	done, boatErr, err := c.replay(ctx, tg, pol, log)
	if err != nil {
		return nil, false, err
	}
	if boatErr != nil {
		return &partial{reason: fmt.Errorf("offline replay to %s: %w", tg.Sid, boatErr), body: p}, false, nil
	}
	return nil, done, nil
}

// replay pushes pages until the store is empty (done) or the session is gone
// or cannot take more (not done: what is left stays stored). boatErr is a
// boat failure worth a retry; err a store failure.
func (c *Carrier) replay(ctx context.Context, tg target, pol offline.Policy, log *zap.Logger) (done bool, boatErr, err error) {
	uid, pl := tg.uid, tg.Platform
	// Another replay of this store (the retry consumer's, another
	// session's) would push the same pages: wait for it. Once it is done,
	// what it delivered is deleted and this one reads the rest.
	unlock, err := c.replays.lock(ctx, uid+"\x00"+pl)
	if err != nil {
		return false, nil, err
	}
	defer unlock()
	total := 0
	for {
		now := time.Now()
		page, err := c.offline.Read(ctx, uid, pl, now, pol.Expiry, offline.PageSize)
		if err != nil {
			return false, nil, err
		}
		if len(page) == 0 {
			if total > 0 {
				log.Debug("offline replay done", zap.Int("messages", total))
			}
			expired, err := c.offline.Expire(ctx, uid, pl, now, pol.Expiry)
			if err != nil {
				return false, nil, err
			}
			rs, err := c.expirySteps(ctx, nil, uid, pl, expired, "expired")
			if err != nil {
				return false, nil, err
			}
			return true, nil, c.cfg.Receipts.Record(ctx, rs...)
		}
		msgs := make([]*msgpb.Message, 0, len(page))
		for _, m := range page {
			var msg msgpb.Message
			if err := proto.Unmarshal(m.Body, &msg); err != nil {
				log.Error("dropping undecodable offline message", zap.Int64("seq", m.Seq), zap.Error(err))
				if err := c.offline.Delete(ctx, uid, pl, []int64{m.Seq}); err != nil {
					return false, nil, err
				}
				continue
			}
			// Replayed messages are always ACKed: they are deleted only then.
			msg.Options |= uint32(msgpb.Option_NEED_ACK)
			msgs = append(msgs, &msg)
		}
		if len(msgs) == 0 {
			continue
		}
		acked, err := c.push(ctx, tg, msgs, true)
		if len(acked) > 0 {
			// Cancelled first: a failure leaves the page stored, to be
			// replayed (and cancelled) again.
			if cerr := c.CancelUnseen(ctx, uid, acked); cerr != nil {
				return false, nil, cerr
			}
			// REPLAYED receipts before the delete: a crash republishes them.
			if rerr := c.cfg.Receipts.Record(ctx, c.replaySteps(tg, msgs, acked)...); rerr != nil {
				return false, nil, rerr
			}
			if derr := c.offline.Delete(ctx, uid, pl, acked); derr != nil {
				return false, nil, derr
			}
			if ferr := c.forgetTracked(ctx, uid, pl, acked); ferr != nil {
				return false, nil, ferr
			}
			// Counted here, not after the error check: a page ACKed in
			// part before the session ended replayed those messages.
			total += len(acked)
			c.metrics.OfflineReplayed.Add(float64(len(acked)))
		}
		if err != nil {
			if sessionEnded(err) {
				// The session went away, did not ACK or could not keep up
				// (its boat kicks it out): the rest waits for its next connect.
				log.Info("offline replay interrupted", zap.Int("sent", total), zap.Error(err))
				return false, nil, nil
			}
			return false, err, nil
		}
	}
}

// sessionEnded reports a boat answer that means the session is over (or is
// being kicked out), as opposed to a failure worth retrying.
func sessionEnded(err error) bool {
	switch grpcerr.DetailCode(err) {
	case errorpb.Code_SESSION_NOT_FOUND, errorpb.Code_ACK_TIMEOUT, errorpb.Code_SLOW_CONSUMER:
		return true
	}
	return false
}

// queueReplays publishes a SendOfflineToSession task for the newest session
// of every platform whose delivery failed while a session of it is online
// and whose messages were stored: without it the stored messages would wait
// for the device to reconnect, which a session that stays connected never
// does. The task goes to the task topic keyed by uid, behind the user's
// tasks already queued, so it replays the store in seq order. A session that
// was not ready (its own replay still running, possibly on the retry
// consumer's side of a race) gets one too: a replay of a store already read
// is one empty read. Platforms that store nothing (offline=none, or no
// NEED_OFFLINE message) queue nothing. An error means Kafka did not take the
// tasks: the caller retries the whole task.
func (c *Carrier) queueReplays(ctx context.Context, p *mqpb.Payload, uid string, undelivered []string,
	results map[string]outcome, newest map[string]*target, msgs []*msgpb.Message) error {
	now := time.Now().UnixMilli()
	var recs []queue.Record
	for _, pl := range undelivered {
		tg := newest[pl]
		if results[pl] != failed || tg == nil || !c.storable(pl, msgs) {
			continue
		}
		v, err := proto.Marshal(&mqpb.Payload{Seq: p.GetSeq(), Timestamp: now,
			Body: &mqpb.Payload_SendOfflineToSession{SendOfflineToSession: &mqpb.SendOfflineToSession{
				Uid: uid, Sid: tg.Sid, Platform: pl}}})
		if err != nil {
			return fmt.Errorf("marshal replay task of %q: %w", uid, err)
		}
		recs = append(recs, queue.Record{Topic: c.cfg.TaskTopic, Key: uid, Value: v, Headers: traceHeaders(ctx)})
	}
	if len(recs) == 0 {
		return nil
	}
	if err := c.queue.Publish(ctx, recs...); err != nil {
		return fmt.Errorf("publish %d replay tasks of %q: %w", len(recs), uid, err)
	}
	c.metrics.ReplaysQueued.Add(float64(len(recs)))
	return nil
}
