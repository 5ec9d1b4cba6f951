package station

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/unseen"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/presencepb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

const allOptions = uint32(msgpb.Option_NEED_ACK | msgpb.Option_NEED_OFFLINE | msgpb.Option_NEED_NOTIFICATION | msgpb.Option_NEED_RECEIPTS)

// Push validates a request, stamps every body with a seq and queues one ToUid
// task per uid. It returns the seqs only after Kafka acknowledged every task;
// on any error nothing is reported as accepted (a partial write may leave
// some tasks queued, which at-least-once delivery tolerates).
//
// With an idempotency key, a retry of the same request within
// --idempotency-window returns the first call's seqs (see idempotentPush).
func (s *Station) Push(ctx context.Context, req *pushpb.PushRequest) ([]int64, error) {
	uids, err := s.validatePush(req)
	if err != nil {
		return nil, err
	}
	if err := s.allowQuota(ctx, s.pushQuota, 1); err != nil {
		return nil, err
	}
	release, err := s.acquirePushBytes(int64(pushBytes(req, len(uids))))
	if err != nil {
		return nil, err
	}
	defer release()
	if req.GetIdempotencyKey() != "" {
		if err := s.allowQuota(ctx, s.idempotencyQuota, 1); err != nil {
			return nil, err
		}
		return s.idempotentPush(ctx, req, uids)
	}
	return s.push(ctx, req, uids)
}

// push publishes a validated request.
func (s *Station) push(ctx context.Context, req *pushpb.PushRequest, uids []string) ([]int64, error) {
	now := time.Now()
	seqs := make([]int64, len(req.GetMsgBodies()))
	for i := range seqs {
		var err error
		if seqs[i], err = s.nextID(); err != nil {
			return nil, err
		}
	}
	tasks := make([]*mqpb.Payload, len(uids))
	var accepted []*receiptpb.Receipt // ACCEPTED per uid, platform and seq of the messages that ask NEED_RECEIPTS
	for i, uid := range uids {
		pc := req.GetPlatformConfig()
		if x, ok := req.GetExclusivePlatformConfig()[uid]; ok {
			pc = x
		}
		platforms, _ := s.cfg.Platforms.Select(pc.GetPlatforms(), pc.GetWithoutPlatforms())
		opts := req.GetMsgOptions()
		if x, ok := req.GetExclusiveMsgOptions()[uid]; ok {
			opts = x
		}
		msgs := make([]*msgpb.Message, len(seqs))
		for j, body := range req.GetMsgBodies() {
			msgs[j] = &msgpb.Message{Seq: seqs[j], Options: opts, Body: body, Timestamp: now.UnixMilli()}
		}
		p, err := s.newPayload(now)
		if err != nil {
			return nil, err
		}
		p.Body = &mqpb.Payload_ToUid{ToUid: &mqpb.ToUid{Uid: uid, Platforms: platforms, Msgs: msgs,
			Notification: req.GetNotification(), NotifyIfUnseenMs: req.GetNotifyIfUnseenAfter().AsDuration().Milliseconds()}}
		tasks[i] = p
		if s.cfg.Receipts.Enabled() {
			if accepted = receipt.Accepted(accepted, uid, platforms, msgs); len(accepted) > s.cfg.MaxReceiptsPerPush {
				return nil, grpcerr.Invalid("msg_options", "NEED_RECEIPTS on more than %d (uid, platform, message) targets in one push; split it, or track fewer",
					s.cfg.MaxReceiptsPerPush)
			}
		}
	}
	if err := s.allowQuota(ctx, s.receiptsQuota, len(accepted)); err != nil {
		return nil, err
	}
	// The receipts go in the tasks' Publish call: Push succeeds only when
	// Kafka took both.
	receipts, err := s.cfg.Receipts.Records(accepted...)
	if err != nil {
		return nil, err
	}
	if err := s.publish(ctx, uids, tasks, receipts...); err != nil {
		s.metrics.QueueError("publish").Inc()
		return nil, err
	}
	s.metrics.PushesAccepted.Add(float64(len(tasks)))
	s.metrics.MessagesAccepted.Add(float64(len(seqs)))
	return seqs, nil
}

