package carrier

import (
	"context"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/offline"
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
		return target{}, false, c.sessions.Remove(ctx, uid, sid)
	}
	return target{Session: s, uid: uid, boat: client}, true, nil
}

// kickout ends a session through its boat and removes its record.
func (c *Carrier) kickout(ctx context.Context, k *mqpb.KickoutSession) error {
	t, ok, err := c.sessionTarget(ctx, k.GetUid(), k.GetSid())
	if err != nil || !ok {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	_, err = t.boat.Kickout(callCtx, &boatpb.KickoutRequest{Sid: k.GetSid(), Reason: k.GetReason()})
	cancel()
	if err != nil && !isNotHeld(err) {
		return err
	}
	return c.sessions.Remove(ctx, k.GetUid(), k.GetSid())
}

// sendOffline replays a session's stored messages, oldest first, a page at a
// time: each page is pushed with ACK and deleted only once ACKed. A session
// that goes away mid-way loses nothing: what it did not ACK stays stored.
// When the store is empty the session is marked ready for live messages.
func (c *Carrier) sendOffline(ctx context.Context, t *mqpb.SendOfflineToSession) error {
	tg, ok, err := c.sessionTarget(ctx, t.GetUid(), t.GetSid())
	if err != nil || !ok {
		return err
	}
	log := c.log.With(zap.String("uid", t.GetUid()), zap.String("sid", t.GetSid()), zap.String("platform", t.GetPlatform()))
	if p, ok := c.cfg.Platforms.Get(t.GetPlatform()); ok && p.Offline.Store {
		done, err := c.replay(ctx, tg, p.Offline, log)
		if err != nil || !done {
			return err
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	_, err = tg.boat.FinishReplay(callCtx, &boatpb.FinishReplayRequest{Sid: t.GetSid()})
	if err != nil && !isNotHeld(err) {
		return err
	}
	return nil
}

// replay pushes pages until the store is empty (done) or the session cannot
// take more (not done, no error: what is left stays stored).
func (c *Carrier) replay(ctx context.Context, tg target, pol offline.Policy, log *zap.Logger) (done bool, err error) {
	uid, pl := tg.uid, tg.Platform
	total := 0
	for {
		now := time.Now()
		page, err := c.offline.Read(ctx, uid, pl, now, pol.Expiry, offline.PageSize)
		if err != nil {
			return false, err
		}
		if len(page) == 0 {
			if total > 0 {
				log.Debug("offline replay done", zap.Int("messages", total))
			}
			return true, c.offline.DropExpired(ctx, uid, pl, now, pol.Expiry)
		}
		msgs := make([]*msgpb.Message, 0, len(page))
		for _, m := range page {
			var msg msgpb.Message
			if err := proto.Unmarshal(m.Body, &msg); err != nil {
				log.Error("dropping undecodable offline message", zap.Int64("seq", m.Seq), zap.Error(err))
				if err := c.offline.Delete(ctx, uid, pl, []int64{m.Seq}); err != nil {
					return false, err
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
			if derr := c.offline.Delete(ctx, uid, pl, acked); derr != nil {
				return false, derr
			}
		}
		if err != nil {
			if sessionEnded(err) {
				// The session went away, did not ACK or could not keep up
				// (its boat kicks it out): the rest waits for its next connect.
				log.Info("offline replay interrupted", zap.Int("sent", total), zap.Error(err))
				return false, nil
			}
			return false, err
		}
		total += len(acked)
		c.metrics.OfflineReplayed.Add(float64(len(acked)))
	}
}

// sessionEnded reports a boat answer that means the session is over (or is
// being kicked out), as opposed to a failure worth retrying.
func sessionEnded(err error) bool {
	switch grpcx.DetailCode(err) {
	case errorpb.Code_SESSION_NOT_FOUND, errorpb.Code_ACK_TIMEOUT, errorpb.Code_SLOW_CONSUMER:
		return true
	}
	return false
}
