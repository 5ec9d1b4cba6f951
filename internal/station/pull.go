package station

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// Bounds of a Pull (a large unread backlog is pulled a page at a time, with
// the ACK of the previous page in the same request).
const (
	// PullPage is a page's default and largest number of messages: a
	// smaller limit is taken as asked, a larger one (or none) as PullPage.
	PullPage = 100
	// MaxPullAck is the most seqs one Pull may ACK.
	MaxPullAck = 1000
	// maxPullBytes bounds the bodies of one page (at least one message is
	// sent whatever its size): PullPage bodies of up to --max-body-bytes
	// could exceed what a gRPC frame to the boat, and from it to the
	// device, may carry (4 MiB by default).
	maxPullBytes = 1 << 20
)

// PullAckHook runs for the ACKed seqs of a Pull that the offline store of
// (uid, platform) holds, before they are deleted; an error answers the Pull
// Unavailable and deletes nothing (the device pulls again with the same
// ACK and the hook runs again). See Config.OnPullAck.
type PullAckHook func(ctx context.Context, uid, platform, sid, boatID string, seqs []int64) error

// PullOffline serves a device's Pull for session sid of uid on boatID (what
// the boat holds; the device names neither): it deletes the ack seqs from
// the offline store of the session's (uid, platform), then reads the oldest
// messages left, up to limit (PullPage when limit <= 0 or larger) and
// maxPullBytes of bodies, within the platform's offline expiry. more says
// that messages are left after the page.
//
// A session that is not recorded on boatID is refused PermissionDenied and
// nothing is deleted. The record is checked before the delete, not in the
// same step: a session that ends in between still gets its ACK applied,
// which is what its device asked for.
func (s *Station) PullOffline(ctx context.Context, boatID, uid, sid string, ack []int64, limit int) (msgs []*msgpb.Message, more bool, err error) {
	switch {
	case boatID == "":
		return nil, false, grpcerr.Invalid("boat_id", "must be set")
	case sid == "":
		return nil, false, grpcerr.Invalid("sid", "must be set")
	case len(ack) > MaxPullAck:
		return nil, false, grpcerr.Invalid("ack", "%d seqs, at most %d", len(ack), MaxPullAck)
	}
	if i := slices.IndexFunc(ack, func(seq int64) bool { return seq <= 0 }); i >= 0 {
		return nil, false, grpcerr.Invalid("ack", "seq %d (index %d) must be positive", ack[i], i)
	}
	if err := validUID(uid); err != nil {
		return nil, false, err
	}
	if limit <= 0 || limit > PullPage {
		limit = PullPage
	}
	if s.cfg.Offline == nil {
		return nil, false, grpcerr.New(codes.Unavailable, errorpb.Code_STORE_UNAVAILABLE, "this station has no offline store")
	}
	all, err := s.sessions.List(ctx, uid)
	if err != nil {
		return nil, false, err
	}
	i := slices.IndexFunc(all, func(ss session.Session) bool { return ss.Sid == sid && ss.BoatID == boatID })
	if i < 0 {
		return nil, false, errNotYourSession(uid, sid, boatID)
	}
	platform := all[i].Platform
	pl, ok := s.cfg.Platforms.Get(platform)
	if !ok || !pl.Offline.Store {
		return nil, false, nil // nothing is ever stored for it
	}
	if len(ack) > 0 {
		// Only the seqs the list holds are acted on (one ZMSCORE finds
		// them): an ACK of seqs never stored, or gone already, costs no
		// delete. What an ACK triggers besides the delete (receipts,
		// cancelling notify-if-unseen) runs first: a device cannot have
		// steps recorded for messages it was never stored (another user's,
		// or seqs no push returned), and a failure leaves the messages
		// stored for the same ACK to be sent again.
		held, err := s.cfg.Offline.Held(ctx, uid, platform, ack)
		if err != nil {
			return nil, false, storeError(err)
		}
		if len(held) > 0 {
			if h := s.cfg.OnPullAck; h != nil {
				if err := h(ctx, uid, platform, sid, boatID, held); err != nil {
					return nil, false, status.Errorf(codes.Unavailable,
						"pull: the ACK was not applied; pull again with the same ack: %v", err)
				}
			}
			if err := s.cfg.Offline.Delete(ctx, uid, platform, held); err != nil {
				return nil, false, storeError(err)
			}
		}
	}
	now := time.Now()
	// One more than the page says whether more are left.
	page, err := s.cfg.Offline.Read(ctx, uid, platform, now, pl.Offline.Expiry, limit+1)
	if err != nil {
		return nil, false, storeError(err)
	}
	if len(page) == 0 {
		// Expired members are dropped once the list reads empty, as
		// carrier's replay does.
		if err := s.cfg.Offline.DropExpired(ctx, uid, platform, now, pl.Offline.Expiry); err != nil {
			return nil, false, storeError(err)
		}
		return nil, false, nil
	}
	more = len(page) > limit
	page = page[:min(len(page), limit)]
	bytes := 0
	msgs = make([]*msgpb.Message, 0, len(page))
	for _, m := range page {
		if len(msgs) > 0 && bytes+len(m.Body) > maxPullBytes {
			more = true
			break
		}
		var msg msgpb.Message
		if err := proto.Unmarshal(m.Body, &msg); err != nil {
			s.log.Error("dropping undecodable offline message", zap.String("uid", uid), zap.String("platform", platform),
				zap.Int64("seq", m.Seq), zap.Error(err))
			if err := s.cfg.Offline.Delete(ctx, uid, platform, []int64{m.Seq}); err != nil {
				return nil, false, storeError(err)
			}
			continue // a page of nothing else comes back empty, with more as it was
		}
		bytes += len(m.Body)
		msgs = append(msgs, &msg)
	}
	s.metrics.PulledMessages.Add(float64(len(msgs)))
	return msgs, more, nil
}

// storeError makes an offline store failure Unavailable (STORE_UNAVAILABLE);
// the caller's own end passes through as Canceled or DeadlineExceeded.
func storeError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return grpcerr.New(codes.Unavailable, errorpb.Code_STORE_UNAVAILABLE, "offline store: %v", err)
}
