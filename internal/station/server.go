package station

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/pb/presencepb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// pushServer adapts pushpb.Push (gRPC and HTTP/JSON) to the station.
type pushServer struct {
	pushpb.UnimplementedPushServer
	s *Station
}

func (p *pushServer) Push(ctx context.Context, req *pushpb.PushRequest) (*pushpb.PushResponse, error) {
	seqs, err := p.s.Push(ctx, req)
	err = grpcerr.Status(err)
	p.s.metrics.PushRequests.WithLabelValues(status.Code(err).String()).Inc()
	if err != nil {
		return nil, err
	}
	return &pushpb.PushResponse{Seqs: seqs}, nil
}

func (p *pushServer) BroadcastRoom(ctx context.Context, req *pushpb.BroadcastRoomRequest) (*pushpb.BroadcastResponse, error) {
	seqs, err := p.s.BroadcastRoom(ctx, req)
	return p.broadcastAnswer(seqs, err)
}

func (p *pushServer) BroadcastAll(ctx context.Context, req *pushpb.BroadcastAllRequest) (*pushpb.BroadcastResponse, error) {
	seqs, err := p.s.BroadcastAll(ctx, req)
	return p.broadcastAnswer(seqs, err)
}

// broadcastAnswer counts a broadcast in PushRequests, as Push is counted.
func (p *pushServer) broadcastAnswer(seqs []int64, err error) (*pushpb.BroadcastResponse, error) {
	err = grpcerr.Status(err)
	p.s.metrics.PushRequests.WithLabelValues(status.Code(err).String()).Inc()
	if err != nil {
		return nil, err
	}
	return &pushpb.BroadcastResponse{Seqs: seqs}, nil
}

func (p *pushServer) RoomOnline(ctx context.Context, req *pushpb.RoomOnlineRequest) (*pushpb.RoomOnlineResponse, error) {
	resp, err := p.s.RoomOnline(ctx, req.GetRoom())
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return resp, nil
}

func (p *pushServer) Kickout(ctx context.Context, req *pushpb.KickoutRequest) (*pushpb.KickoutResponse, error) {
	sids, err := p.s.Kickout(ctx, req)
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return &pushpb.KickoutResponse{Sids: sids}, nil
}

func (p *pushServer) Online(ctx context.Context, req *pushpb.OnlineRequest) (*pushpb.OnlineResponse, error) {
	users, err := p.s.Online(ctx, req.GetUids())
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return &pushpb.OnlineResponse{Users: users}, nil
}

// internalServer adapts stationpb.Station (called by boats).
type internalServer struct {
	stationpb.UnimplementedStationServer
	s *Station
}

func (i *internalServer) Connect(ctx context.Context, req *stationpb.ConnectRequest) (*stationpb.ConnectResponse, error) {
	connect := i.s.Connect
	if req.GetPullOffline() {
		connect = i.s.ConnectPull
	}
	id, err := connect(ctx, req.GetToken(), req.GetBoatId(), req.GetSid())
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return &stationpb.ConnectResponse{Uid: id.UID, Platform: id.Platform, Rooms: id.Rooms}, nil
}

func (i *internalServer) Disconnect(ctx context.Context, req *stationpb.DisconnectRequest) (*stationpb.DisconnectResponse, error) {
	refs := make([]session.Ref, len(req.GetSessions()))
	reasons := make([]presencepb.Reason, len(req.GetSessions()))
	for j, r := range req.GetSessions() {
		refs[j] = session.Ref{UID: r.GetUid(), Sid: r.GetSid(), BoatID: req.GetBoatId()}
		reasons[j] = r.GetReason()
	}
	if err := i.s.Disconnect(ctx, refs, reasons); err != nil {
		return nil, grpcerr.Status(err)
	}
	return &stationpb.DisconnectResponse{}, nil
}

