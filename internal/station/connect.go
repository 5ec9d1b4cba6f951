package station

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/presencepb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// Connect authenticates a session's token, records the session and queues
// its tasks: with kick-older, a kickout of every session of the same uid and
// platform but the newest (chosen atomically with the record, see
// session.Store.Add), and the replay of its offline messages unless it is
// itself one of those. If the tasks cannot be queued, or the caller's
// deadline passed meanwhile, the session record is removed again and the
// error returned.
//
// With presence events on, Connect holds the uid's presence lock from the
// record to the events (KICKED for the losers, CONNECTED for the session),
// which it queues only once the connect succeeded: the events of one uid
// are queued in the order its sessions changed in Redis.
func (s *Station) Connect(ctx context.Context, token, boatID, sid string) (auth.Identity, error) {
	return s.connect(ctx, token, boatID, sid, false)
}

// ConnectPull is Connect for a device in pull mode: its SendOfflineToSession
// task says pull, so carrier only marks the session ready for live messages
// and the device pages through its offline messages itself (PullOffline).
func (s *Station) ConnectPull(ctx context.Context, token, boatID, sid string) (auth.Identity, error) {
	return s.connect(ctx, token, boatID, sid, true)
}

func (s *Station) connect(ctx context.Context, token, boatID, sid string, pull bool) (auth.Identity, error) {
	if boatID == "" {
		return auth.Identity{}, grpcerr.Invalid("boat_id", "must be set")
	}
	if sid == "" {
		return auth.Identity{}, grpcerr.Invalid("sid", "must be set")
	}
	// Finish a little before the boat's deadline, so that the answer
	// reaches it in time: a session recorded for a boat that gave up
	// waiting would stay recorded with no stream.
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-min(500*time.Millisecond, time.Until(d)/4)))
		defer cancel()
	}
	id, err := s.authenticate(ctx, token)
	if err != nil {
		return auth.Identity{}, err
	}
	if !s.cfg.Platforms.Has(id.Platform) {
		return auth.Identity{}, grpcerr.UnknownPlatform("token.platform", id.Platform)
	}
	if err := validUID(id.UID); err != nil {
		return auth.Identity{}, err
	}
	unlock, err := s.presence.Lock(ctx, id.UID)
	if err != nil {
		return auth.Identity{}, err
	}
	defer unlock()
	newSess := session.Session{Sid: sid, Platform: id.Platform, BoatID: boatID}
	caps := session.Caps{PerUID: s.cfg.MaxSessionsPerUID, PerPlatform: s.cfg.MaxSessionsPerPlatform}
	keepNewest := s.cfg.KickPolicy == KickOlder
	losers, err := s.sessions.Add(ctx, id.UID, newSess, caps, keepNewest)
	var capped *session.LimitError
	if errors.As(err, &capped) {
		// Records of boats that died count against the caps until carrier
		// happens to read them: drop those and try once more.
		if n, pruneErr := s.pruneDeadBoats(ctx, id.UID); pruneErr == nil && n > 0 {
			losers, err = s.sessions.Add(ctx, id.UID, newSess, caps, keepNewest)
		}
	}
	if errors.As(err, &capped) {
		if capped.Platform {
			s.metrics.LimitRejections.WithLabelValues("max_sessions_per_platform").Inc()
			return auth.Identity{}, grpcerr.Limited("--max-sessions-per-platform", "uid %q holds %d sessions on %s, at most %d",
				id.UID, capped.Have, id.Platform, s.cfg.MaxSessionsPerPlatform)
		}
		s.metrics.LimitRejections.WithLabelValues("max_sessions_per_uid").Inc()
		return auth.Identity{}, grpcerr.Limited("--max-sessions-per-uid", "uid %q holds %d sessions, at most %d",
			id.UID, capped.Have, s.cfg.MaxSessionsPerUID)
	}
	if err != nil {
		// A deadline may end the call after Redis ran the script: the
		// session may be recorded, so it is removed again.
		s.undoAdd(ctx, id.UID, sid, boatID)
		return auth.Identity{}, err
	}
	now := time.Now()
	var tasks []*mqpb.Payload
	lost := false
	for _, old := range losers {
		// Losers are chosen by the store in the same step as the record,
		// by connect order within the uid (not by sid: boats' clocks
		// differ), so of two racing connects the earlier one is always
		// among them: a sid connected again after a later connect kicks
		// itself.
		lost = lost || old.Sid == sid
		p, err := s.newPayload(now)
		if err != nil {
			s.undoAdd(ctx, id.UID, sid, boatID)
			return auth.Identity{}, err
		}
		p.Body = &mqpb.Payload_KickoutSession{KickoutSession: &mqpb.KickoutSession{
			Uid: id.UID, Sid: old.Sid, Reason: msgpb.KickoutReason_NEW_SESSION}}
		tasks = append(tasks, p)
	}
	if !lost {
		p, err := s.newPayload(now)
		if err != nil {
			s.undoAdd(ctx, id.UID, sid, boatID)
			return auth.Identity{}, err
		}
		p.Body = &mqpb.Payload_SendOfflineToSession{SendOfflineToSession: &mqpb.SendOfflineToSession{
			Uid: id.UID, Sid: sid, Platform: id.Platform, Pull: pull}}
		tasks = append(tasks, p)
	}
	err = s.publish(ctx, repeatUID(id.UID, len(tasks)), tasks)
	if err == nil && ctx.Err() != nil {
		// The boat stopped waiting: it would never learn of the session.
		err = ctx.Err()
	}
	if err != nil {
		s.undoAdd(ctx, id.UID, sid, boatID)
		return auth.Identity{}, err
	}
	s.presence.Emit(connectEvents(id.UID, newSess, losers, now)...)
	return id, nil
}