// validatePush checks everything before anything is written and returns the
// uids de-duplicated in request order.
func (s *Station) validatePush(req *pushpb.PushRequest) ([]string, error) {
	if err := validIdempotencyKey(req.GetIdempotencyKey()); err != nil {
		return nil, err
	}
	if len(req.GetUids()) == 0 {
		return nil, grpcerr.Invalid("uids", "must name at least one uid")
	}
	if len(req.GetUids()) > s.cfg.MaxUIDs {
		return nil, grpcerr.Invalid("uids", "%d uids, at most %d per request", len(req.GetUids()), s.cfg.MaxUIDs)
	}
	uids := make([]string, 0, len(req.GetUids()))
	seen := make(map[string]bool, len(req.GetUids()))
	for _, uid := range req.GetUids() {
		if err := validUID(uid); err != nil {
			return nil, err
		}
		if !seen[uid] {
			seen[uid] = true
			uids = append(uids, uid)
		}
	}
	total, err := s.validBodies(req.GetMsgBodies())
	if err != nil {
		return nil, err
	}
	if err := s.validOptions("msg_options", req.GetMsgOptions()); err != nil {
		return nil, err
	}
	for uid, o := range req.GetExclusiveMsgOptions() {
		if !seen[uid] {
			return nil, grpcerr.Invalid("exclusive_msg_options", "uid %q is not in uids", uid)
		}
		if err := s.validOptions(fmt.Sprintf("exclusive_msg_options[%s]", uid), o); err != nil {
			return nil, err
		}
	}
	if err := validNotifyIfUnseen(req, uids); err != nil {
		return nil, err
	}
	if err := s.validPlatforms("platform_config", req.GetPlatformConfig()); err != nil {
		return nil, err
	}
	if err := validNotification(req.GetNotification()); err != nil {
		return nil, err
	}
	// Every uid gets its own record holding every body and the
	// notification: bound what one push may write to Kafka.
	if n := len(uids) * (total + proto.Size(req.GetNotification())); n > s.cfg.MaxPushBytes {
		s.metrics.LimitRejections.WithLabelValues("max_push_bytes").Inc()
		return nil, grpcerr.Limited("--max-push-bytes", "%d uids × %d bytes of bodies and notification make %d bytes, at most %d per push",
			len(uids), n/len(uids), n, s.cfg.MaxPushBytes)
	}
	for uid, pc := range req.GetExclusivePlatformConfig() {
		if !seen[uid] {
			return nil, grpcerr.Invalid("exclusive_platform_config", "uid %q is not in uids", uid)
		}
		if err := s.validPlatforms(fmt.Sprintf("exclusive_platform_config[%s]", uid), pc); err != nil {
			return nil, err
		}
	}
	return uids, nil
}

// pushBytes is what a push fans out to: every uid's record holds every
// body and the notification.
func pushBytes(req *pushpb.PushRequest, uids int) int {
	total := 0
	for _, b := range req.GetMsgBodies() {
		total += proto.Size(b)
	}
	return uids * (total + proto.Size(req.GetNotification()))
}

// validBodies checks the msg_bodies of a request (Push's and the
// broadcasts'): 1 to MaxBodies bodies, each valid (validBody), their values
// at most MaxRequestBytes in all. It returns their encoded size, type URLs
// and framing included: what each record they are copied into grows by.
func (s *Station) validBodies(bodies []*anypb.Any) (wire int, err error) {
	if len(bodies) == 0 {
		return 0, grpcerr.Invalid("msg_bodies", "must hold at least one body")
	}
	if len(bodies) > s.cfg.MaxBodies {
		return 0, grpcerr.Invalid("msg_bodies", "%d bodies, at most %d per request", len(bodies), s.cfg.MaxBodies)
	}
	total := 0
	for i, b := range bodies {
		if err := s.validBody(i, b); err != nil {
			return 0, err
		}
		total += len(b.GetValue())
		wire += proto.Size(b)
	}
	if total > s.cfg.MaxRequestBytes {
		return 0, grpcerr.Invalid("msg_bodies", "%d bytes in all, at most %d per request", total, s.cfg.MaxRequestBytes)
	}
	return wire, nil
}

