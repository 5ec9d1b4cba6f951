package station

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/room"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// Broadcasts: station validates a request,
// stamps every body with a seq and publishes one mqpb.Broadcast per room
// (or one to everyone) on --broadcast-topic, keyed by the room so that a
// room's broadcasts keep their order; carrier hands each to every boat.
// Room messages are at most once: no options, never stored offline, never
// notified.

// BroadcastRoom validates a request and publishes one Broadcast task per
// room, all holding the same messages (the same seqs in every room), in one
// Publish call. It returns the seqs only after Kafka acknowledged every
// task; on any error nothing is reported as accepted.
func (s *Station) BroadcastRoom(ctx context.Context, req *pushpb.BroadcastRoomRequest) ([]int64, error) {
	if err := s.validateBroadcastRoom(req); err != nil {
		return nil, err
	}
	if err := s.allowBroadcast(); err != nil {
		return nil, err
	}
	total := 0
	for _, b := range req.GetMsgBodies() {
		total += proto.Size(b)
	}
	release, err := s.acquirePushBytes(int64(len(req.GetRooms()) * total))
	if err != nil {
		return nil, err
	}
	defer release()
	tasks := make([]*mqpb.Broadcast, len(req.GetRooms()))
	for i, r := range req.GetRooms() {
		tasks[i] = &mqpb.Broadcast{Room: r}
	}
	return s.broadcast(ctx, "room", req.GetMsgBodies(), req.GetRooms(), tasks)
}

// BroadcastAll validates a request and publishes one Broadcast task to
// every online session of the selected platforms (resolved here: empty
// platform_config selects every configured platform), keyed by
// room.AllKey. It answers as BroadcastRoom does.
func (s *Station) BroadcastAll(ctx context.Context, req *pushpb.BroadcastAllRequest) ([]int64, error) {
	if err := s.validPlatforms("platform_config", req.GetPlatformConfig()); err != nil {
		return nil, err
	}
	if _, err := s.validBodies(req.GetMsgBodies()); err != nil {
		return nil, err
	}
	if err := s.allowBroadcast(); err != nil {
		return nil, err
	}
	pc := req.GetPlatformConfig()
	platforms, _ := s.cfg.Platforms.Select(pc.GetPlatforms(), pc.GetWithoutPlatforms())
	task := &mqpb.Broadcast{All: true, Platforms: platforms}
	return s.broadcast(ctx, "all", req.GetMsgBodies(), []string{room.AllKey}, []*mqpb.Broadcast{task})
}

// validateBroadcastRoom checks everything before anything is written: 1 to
// --max-broadcast-rooms distinct, valid rooms, the bodies as Push checks
// them, and rooms × bodies within --max-push-bytes (every room gets its own
// record holding every body).
func (s *Station) validateBroadcastRoom(req *pushpb.BroadcastRoomRequest) error {
	rooms := req.GetRooms()
	if len(rooms) == 0 {
		return grpcerr.Invalid("rooms", "must name at least one room")
	}
	if len(rooms) > s.cfg.MaxBroadcastRooms {
		return grpcerr.Invalid("rooms", "%d rooms, at most %d per request (--max-broadcast-rooms)", len(rooms), s.cfg.MaxBroadcastRooms)
	}
	first := make(map[string]int, len(rooms))
	for i, r := range rooms {
		field := fmt.Sprintf("rooms[%d]", i)
		if err := room.Check(r); err != nil {
			return grpcerr.Invalid(field, "%v", err)
		}
		if j, ok := first[r]; ok {
			return grpcerr.Invalid(field, "%q is rooms[%d] again: name each room once", r, j)
		}
		first[r] = i
	}
	total, err := s.validBodies(req.GetMsgBodies())
	if err != nil {
		return err
	}
	if n := len(rooms) * total; n > s.cfg.MaxPushBytes {
		s.metrics.LimitRejections.WithLabelValues("max_push_bytes").Inc()
		return grpcerr.Limited("--max-push-bytes", "%d rooms × %d bytes of bodies make %d bytes, at most %d per broadcast",
			len(rooms), total, n, s.cfg.MaxPushBytes)
	}
	return nil
}

// allowBroadcast takes a token of --broadcast-rate, or refuses the call
// with ResourceExhausted naming the flag and the wait.
func (s *Station) allowBroadcast() error {
	res := s.broadcasts.Reserve()
	if d := res.Delay(); d > 0 {
		res.Cancel()
		s.metrics.LimitRejections.WithLabelValues("broadcast_rate").Inc()
		return grpcerr.Limited("--broadcast-rate", "more than %g broadcasts per second on this station; retry in %s",
			s.cfg.BroadcastRate, d.Round(time.Millisecond))
	}
	return nil
}

// broadcast stamps one message per body with a seq and publishes tasks[i]
// keyed by keys[i], each holding every message, on --broadcast-topic.
func (s *Station) broadcast(ctx context.Context, kind string, bodies []*anypb.Any, keys []string, tasks []*mqpb.Broadcast) ([]int64, error) {
	now := time.Now()
	seqs := make([]int64, len(bodies))
	msgs := make([]*msgpb.Message, len(bodies))
	for i, b := range bodies {
		var err error
		if seqs[i], err = s.nextID(); err != nil {
			return nil, err
		}
		msgs[i] = &msgpb.Message{Seq: seqs[i], Body: b, Timestamp: now.UnixMilli()}
	}
	payloads := make([]*mqpb.Payload, len(tasks))
	for i, t := range tasks {
		p, err := s.newPayload(now)
		if err != nil {
			return nil, err
		}
		t.Msgs = msgs
		p.Body = &mqpb.Payload_Broadcast{Broadcast: t}
		payloads[i] = p
	}
	if err := s.publishTo(ctx, s.cfg.BroadcastTopic, keys, payloads); err != nil {
		s.metrics.QueueError("publish").Inc()
		return nil, err
	}
	s.metrics.Broadcasts.WithLabelValues(kind).Add(float64(len(tasks)))
	s.metrics.MessagesAccepted.Add(float64(len(seqs)))
	return seqs, nil
}