func (p *pushServer) RegisterDevice(ctx context.Context, req *pushpb.RegisterDeviceRequest) (*pushpb.RegisterDeviceResponse, error) {
	if err := p.s.RegisterDevice(ctx, req.GetDevice()); err != nil {
		return nil, grpcerr.Status(err)
	}
	return &pushpb.RegisterDeviceResponse{}, nil
}

func (p *pushServer) UnregisterDevice(ctx context.Context, req *pushpb.UnregisterDeviceRequest) (*pushpb.UnregisterDeviceResponse, error) {
	removed, err := p.s.UnregisterDevice(ctx, req.GetDevice())
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return &pushpb.UnregisterDeviceResponse{Removed: removed}, nil
}

func (p *pushServer) ListDevices(ctx context.Context, req *pushpb.ListDevicesRequest) (*pushpb.ListDevicesResponse, error) {
	devices, err := p.s.ListDevices(ctx, req.GetUid())
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return &pushpb.ListDevicesResponse{Devices: devices}, nil
}

func (i *internalServer) Resume(ctx context.Context, req *stationpb.ResumeRequest) (*stationpb.ResumeResponse, error) {
	if err := i.s.Resume(ctx, req.GetBoatId(), req.GetSessions()); err != nil {
		return nil, grpcerr.Status(err)
	}
	return &stationpb.ResumeResponse{}, nil
}

func (i *internalServer) ResetBoat(ctx context.Context, req *stationpb.ResetBoatRequest) (*stationpb.ResetBoatResponse, error) {
	n, err := i.s.ResetBoat(ctx, req.GetBoatId(), req.GetDraining())
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return &stationpb.ResetBoatResponse{Removed: int32(n)}, nil
}

func (i *internalServer) BoatSessions(ctx context.Context, req *stationpb.BoatSessionsRequest) (*stationpb.BoatSessionsResponse, error) {
	if req.GetBoatId() == "" {
		return nil, grpcerr.Status(grpcerr.Invalid("boat_id", "must be set"))
	}
	refs, next, err := i.s.sessions.ScanBoat(ctx, req.GetBoatId(), req.GetCursor())
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	resp := &stationpb.BoatSessionsResponse{Cursor: next, Sessions: make([]*stationpb.SessionRef, len(refs))}
	for j, r := range refs {
		resp.Sessions[j] = &stationpb.SessionRef{Uid: r.UID, Sid: r.Sid}
	}
	return resp, nil
}

func (i *internalServer) RegisterSessionDevice(ctx context.Context, req *stationpb.RegisterSessionDeviceRequest) (*stationpb.RegisterSessionDeviceResponse, error) {
	provider, added, err := i.s.RegisterSessionDevice(ctx, req.GetBoatId(), req.GetUid(), req.GetSid(), req.GetProvider(), req.GetToken())
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return &stationpb.RegisterSessionDeviceResponse{Provider: provider, Added: added}, nil
}

func (i *internalServer) PullOffline(ctx context.Context, req *stationpb.PullOfflineRequest) (*stationpb.PullOfflineResponse, error) {
	msgs, more, err := i.s.PullOffline(ctx, req.GetBoatId(), req.GetUid(), req.GetSid(), req.GetAck(), int(req.GetLimit()))
	err = grpcerr.Status(err)
	i.s.metrics.Pulls.WithLabelValues(pullResult(err)).Inc()
	if err != nil {
		return nil, err
	}
	return &stationpb.PullOfflineResponse{Msgs: msgs, More: more}, nil
}

// pullResult is the label of a PullOffline answer in gomsg_station_pulls_total.
func pullResult(err error) string {
	switch status.Code(err) {
	case codes.OK:
		return "ok"
	case codes.InvalidArgument:
		return "invalid"
	case codes.PermissionDenied:
		return "denied"
	case codes.Unavailable:
		return "unavailable"
	case codes.Canceled, codes.DeadlineExceeded:
		return "canceled"
	}
	return "error"
}