// maxTypeURLBytes bounds a body's type URL, which --max-body-bytes does not
// count (type.googleapis.com/ and a fully qualified message name fit well).
const maxTypeURLBytes = 512

// validBody checks one body. --max-body-bytes counts the body's bytes (the
// Any's value), not its protobuf wrapper, so a body of exactly the limit
// passes whatever its type URL.
func (s *Station) validBody(i int, b *anypb.Any) error {
	field := fmt.Sprintf("msg_bodies[%d]", i)
	switch {
	case b == nil || b.GetTypeUrl() == "":
		return grpcerr.Invalid(field, "is empty (needs a type_url and a value)")
	case len(b.GetValue()) == 0:
		return grpcerr.Invalid(field, "has an empty value")
	case len(b.GetValue()) > s.cfg.MaxBodyBytes:
		return grpcerr.Invalid(field, "is %d bytes, at most %d", len(b.GetValue()), s.cfg.MaxBodyBytes)
	case len(b.GetTypeUrl()) > maxTypeURLBytes:
		return grpcerr.Invalid(field, "type_url is %d bytes, at most %d", len(b.GetTypeUrl()), maxTypeURLBytes)
	}
	return nil
}

func (s *Station) validOptions(field string, o uint32) error {
	if bad := o &^ allOptions; bad != 0 {
		return grpcerr.Invalid(field, "unknown option bits %#x (known: NEED_ACK=1, NEED_OFFLINE=2, NEED_NOTIFICATION=4, NEED_RECEIPTS=8)", bad)
	}
	if o&uint32(msgpb.Option_NEED_RECEIPTS) != 0 && !s.cfg.Receipts.Enabled() {
		return &grpcerr.Error{Code: codes.FailedPrecondition, Detail: errorpb.Code_INVALID_REQUEST, Field: field,
			Msg: "NEED_RECEIPTS needs receipts on (--receipts-topic)"}
	}
	return nil
}

// validNotifyIfUnseen accepts notify_if_unseen_after unset, or from 1ms to
// unseen.MaxDelay when the messages of every uid ask NEED_ACK (an ACK is
// what cancels the notification) and NEED_NOTIFICATION (else there is none
// to hold back).
func validNotifyIfUnseen(req *pushpb.PushRequest, uids []string) error {
	d := req.GetNotifyIfUnseenAfter()
	if d == nil {
		return nil
	}
	if d.CheckValid() != nil {
		return grpcerr.Invalid("notify_if_unseen_after", "seconds %d and nanos %d are not a valid Duration", d.GetSeconds(), d.GetNanos())
	}
	if v := d.AsDuration(); v < time.Millisecond || v > unseen.MaxDelay {
		return grpcerr.Invalid("notify_if_unseen_after", "%s, must be from 1ms to %s", v, unseen.MaxDelay)
	}
	const need = uint32(msgpb.Option_NEED_ACK | msgpb.Option_NEED_NOTIFICATION)
	for _, uid := range uids {
		if o, ok := req.GetExclusiveMsgOptions()[uid]; ok {
			if o&need != need {
				return grpcerr.Invalid(fmt.Sprintf("exclusive_msg_options[%s]", uid), "%#x lacks NEED_ACK or NEED_NOTIFICATION, which notify_if_unseen_after needs", o)
			}
		} else if req.GetMsgOptions()&need != need {
			return grpcerr.Invalid("msg_options", "%#x lacks NEED_ACK or NEED_NOTIFICATION, which notify_if_unseen_after needs", req.GetMsgOptions())
		}
	}
	return nil
}

