package boat

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/room"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/errorpb"
)

// internalServer adapts boatpb.Boat (called by carrier) to the boat.
type internalServer struct {
	boatpb.UnimplementedBoatServer
	b *Boat
}

func (s *internalServer) PushMessages(ctx context.Context, req *boatpb.PushMessagesRequest) (*boatpb.PushMessagesResponse, error) {
	acked, err := s.push(ctx, req)
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return &boatpb.PushMessagesResponse{AckedSeqs: acked}, nil
}

// push is one PushMessages call, from the unary method or a Deliver stream.
func (s *internalServer) push(ctx context.Context, req *boatpb.PushMessagesRequest) ([]int64, error) {
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	return s.b.PushMessages(ctx, req.GetSid(), req.GetAckWait().AsDuration(), req.GetMsgs(), req.GetReplay())
}

// checkRequest refuses a push without a sid or messages.
func checkRequest(req *boatpb.PushMessagesRequest) error {
	if req.GetSid() == "" {
		return grpcerr.Invalid("sid", "must be set")
	}
	if len(req.GetMsgs()) == 0 {
		return grpcerr.Invalid("msgs", "must not be empty")
	}
	return nil
}

func (s *internalServer) Kickout(ctx context.Context, req *boatpb.KickoutRequest) (*boatpb.KickoutResponse, error) {
	if req.GetSid() == "" {
		return nil, grpcerr.Status(grpcerr.Invalid("sid", "must be set"))
	}
	if err := s.b.Kickout(ctx, req.GetSid(), req.GetReason()); err != nil {
		return nil, grpcerr.Status(err)
	}
	return &boatpb.KickoutResponse{}, nil
}

func (s *internalServer) FinishReplay(ctx context.Context, req *boatpb.FinishReplayRequest) (*boatpb.FinishReplayResponse, error) {
	if req.GetSid() == "" {
		return nil, grpcerr.Status(grpcerr.Invalid("sid", "must be set"))
	}
	if err := s.b.FinishReplay(ctx, req.GetSid()); err != nil {
		return nil, grpcerr.Status(err)
	}
	return &boatpb.FinishReplayResponse{}, nil
}

func (s *internalServer) Broadcast(ctx context.Context, req *boatpb.BroadcastRequest) (*boatpb.BroadcastResponse, error) {
	switch {
	case req.GetAll() && req.GetRoom() != "":
		return nil, grpcerr.Status(grpcerr.Invalid("room", "must be empty with all"))
	case !req.GetAll() && len(req.GetPlatforms()) > 0:
		return nil, grpcerr.Status(grpcerr.Invalid("platforms", "only with all"))
	case len(req.GetMsgs()) == 0:
		return nil, grpcerr.Status(grpcerr.Invalid("msgs", "must not be empty"))
	}
	if !req.GetAll() {
		if err := room.Check(req.GetRoom()); err != nil {
			return nil, grpcerr.Status(grpcerr.Invalid("room", "%v", err))
		}
	}
	n, err := s.b.Broadcast(ctx, req.GetTaskSeq(), req.GetRoom(), req.GetAll(), req.GetPlatforms(), req.GetMsgs())
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return &boatpb.BroadcastResponse{Members: int64(n)}, nil
}

// maxRoomOnline caps the rooms of one RoomOnline call.
const maxRoomOnline = 1000

func (s *internalServer) RoomOnline(_ context.Context, req *boatpb.RoomOnlineRequest) (*boatpb.RoomOnlineResponse, error) {
	if len(req.GetRooms()) > maxRoomOnline {
		return nil, grpcerr.Status(grpcerr.Invalid("rooms", "%d rooms, at most %d", len(req.GetRooms()), maxRoomOnline))
	}
	return &boatpb.RoomOnlineResponse{Members: s.b.RoomOnline(req.GetRooms()), Rooms: s.b.rooms.count.Load()}, nil
}

func errSessionNotFound(sid string) error {
	return grpcerr.New(codes.NotFound, errorpb.Code_SESSION_NOT_FOUND, "session %s is not held by this boat", sid)
}

// sessionErr maps a session failure to its coded error.
func sessionErr(sid string, err error) error {
	switch {
	case errors.Is(err, ErrSessionGone):
		return errSessionNotFound(sid)
	case errors.Is(err, ErrAckTimeout):
		return grpcerr.New(codes.DeadlineExceeded, errorpb.Code_ACK_TIMEOUT, "session %s: %v", sid, err)
	case errors.Is(err, ErrNotReady):
		return grpcerr.New(codes.FailedPrecondition, errorpb.Code_SESSION_NOT_READY, "session %s: %v", sid, err)
	case errors.Is(err, ErrSlowConsumer):
		return grpcerr.New(codes.ResourceExhausted, errorpb.Code_SLOW_CONSUMER, "session %s: %v", sid, err)
	}
	return err
}
