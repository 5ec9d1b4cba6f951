package boat

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/room"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// errRoomsClosed refuses a join on a session that has left every room for
// good (it ended or was kicked).
var errRoomsClosed = errors.New("session ended")

// rooms is the boat's room memberships, goim style: rooms sharded by the
// hash of their name, each room holding its members under its own lock, so
// joins, leaves and broadcasts of different rooms share no lock. A room
// exists while it has members; its batcher (see batcher.go) sends its
// broadcasts.
type rooms struct {
	shards [64]struct {
		mu sync.Mutex
		m  map[string]*roomState
	}
	count    atomic.Int64 // rooms with members
	maxRooms int

	gauge   prometheus.Gauge // rooms with members
	members prometheus.Gauge // memberships
	// newBatcher makes the batcher of a room created by a join.
	newBatcher func(name string, r *roomState) *batcher
}

// roomState is one room: its members and the batcher of its broadcasts.
type roomState struct {
	name  string
	batch *batcher

	mu      sync.Mutex
	members map[*session]struct{}
}

func (rs *rooms) init() {
	for i := range rs.shards {
		rs.shards[i].m = make(map[string]*roomState)
	}
}

func (rs *rooms) shard(name string) int { return shardOf(name, len(rs.shards)) }

// get returns the room, or nil when it has no member.
func (rs *rooms) get(name string) *roomState {
	sh := &rs.shards[rs.shard(name)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.m[name]
}

// add makes s a member of name, creating the room unless the boat holds
// --max-rooms rooms already. Called with s.roomsMu held.
func (rs *rooms) add(name string, s *session) error {
	sh := &rs.shards[rs.shard(name)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.m[name]
	if r == nil {
		if rs.count.Add(1) > int64(rs.maxRooms) {
			rs.count.Add(-1)
			return grpcerr.Limited("--max-rooms", "this server holds %d rooms, the most it may; join another time", rs.maxRooms)
		}
		r = &roomState{name: name, members: make(map[*session]struct{})}
		r.batch = rs.newBatcher(name, r)
		sh.m[name] = r
		rs.gauge.Inc()
	}
	r.mu.Lock()
	r.members[s] = struct{}{}
	r.mu.Unlock()
	rs.members.Inc()
	return nil
}

// remove takes s out of name, deleting the room once it has no member.
// Called with s.roomsMu held.
func (rs *rooms) remove(name string, s *session) {
	sh := &rs.shards[rs.shard(name)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r := sh.m[name]
	if r == nil {
		return
	}
	r.mu.Lock()
	_, ok := r.members[s]
	delete(r.members, s)
	empty := len(r.members) == 0
	r.mu.Unlock()
	if ok {
		rs.members.Dec()
	}
	if empty {
		// Messages its batcher still holds go to no one: their frames are
		// built for the members of the moment.
		delete(sh.m, name)
		rs.count.Add(-1)
		rs.gauge.Dec()
	}
}

// online counts the members of name.
func (rs *rooms) online(name string) int {
	r := rs.get(name)
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.members)
}

// snapshot is the room's members of the moment.
func (r *roomState) snapshot() []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*session, 0, len(r.members))
	for s := range r.members {
		out = append(out, s)
	}
	return out
}

// joinRoom makes s a member of name, as its token allows and within the
// limits; a session in the room already stays in it (OK).
func (b *Boat) joinRoom(s *session, name string) error {
	if !room.Allowed(s.roomPatterns, name) {
		return status.Errorf(codes.PermissionDenied, "the session's token does not allow room %q", name)
	}
	s.roomsMu.Lock()
	defer s.roomsMu.Unlock()
	if s.roomsClosed {
		return errRoomsClosed
	}
	if _, ok := s.rooms[name]; ok {
		return nil
	}
	if len(s.rooms) >= b.cfg.MaxRoomsPerSession {
		return grpcerr.Limited("--max-rooms-per-session", "the session is in %d rooms, the most it may; leave one first", len(s.rooms))
	}
	if err := b.rooms.add(name, s); err != nil {
		return err
	}
	if s.rooms == nil {
		s.rooms = make(map[string]struct{})
	}
	s.rooms[name] = struct{}{}
	return nil
}

// leaveRoom takes s out of name; leaving a room it is not in is OK.
func (b *Boat) leaveRoom(s *session, name string) {
	s.roomsMu.Lock()
	defer s.roomsMu.Unlock()
	if _, ok := s.rooms[name]; !ok {
		return
	}
	delete(s.rooms, name)
	b.rooms.remove(name, s)
}

// leaveRooms takes s out of every room for good: a session that ended or
// was kicked joins none again.
func (b *Boat) leaveRooms(s *session) {
	s.roomsMu.Lock()
	defer s.roomsMu.Unlock()
	s.roomsClosed = true
	for name := range s.rooms {
		b.rooms.remove(name, s)
	}
	s.rooms = nil
}

// roomRequest answers a JoinRoom or LeaveRoom on the session's stream, in
// the order they came, with the request's id; refused (the session's
// request rate) answers it without doing anything.
// A name that is not one (room.Check) is refused InvalidArgument, join or
// leave alike, before anything is done; one longer than a room name may be
// is not echoed (the id names the request), so a device cannot have the
// boat queue back what it sent.
func (b *Boat) roomRequest(s *session, name string, join bool, id int64, refused error) {
	err := refused
	if len(name) > room.MaxName && err != nil {
		name = ""
	}
	if cerr := room.Check(name); err == nil && cerr != nil {
		err = grpcerr.Invalid("room", "%v", cerr)
		if len(name) > room.MaxName {
			b.countLimit("room_name_bytes")
			name = ""
		}
	}
	switch {
	case err != nil:
		if join {
			b.metrics.RoomJoins.WithLabelValues(joinResult(err)).Inc()
		}
	case join:
		err = b.joinRoom(s, name)
		if errors.Is(err, errRoomsClosed) {
			return // the session is going: no answer
		}
		b.metrics.RoomJoins.WithLabelValues(joinResult(err)).Inc()
		var e *grpcerr.Error
		if errors.As(err, &e) && e.Detail == errorpb.Code_LIMIT_EXCEEDED {
			b.countLimit(e.Field)
		}
	default:
		b.leaveRoom(s, name)
	}
	a := &msgpb.RoomAnswer{Id: id, Room: name, Join: join}
	if err != nil {
		code, msg, detail := grpcerr.Parts(err)
		a.Status, a.Message, a.Error = uint32(code), msg, detail
	}
	if err := s.enqueue(outgoing{payload: &msgpb.ServerPayload{Body: &msgpb.ServerPayload_RoomAnswer{RoomAnswer: a}}}); errors.Is(err, ErrSlowConsumer) {
		s.kick(msgpb.KickoutReason_SLOW_CONSUMER)
	}
}

func joinResult(err error) string {
	switch status.Code(grpcerr.Status(err)) {
	case codes.OK:
		return "ok"
	case codes.InvalidArgument:
		return "invalid"
	case codes.PermissionDenied:
		return "denied"
	case codes.ResourceExhausted:
		return "limited"
	}
	return "error"
}