func (s *Station) validPlatforms(field string, pc *pushpb.PlatformConfig) error {
	selected, unknown := s.cfg.Platforms.Select(pc.GetPlatforms(), pc.GetWithoutPlatforms())
	if unknown != "" {
		return grpcerr.UnknownPlatform(field, unknown)
	}
	if len(selected) == 0 {
		return grpcerr.Invalid(field, "selects no platform (configured: %s)", strings.Join(s.cfg.Platforms.Names(), ", "))
	}
	return nil
}

// validUID accepts 1–128 bytes of printable characters without '/', which
// would make Redis keys of different users collide.
func validUID(uid string) error {
	if uid == "" || len(uid) > 128 {
		return grpcerr.Invalid("uid", "%q must be 1 to 128 bytes", uid)
	}
	if strings.ContainsRune(uid, '/') || strings.IndexFunc(uid, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0 {
		return grpcerr.Invalid("uid", "%q must not contain '/', spaces or control characters", uid)
	}
	return nil
}

// Kickout queues a kickout of the selected sessions of a user, and their
// presence events (KICKED, BY_REQUEST) once Kafka took the kickouts: carrier
// removes the record of each session it kicks, so the boat's report of the
// end finds nothing left to report.
func (s *Station) Kickout(ctx context.Context, req *pushpb.KickoutRequest) ([]string, error) {
	if err := validUID(req.GetUid()); err != nil {
		return nil, err
	}
	if p := req.GetPlatform(); p != "" && !s.cfg.Platforms.Has(p) {
		return nil, grpcerr.UnknownPlatform("platform", p)
	}
	unlock, err := s.presence.Lock(ctx, req.GetUid())
	if err != nil {
		return nil, err
	}
	defer unlock()
	all, err := s.sessions.List(ctx, req.GetUid())
	if err != nil {
		return nil, err
	}
	var sids []string
	var tasks []*mqpb.Payload
	var events []*presencepb.Event
	now := time.Now()
	for _, sess := range all {
		if req.GetPlatform() != "" && sess.Platform != req.GetPlatform() || req.GetSid() != "" && sess.Sid != req.GetSid() {
			continue
		}
		events = append(events, presenceEvent(req.GetUid(), sess, presencepb.Kind_KICKED, presencepb.Reason_BY_REQUEST, now))
		p, err := s.newPayload(now)
		if err != nil {
			return nil, err
		}
		p.Body = &mqpb.Payload_KickoutSession{KickoutSession: &mqpb.KickoutSession{
			Uid: req.GetUid(), Sid: sess.Sid, Reason: msgpb.KickoutReason_BY_REQUEST}}
		tasks = append(tasks, p)
		sids = append(sids, sess.Sid)
	}
	if len(tasks) == 0 {
		return nil, nil
	}
	if err := s.publish(ctx, repeatUID(req.GetUid(), len(tasks)), tasks); err != nil {
		return nil, err
	}
	s.presence.Emit(events...)
	return sids, nil
}

// Online lists the recorded sessions of users (at most MaxUIDs).
func (s *Station) Online(ctx context.Context, uids []string) ([]*pushpb.UserSessions, error) {
	if len(uids) == 0 || len(uids) > s.cfg.MaxUIDs {
		return nil, grpcerr.Invalid("uids", "must name 1 to %d uids", s.cfg.MaxUIDs)
	}
	out := make([]*pushpb.UserSessions, 0, len(uids))
	seen := make(map[string]bool, len(uids))
	for _, uid := range uids {
		if err := validUID(uid); err != nil {
			return nil, err
		}
		if seen[uid] {
			continue
		}
		seen[uid] = true
		all, err := s.sessions.List(ctx, uid)
		if err != nil {
			return nil, err
		}
		us := &pushpb.UserSessions{Uid: uid}
		for _, sess := range all {
			us.Sessions = append(us.Sessions, &pushpb.Session{Sid: sess.Sid, Platform: sess.Platform, BoatId: sess.BoatID})
		}
		out = append(out, us)
	}
	return out, nil
}