// connectEvents are the presence events of a connect: KICKED (NEW_SESSION)
// for each loser, CONNECTED for the new session, and its own KICKED last
// when it lost to a newer one.
func connectEvents(uid string, sess session.Session, losers []session.Session, now time.Time) []*presencepb.Event {
	evs := make([]*presencepb.Event, 0, len(losers)+1)
	lost := false
	for _, l := range losers {
		if l.Sid == sess.Sid {
			lost = true
			continue
		}
		evs = append(evs, presenceEvent(uid, l, presencepb.Kind_KICKED, presencepb.Reason_NEW_SESSION, now))
	}
	evs = append(evs, presenceEvent(uid, sess, presencepb.Kind_CONNECTED, presencepb.Reason_REASON_UNSPECIFIED, now))
	if lost {
		evs = append(evs, presenceEvent(uid, sess, presencepb.Kind_KICKED, presencepb.Reason_NEW_SESSION, now))
	}
	return evs
}

// endEvent is the presence event of a session that ended for reason; nil
// for NEW_SESSION and BY_REQUEST, kicks station decided, whose KICKED the
// Connect or Kickout that decided them queued already.
func endEvent(uid string, sess session.Session, reason presencepb.Reason, now time.Time) *presencepb.Event {
	switch reason {
	case presencepb.Reason_NEW_SESSION, presencepb.Reason_BY_REQUEST:
		return nil
	case presencepb.Reason_ACK_TIMEOUT, presencepb.Reason_SLOW_CONSUMER, presencepb.Reason_SERVER_DRAINING:
		return presenceEvent(uid, sess, presencepb.Kind_KICKED, reason, now)
	}
	return presenceEvent(uid, sess, presencepb.Kind_DISCONNECTED, reason, now)
}

func presenceEvent(uid string, sess session.Session, kind presencepb.Kind, reason presencepb.Reason, now time.Time) *presencepb.Event {
	return &presencepb.Event{Uid: uid, Platform: sess.Platform, Sid: sess.Sid, BoatId: sess.BoatID,
		Kind: kind, Reason: reason, Time: now.UnixMilli()}
}

