package boat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// pullTimeout bounds station's answer to a Pull.
const pullTimeout = 5 * time.Second

// errPullInFlight answers a Pull sent while the session's previous one is
// not answered yet.
var errPullInFlight = status.Error(codes.ResourceExhausted, "a Pull is already in flight on this session; send the next one after its PullResult")

// pull serves a device's Pull: station's PullOffline, with the uid and sid
// this boat holds for the session (station takes the platform from the
// session record), ACKs the given seqs and reads the next page; the answer
// is a PullResult with the Pull's id. It runs apart from the receive loop,
// so ACKs of live messages are not held up. A Pull past the session's
// request rate (refused) is answered RESOURCE_EXHAUSTED and changes
// nothing. One Pull per session is in
// flight at a time: another one meanwhile is answered RESOURCE_EXHAUSTED at
// once, and changes nothing (its ACKs are not applied). A failed Pull is
// answered with its status and never ends the session; backend failures
// reach the device as UNAVAILABLE ("retry"), with the cause in the logs.
// The page size is station's (limit <= 0 or above station.PullPage takes
// PullPage).
func (b *Boat) pull(ctx context.Context, s *session, r *msgpb.Pull, refused error) {
	answer := func(res *msgpb.PullResult, err error) {
		if err != nil {
			res = &msgpb.PullResult{}
			code, msg, detail := grpcerr.Parts(err)
			switch code {
			case codes.InvalidArgument, codes.PermissionDenied, codes.ResourceExhausted:
				res.Status, res.Message, res.Error = uint32(code), msg, detail
			default:
				res.Status, res.Message = uint32(codes.Unavailable), "pull failed; retry later"
			}
		}
		res.Id = r.GetId()
		if err := s.enqueue(outgoing{payload: &msgpb.ServerPayload{Body: &msgpb.ServerPayload_PullResult{
			PullResult: res}}}); errors.Is(err, ErrSlowConsumer) {
			s.kick(msgpb.KickoutReason_SLOW_CONSUMER)
		}
	}
	if refused != nil {
		answer(nil, refused)
		return
	}
	if !s.pulling.CompareAndSwap(false, true) {
		answer(nil, errPullInFlight)
		return
	}
	b.streams.Add(1)
	go func() {
		defer b.streams.Done()
		ctx, cancel := context.WithTimeout(ctx, pullTimeout)
		resp, err := b.station.PullOffline(ctx, &stationpb.PullOfflineRequest{
			BoatId: b.cfg.ID, Uid: s.uid, Sid: s.sid, Ack: r.GetAck(), Limit: r.GetLimit()})
		cancel()
		// The next Pull may come as soon as the device reads this answer:
		// the session takes it before the answer is queued.
		s.pulling.Store(false)
		if err != nil {
			switch status.Code(err) {
			case codes.InvalidArgument, codes.PermissionDenied:
			case codes.Unavailable:
				if grpcerr.DetailCode(err) == errorpb.Code_STORE_UNAVAILABLE {
					b.log.Debug("pull failed: offline store unavailable", zap.String("sid", s.sid), zap.Error(err))
				} else {
					b.stationDown.Fail(fmt.Errorf("pull offline messages: %w", err))
				}
			default:
				b.log.Warn("pull failed", zap.String("sid", s.sid), zap.String("uid", s.uid), zap.Error(err))
			}
			answer(nil, err)
			return
		}
		b.stationDown.OK()
		answer(&msgpb.PullResult{Msgs: resp.GetMsgs(), More: resp.GetMore()}, nil)
	}()
}