// pruneDeadBoats removes the user's sessions recorded on boats that are no
// longer registered in etcd, and returns how many it removed.
func (s *Station) pruneDeadBoats(ctx context.Context, uid string) (int, error) {
	all, err := s.sessions.List(ctx, uid)
	if err != nil {
		return 0, err
	}
	alive := map[string]bool{}
	var dead []session.Session
	for _, sess := range all {
		up, seen := alive[sess.BoatID]
		if !seen {
			resp, err := s.etcd.Get(ctx, discovery.BoatKey(s.cfg.EtcdPrefix, sess.BoatID), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			up = resp.Count > 0
			alive[sess.BoatID] = up
		}
		if !up {
			dead = append(dead, sess)
		}
	}
	if len(dead) == 0 {
		return 0, nil
	}
	s.log.Info("removing sessions of boats that are gone", zap.String("uid", uid), zap.Int("sessions", len(dead)))
	refs := make([]session.Ref, len(dead))
	for i, d := range dead {
		refs[i] = session.Ref{UID: uid, Sid: d.Sid, BoatID: d.BoatID}
	}
	removed, err := s.sessions.RemoveMany(ctx, refs)
	s.emitEnds(refs, removed, func(int) presencepb.Reason { return presencepb.Reason_BOAT_GONE })
	return len(dead), err
}

// emitEnds queues the presence events of the sessions a RemoveMany removed
// (removed[i] set), refs[i] ending for reason(i). The caller holds the uids'
// presence locks.
func (s *Station) emitEnds(refs []session.Ref, removed []session.Session, reason func(i int) presencepb.Reason) {
	if s.presence == nil {
		return
	}
	now := time.Now()
	var evs []*presencepb.Event
	for i, r := range removed {
		if r.Sid == "" {
			continue
		}
		if ev := endEvent(refs[i].UID, r, reason(i), now); ev != nil {
			evs = append(evs, ev)
		}
	}
	s.presence.Emit(evs...)
}

// undoAdd removes a session Connect recorded (or may have) before failing.
// No presence event: its CONNECTED was not queued.
func (s *Station) undoAdd(ctx context.Context, uid, sid, boatID string) {
	if err := s.sessions.Remove(context.WithoutCancel(ctx), uid, session.Session{Sid: sid, BoatID: boatID}); err != nil {
		s.log.Warn("could not undo session record", zap.String("uid", uid), zap.String("sid", sid), zap.Error(err))
	}
}

// authenticate checks a token within --auth-timeout, so an auth service
// that never answers cannot hold connects (and their goroutines) forever.
func (s *Station) authenticate(ctx context.Context, token string) (auth.Identity, error) {
	// The timeout is --auth-timeout's only when it ends before the caller's
	// own deadline (boat's --connect-timeout); otherwise a DeadlineExceeded
	// is the caller's, and labelling it --auth-timeout would name the wrong
	// setting.
	own := true
	if d, ok := ctx.Deadline(); ok && !d.After(time.Now().Add(s.cfg.AuthTimeout)) {
		own = false
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.AuthTimeout)
	defer cancel()
	id, err := s.auth.Authenticate(actx, token)
	// The auth service may end the call at the propagated deadline a moment
	// before actx's own timer fires: its DeadlineExceeded counts too.
	if err != nil && own && ctx.Err() == nil && (actx.Err() != nil || status.Code(err) == codes.DeadlineExceeded) {
		s.metrics.LimitRejections.WithLabelValues("auth_timeout").Inc()
		return auth.Identity{}, &grpcerr.Error{Code: codes.DeadlineExceeded, Detail: errorpb.Code_LIMIT_EXCEEDED, Field: "--auth-timeout",
			Msg: fmt.Sprintf("authentication did not finish within %s", s.cfg.AuthTimeout)}
	}
	return id, err
}

// Disconnect removes ended sessions, many users' in one round trip, and
// queues a presence event for each one it removed (a session reported twice,
// or removed already, gets none): reasons[i] is why refs[i] ended.
func (s *Station) Disconnect(ctx context.Context, refs []session.Ref, reasons []presencepb.Reason) error {
	for i, r := range refs {
		if r.UID == "" || r.Sid == "" {
			return grpcerr.Invalid("sessions", "entry %d needs uid and sid", i)
		}
	}
	_, err := s.removeEnded(ctx, refs, func(i int) presencepb.Reason { return reasons[i] })
	if err != nil {
		return err
	}
	s.metrics.DisconnectCalls.Inc()
	s.metrics.Disconnected.Add(float64(len(refs)))
	return nil
}

// removeEnded removes sessions that ended, with their uids' presence locked
// (a Connect of one of them records and announces it under the same lock,
// so its end is never announced first), queues an end event for each it
// removed, and returns how many it removed.
func (s *Station) removeEnded(ctx context.Context, refs []session.Ref, reason func(i int) presencepb.Reason) (int, error) {
	uids := make([]string, len(refs))
	for i, r := range refs {
		uids[i] = r.UID
	}
	unlock, err := s.presence.Lock(ctx, uids...)
	if err != nil {
		return 0, err
	}
	defer unlock()
	removed, err := s.sessions.RemoveMany(ctx, refs)
	if err != nil {
		return 0, err
	}
	s.emitEnds(refs, removed, reason)
	n := 0
	for _, r := range removed {
		if r.Sid != "" {
			n++
		}
	}
	return n, nil
}

// Resume records again the sessions a boat still holds and queues their
// offline replay (a boat back after losing its etcd lease: carrier may have
// removed its sessions and stored their messages offline meanwhile).
func (s *Station) Resume(ctx context.Context, boatID string, sessions []*stationpb.ResumedSession) error {
	if boatID == "" {
		return grpcerr.Invalid("boat_id", "must be set")
	}
	refs := make([]session.Ref, len(sessions))
	platforms := make([]string, len(sessions))
	uids := make([]string, len(sessions))
	tasks := make([]*mqpb.Payload, len(sessions))
	now := time.Now()
	for i, r := range sessions {
		if r.GetUid() == "" || r.GetSid() == "" || !s.cfg.Platforms.Has(r.GetPlatform()) {
			return grpcerr.Invalid("sessions", "entry %d needs uid, sid and a configured platform", i)
		}
		refs[i] = session.Ref{UID: r.GetUid(), Sid: r.GetSid()}
		platforms[i], uids[i] = r.GetPlatform(), r.GetUid()
		p, err := s.newPayload(now)
		if err != nil {
			return err
		}
		p.Body = &mqpb.Payload_SendOfflineToSession{SendOfflineToSession: &mqpb.SendOfflineToSession{
			Uid: r.GetUid(), Sid: r.GetSid(), Platform: r.GetPlatform()}}
		tasks[i] = p
	}
	if err := s.sessions.AddMany(ctx, boatID, refs, platforms); err != nil {
		return err
	}
	return s.publish(ctx, uids, tasks)
}

// ResetBoat removes every session recorded for a boat: one starting again
// under the same id (its previous run ended without reporting them: they
// end as BOAT_GONE), or, with draining, the boat itself as it drains — it
// has left etcd and is ending every session, and clearing them here takes
// one pipelined round trip per 500 sessions instead of waiting for each
// stream to end and be reported (100,000 sessions took 19 s that way);
// those end as SERVER_DRAINING, at most DrainClearRate a second. Each page
// of the boat's index is removed as the boat's own reports would be, with
// its uids' presence locked: a draining boat's sessions are live, and their
// reports (which then find them gone) may race these.
func (s *Station) ResetBoat(ctx context.Context, boatID string, draining bool) (int, error) {
	if boatID == "" {
		return 0, grpcerr.Invalid("boat_id", "must be set")
	}
	reason, what := presencepb.Reason_BOAT_GONE, "a previous run of a boat"
	if draining {
		reason, what = presencepb.Reason_SERVER_DRAINING, "a draining boat"
	}
	var pace *rate.Limiter
	if draining && s.cfg.DrainClearRate > 0 {
		pace = rate.NewLimiter(rate.Limit(s.cfg.DrainClearRate), session.ScanPage)
	}
	n := 0
	for cursor := uint64(0); ; {
		refs, next, err := s.sessions.ScanBoat(ctx, boatID, cursor)
		if err != nil {
			return n, err
		}
		if pace != nil {
			if err := pace.WaitN(ctx, min(len(refs), session.ScanPage)); err != nil {
				if ctx.Err() == nil { // the page's turn comes after ctx's deadline
					err = context.DeadlineExceeded
				}
				return n, status.FromContextError(err).Err()
			}
		}
		m, err := s.removeEnded(ctx, refs, func(int) presencepb.Reason { return reason })
		n += m
		if err != nil {
			return n, err
		}
		if next == 0 {
			if n > 0 {
				s.log.Info("removed sessions of "+what, zap.String("boat", boatID), zap.Int("sessions", n))
			}
			return n, nil
		}
		cursor = next
	}
}

func repeatUID(uid string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = uid
	}
	return out
}
