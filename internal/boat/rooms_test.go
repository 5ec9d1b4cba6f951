package boat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// roomClient opens a session of uid on platform whose token allows the
// room patterns (comma-separated; "": none).
func (tb *testBoat) roomClient(t *testing.T, uid, platform, patterns string, opts ...grpc.DialOption) *client {
	t.Helper()
	token := uid + "/" + platform
	if patterns != "" {
		token += "#" + patterns
	}
	c, err := openToken(t, tb.ClientAddr(), token, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", token, err)
	}
	return c
}

// room sends a JoinRoom (join) or LeaveRoom and returns its answer.
func (c *client) room(t *testing.T, name string, join bool) *msgpb.RoomAnswer {
	t.Helper()
	c.sendRoom(t, name, join)
	p := c.recvUntil(t, func(p *msgpb.ServerPayload) bool {
		if p.GetRoomMessages() != nil {
			t.Errorf("room messages while waiting for the answer of %q: %v", name, p)
		}
		return p.GetRoomAnswer() != nil
	})
	a := p.GetRoomAnswer()
	if a.GetRoom() != name || a.GetJoin() != join {
		t.Fatalf("answer %v, want one for room %q join=%v", a, name, join)
	}
	return a
}

func (c *client) sendRoom(t *testing.T, name string, join bool) {
	t.Helper()
	p := &msgpb.ClientPayload{Body: &msgpb.ClientPayload_LeaveRoom{LeaveRoom: &msgpb.LeaveRoom{Room: name}}}
	if join {
		p = &msgpb.ClientPayload{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Room: name}}}
	}
	if err := c.stream.Send(p); err != nil {
		t.Fatalf("send room request: %v", err)
	}
}

func (c *client) join(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if a := c.room(t, n, true); a.GetStatus() != 0 {
			t.Fatalf("join %q: %v", n, a)
		}
	}
}

// frames reads RoomMessages of room until n messages came and returns
// their seqs and the size of each frame.
func (c *client) frames(t *testing.T, roomName string, n int) (seqs []int64, sizes []int) {
	t.Helper()
	c.recvUntil(t, func(p *msgpb.ServerPayload) bool {
		rm := p.GetRoomMessages()
		if rm == nil {
			return false
		}
		if rm.GetRoom() != roomName {
			t.Errorf("frame of room %q, want %q", rm.GetRoom(), roomName)
		}
		sizes = append(sizes, len(rm.GetMsgs()))
		for _, m := range rm.GetMsgs() {
			seqs = append(seqs, m.GetSeq())
		}
		return len(seqs) >= n
	})
	return seqs, sizes
}

// noRoomMessages pings the session and fails if any RoomMessages came
// before the pong: everything queued for it before the ping was sent first.
func (c *client) noRoomMessages(t *testing.T) {
	t.Helper()
	id := time.Now().UnixNano()
	if err := c.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ping{Ping: &msgpb.Ping{Id: id}}}); err != nil {
		t.Fatalf("ping: %v", err)
	}
	c.recvUntil(t, func(p *msgpb.ServerPayload) bool {
		if p.GetRoomMessages() != nil {
			t.Errorf("a session that should get nothing got %v", p.GetRoomMessages())
		}
		return p.GetPong().GetId() == id
	})
}

// broadcast sends one Broadcast call of messages with seqs from..to to room.
func (tb *testBoat) broadcast(t *testing.T, roomName string, from, to int64) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var msgs []*msgpb.Message
	for seq := from; seq <= to; seq++ {
		msgs = append(msgs, &msgpb.Message{Seq: seq, Body: textBody(fmt.Sprint(seq))})
	}
	resp, err := tb.unary.Broadcast(ctx, &boatpb.BroadcastRequest{Room: roomName, Msgs: msgs})
	if err != nil {
		t.Fatalf("broadcast to %q: %v", roomName, err)
	}
	return resp.GetMembers()
}

func (tb *testBoat) online(t *testing.T, names ...string) []int64 {
	t.Helper()
	resp, err := tb.unary.RoomOnline(context.Background(), &boatpb.RoomOnlineRequest{Rooms: names})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetMembers()
}

// roomGauges are the boat's rooms and memberships gauges.
func (tb *testBoat) roomGauges() (rooms, members int) {
	return int(promtest.ToFloat64(tb.metrics.BoatRooms.WithLabelValues(tb.cfg.ID))),
		int(promtest.ToFloat64(tb.metrics.BoatRoomMembers.WithLabelValues(tb.cfg.ID)))
}

// waitGauges waits until the gauges read rooms and members.
func (tb *testBoat) waitGauges(t *testing.T, rooms, members int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if r, m := tb.roomGauges(); r != rooms || m != members {
			return testutil.Errorf("gauges: %d rooms, %d members; want %d, %d", r, m, rooms, members)
		}
		return nil
	})
}

func wantInOrder(t *testing.T, who string, seqs []int64, n int) {
	t.Helper()
	if len(seqs) != n {
		t.Fatalf("%s got %d messages, want %d: %v", who, len(seqs), n, seqs)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("%s got %v, want 1..%d in order, once each", who, seqs, n)
		}
	}
}

// TestRoomBroadcast: members get every message of the room once, in the
// order of the Broadcast calls, several in one frame when they come in a
// burst; a session that may join but did not gets none, nor does a member
// of another room.
func TestRoomBroadcast(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.RoomBatch = 8; c.RoomBatchWindow = 100 * time.Millisecond })
	var members []*client
	for i := range 3 {
		c := tb.roomClient(t, fmt.Sprint("m", i), "ios", "lobby,other")
		c.join(t, "lobby")
		members = append(members, c)
	}
	outsider := tb.roomClient(t, "x", "ios", "lobby,other")
	elsewhere := tb.roomClient(t, "y", "ios", "other")
	elsewhere.join(t, "other")
	tb.waitGauges(t, 2, 4)
	if got := tb.online(t, "lobby", "other", "none"); fmt.Sprint(got) != "[3 1 0]" {
		t.Fatalf("RoomOnline = %v, want [3 1 0]", got)
	}

	const n = 40
	for seq := int64(1); seq <= n; seq += 2 {
		if m := tb.broadcast(t, "lobby", seq, seq+1); m != 3 {
			t.Fatalf("Broadcast answered %d members, want 3", m)
		}
	}
	for i, c := range members {
		seqs, sizes := c.frames(t, "lobby", n)
		wantInOrder(t, fmt.Sprint("member ", i), seqs, n)
		batched := false
		for _, s := range sizes {
			if s > 8 {
				t.Fatalf("frame of %d messages, --room-batch is 8", s)
			}
			batched = batched || s > 2 // more than one call's messages
		}
		if !batched {
			t.Errorf("member %d: frames of %v messages: no batching across calls", i, sizes)
		}
	}
	outsider.noRoomMessages(t)
	elsewhere.noRoomMessages(t)
	if got := promtest.ToFloat64(tb.metrics.BroadcastSent); got != 3*n {
		t.Errorf("BroadcastSent = %v, want %d", got, 3*n)
	}
	// One call of 20: frames of --room-batch, the rest after the window.
	tb.broadcast(t, "lobby", n+1, n+20)
	for i, c := range members {
		seqs, sizes := c.frames(t, "lobby", 20)
		if fmt.Sprint(sizes) != "[8 8 4]" || seqs[0] != n+1 || seqs[19] != n+20 {
			t.Errorf("member %d: frames of %v messages (seqs %v), want [8 8 4] of %d..%d", i, sizes, seqs, n+1, n+20)
		}
	}
}

// TestRoomOrder: calls of many messages each, sent one frame of two at a
// time with no window, reach every member in the order of the calls.
func TestRoomOrder(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.RoomBatch = 2; c.RoomBatchWindow = NoBatchWindow; c.SendQueue = 4096 })
	var members []*client
	for i := range 3 {
		c := tb.roomClient(t, fmt.Sprint("m", i), "ios", "r")
		c.join(t, "r")
		members = append(members, c)
	}
	const calls, per = 50, 20
	for i := range int64(calls) {
		tb.broadcast(t, "r", i*per+1, (i+1)*per)
	}
	for i, c := range members {
		seqs, _ := c.frames(t, "r", calls*per)
		wantInOrder(t, fmt.Sprint("member ", i), seqs, calls*per)
	}
}

// TestRoomLeaveEndsDelivery: a member that leaves, disconnects or is kicked
// gets nothing more and leaves the room; once all are gone the room is
// deleted (gauges back to 0). Leaving a room one is not in is OK.
func TestRoomLeaveEndsDelivery(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.RoomBatchWindow = NoBatchWindow })
	leaver := tb.roomClient(t, "l", "ios", "r*")
	gone := tb.roomClient(t, "g", "ios", "r*")
	kicked := tb.roomClient(t, "k", "ios", "r*")
	stays := tb.roomClient(t, "s", "ios", "r*")
	for _, c := range []*client{leaver, gone, kicked, stays} {
		c.join(t, "r1", "r2")
	}
	tb.waitGauges(t, 2, 8)

	if a := leaver.room(t, "r1", false); a.GetStatus() != 0 {
		t.Fatalf("leave: %v", a)
	}
	if a := leaver.room(t, "r1", false); a.GetStatus() != 0 {
		t.Fatalf("leave a room not in: %v", a)
	}
	gone.cancel()
	if err := tb.Kickout(context.Background(), kicked.sid, msgpb.KickoutReason_BY_REQUEST); err != nil {
		t.Fatal(err)
	}
	tb.waitGauges(t, 2, 3) // stays in r1, r2; leaver in r2
	if got := tb.online(t, "r1", "r2"); fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("RoomOnline = %v, want [1 2]", got)
	}
	if m := tb.broadcast(t, "r1", 1, 1); m != 1 {
		t.Fatalf("Broadcast answered %d members, want 1", m)
	}
	seqs, _ := stays.frames(t, "r1", 1)
	wantInOrder(t, "the member that stayed", seqs, 1)
	leaver.noRoomMessages(t)

	leaver.cancel()
	stays.cancel()
	tb.waitGauges(t, 0, 0)
	if got := tb.online(t, "r1", "r2"); fmt.Sprint(got) != "[0 0]" {
		t.Fatalf("RoomOnline = %v, want [0 0]", got)
	}
}

// TestRoomsLeftOnDrain: a boat that drains takes its sessions out of every
// room.
func TestRoomsLeftOnDrain(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	for i := range 3 {
		tb.roomClient(t, fmt.Sprint("u", i), "ios", "*").join(t, "a", fmt.Sprint("b", i))
	}
	tb.waitGauges(t, 4, 6)
	tb.cancel()
	if err := <-tb.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	tb.done <- nil // for the cleanup
	if r, m := tb.roomGauges(); r != 0 || m != 0 {
		t.Fatalf("after drain: %d rooms, %d members; want 0, 0", r, m)
	}
}

// A draining boat asks station to clear its sessions at once — after it
// has kicked them, not waiting for each stream to end and be reported —
// and the reset it sends at start is not one of a drain.
func TestDrainClearsSessionsAtOnce(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	c := tb.connect(t, "u1")
	tb.cancel()
	if err := <-tb.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	tb.done <- nil // for the cleanup
	k := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetKickout() != nil }).GetKickout()
	if k.GetReason() != msgpb.KickoutReason_SERVER_DRAINING {
		t.Fatalf("kickout %v, want SERVER_DRAINING", k)
	}
	tb.station.mu.Lock()
	defer tb.station.mu.Unlock()
	var got []string
	for _, r := range tb.station.resets {
		got = append(got, fmt.Sprintf("%s draining=%v", r.GetBoatId(), r.GetDraining()))
	}
	if want := []string{"b1 draining=false", "b1 draining=true"}; !slices.Equal(got, want) {
		t.Fatalf("ResetBoat calls %v, want %v", got, want)
	}
}

// TestJoinRefused: a room the token does not allow, a bad name, one room
// over --max-rooms-per-session or --max-rooms are refused with their codes,
// and change nothing; joining a room again is OK.
func TestJoinRefused(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.MaxRoomsPerSession = 2; c.MaxRooms = 3 })
	c := tb.roomClient(t, "u", "ios", "match-*,lobby")
	c.join(t, "lobby", "match-1")
	c.join(t, "lobby") // again: OK
	for _, tc := range []struct {
		room   string
		code   codes.Code
		detail errorpb.Code
		field  string
	}{
		{"secret", codes.PermissionDenied, errorpb.Code_CODE_UNSPECIFIED, ""},
		{"match", codes.PermissionDenied, errorpb.Code_CODE_UNSPECIFIED, ""},
		{"bad name", codes.InvalidArgument, errorpb.Code_INVALID_REQUEST, "room"},
		{"", codes.InvalidArgument, errorpb.Code_INVALID_REQUEST, "room"},
		{"match-2", codes.ResourceExhausted, errorpb.Code_LIMIT_EXCEEDED, "--max-rooms-per-session"},
	} {
		a := c.room(t, tc.room, true)
		if codes.Code(a.GetStatus()) != tc.code || a.GetError().GetCode() != tc.detail || a.GetError().GetField() != tc.field {
			t.Errorf("join %q: %v, want %s with %s field %q", tc.room, a, tc.code, tc.detail, tc.field)
		}
	}
	tb.waitGauges(t, 2, 2)
	if got := tb.online(t, "lobby", "match-1", "secret", "match-2"); fmt.Sprint(got) != "[1 1 0 0]" {
		t.Fatalf("RoomOnline = %v, want [1 1 0 0]", got)
	}
	// --max-rooms: the boat holds 2 rooms; a third is made, a fourth is not,
	// joining one that exists still is.
	d := tb.roomClient(t, "d", "ios", "*")
	d.join(t, "third")
	if a := d.room(t, "fourth", true); codes.Code(a.GetStatus()) != codes.ResourceExhausted || a.GetError().GetField() != "--max-rooms" {
		t.Fatalf("join over --max-rooms: %v", a)
	}
	if a := d.room(t, "fourth", false); a.GetStatus() != 0 {
		t.Fatalf("leave: %v", a)
	}
	if a := c.room(t, "lobby", false); a.GetStatus() != 0 {
		t.Fatalf("leave: %v", a)
	}
	d.join(t, "lobby") // c's leave deleted it: the third room again
	tb.waitGauges(t, 3, 3)
	for result, want := range map[string]float64{"ok": 5, "denied": 2, "invalid": 2, "limited": 2} {
		if got := promtest.ToFloat64(tb.metrics.RoomJoins.WithLabelValues(result)); got != want {
			t.Errorf("RoomJoins{%s} = %v, want %v", result, got, want)
		}
	}
}

// TestBroadcastAll: a broadcast to all reaches every session held, or only
// those of the platforms asked; one frame may mix both.
func TestBroadcastAll(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.RoomBatchWindow = 200 * time.Millisecond })
	ios := tb.roomClient(t, "a", "ios", "")
	web := tb.roomClient(t, "b", "web", "")
	android := tb.roomClient(t, "c", "android", "")
	ctx := context.Background()
	msg := func(seq int64) []*msgpb.Message { return []*msgpb.Message{{Seq: seq, Body: textBody("all")}} }
	resp, err := tb.unary.Broadcast(ctx, &boatpb.BroadcastRequest{All: true, Platforms: []string{"ios", "web"}, Msgs: msg(1)})
	if err != nil || resp.GetMembers() != 2 {
		t.Fatalf("Broadcast all of ios, web: %v, %v; want 2 members", resp, err)
	}
	resp, err = tb.unary.Broadcast(ctx, &boatpb.BroadcastRequest{All: true, Msgs: msg(2)})
	if err != nil || resp.GetMembers() != 3 {
		t.Fatalf("Broadcast all: %v, %v; want 3 members", resp, err)
	}
	for name, c := range map[string]*client{"ios": ios, "web": web} {
		seqs, _ := c.frames(t, "", 2)
		wantInOrder(t, name, seqs, 2)
	}
	seqs, _ := android.frames(t, "", 1)
	if fmt.Sprint(seqs) != "[2]" {
		t.Fatalf("android got %v, want [2] only", seqs)
	}
}

// TestBroadcastSlowMember: a member that does not read is kicked as a slow
// consumer (and its messages counted dropped); the others get everything.
func TestBroadcastSlowMember(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) {
		c.SendQueue = 4
		c.RoomBatch = 1
		c.RoomBatchWindow = NoBatchWindow
		c.WriteTimeout = time.Minute // the queue, not the write timeout, kicks it
	})
	slow := tb.roomClient(t, "lagger", "ios", "big", smallWindow...)
	slow.join(t, "big")
	var readers []*client
	for i := range 2 {
		c := tb.roomClient(t, fmt.Sprint("r", i), "ios", "big")
		c.join(t, "big")
		readers = append(readers, c)
	}
	const n = 200
	body := textBody(strings.Repeat("x", 16<<10))
	got := make([][]int64, len(readers))
	var wg sync.WaitGroup
	for i, c := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(got[i]) < n {
				p, err := c.stream.Recv()
				if err != nil {
					t.Errorf("reader %d: %v", i, err)
					return
				}
				if k := p.GetKickout(); k != nil {
					t.Errorf("reader %d kicked: %s", i, k.GetReason())
				}
				for _, m := range p.GetRoomMessages().GetMsgs() {
					got[i] = append(got[i], m.GetSeq())
				}
			}
		}()
	}
	for seq := int64(1); seq <= n; seq++ {
		// Each reader's sender keeps up with one message per call.
		testutil.WaitFor(t, 10*time.Second, func() error {
			if r := tb.rooms.get("big"); r != nil {
				r.batch.mu.Lock()
				queued := len(r.batch.q)
				r.batch.mu.Unlock()
				if queued > 0 {
					return testutil.Errorf("%d messages on the room's batcher", queued)
				}
			}
			for _, r := range tb.heldSessions() {
				if q := r.queuedPayloads(); r.uid != "lagger" && q > 1 {
					return testutil.Errorf("reader %s has %d queued", r.uid, q)
				}
			}
			return nil
		})
		if _, err := tb.unary.Broadcast(context.Background(), &boatpb.BroadcastRequest{Room: "big",
			Msgs: []*msgpb.Message{{Seq: seq, Body: body}}}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i := range readers {
		wantInOrder(t, fmt.Sprint("reader ", i), got[i], n)
	}
	// Its stream ended while it did not read: the kickout notice may not
	// have reached it.
	testutil.WaitFor(t, 10*time.Second, func() error {
		if got := promtest.ToFloat64(tb.metrics.Kickouts.WithLabelValues("SLOW_CONSUMER")); got != 1 {
			return testutil.Errorf("%v sessions kicked as slow consumers, want 1", got)
		}
		return nil
	})
	if tb.sessions.get(slow.sid) != nil {
		t.Error("the slow member is still held")
	}
	if got := promtest.ToFloat64(tb.metrics.BroadcastDropped.WithLabelValues("slow_consumer")); got < 1 {
		t.Errorf("BroadcastDropped{slow_consumer} = %v, want at least 1", got)
	}
	tb.waitGauges(t, 1, 2)
}

// TestBroadcastInvalid: bad requests are refused, naming the field.
func TestBroadcastInvalid(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	msgs := []*msgpb.Message{{Seq: 1}}
	for _, tc := range []struct {
		req   *boatpb.BroadcastRequest
		field string
	}{
		{&boatpb.BroadcastRequest{Msgs: msgs}, "room"},
		{&boatpb.BroadcastRequest{Room: "a b", Msgs: msgs}, "room"},
		{&boatpb.BroadcastRequest{Room: "a*", Msgs: msgs}, "room"},
		{&boatpb.BroadcastRequest{Room: "a", All: true, Msgs: msgs}, "room"},
		{&boatpb.BroadcastRequest{Room: "a"}, "msgs"},
		{&boatpb.BroadcastRequest{All: true}, "msgs"},
		{&boatpb.BroadcastRequest{Room: "a", Platforms: []string{"ios"}, Msgs: msgs}, "platforms"},
	} {
		_, err := tb.unary.Broadcast(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || grpcerr.DetailCode(err) != errorpb.Code_INVALID_REQUEST {
			t.Errorf("%v: %v, want InvalidArgument", tc.req, err)
			continue
		}
		if _, _, d := grpcerr.Parts(err); d.GetField() != tc.field {
			t.Errorf("%v: field %q, want %q", tc.req, d.GetField(), tc.field)
		}
	}
}

// TestBroadcastOverflow: while a room's batcher holds --room-queue
// messages, Broadcast waits for space until its context ends, then refuses
// with LIMIT_EXCEEDED naming --room-queue; nothing of the refused call is
// sent, and what was queued is.
func TestBroadcastOverflow(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.RoomBatch = 8; c.RoomQueue = 8; c.RoomBatchWindow = time.Minute })
	c := tb.roomClient(t, "u", "ios", "r")
	c.join(t, "r")
	tb.broadcast(t, "r", 1, 7) // held: the window is a minute
	// The boat answers overflowMargin before the deadline: enough for a
	// busy machine (a shorter call's margin is a quarter of it).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := tb.unary.Broadcast(ctx, &boatpb.BroadcastRequest{Room: "r",
		Msgs: []*msgpb.Message{{Seq: 100}, {Seq: 101}}})
	if status.Code(err) != codes.ResourceExhausted || grpcerr.DetailCode(err) != errorpb.Code_LIMIT_EXCEEDED {
		t.Fatalf("Broadcast into a full queue: %v, want ResourceExhausted LIMIT_EXCEEDED", err)
	}
	if got := promtest.ToFloat64(tb.metrics.BroadcastDropped.WithLabelValues("overflow")); got != 2 {
		t.Errorf("BroadcastDropped{overflow} = %v, want 2", got)
	}
	tb.broadcast(t, "r", 8, 8) // a frame's worth: sent at once
	seqs, sizes := c.frames(t, "r", 8)
	wantInOrder(t, "member", seqs, 8)
	if fmt.Sprint(sizes) != "[8]" {
		t.Errorf("frames %v, want one of 8", sizes)
	}
	c.noRoomMessages(t)
}

// TestRoomsConcurrent: sessions join and leave while broadcasts go on; each
// gets the room's messages in order, and everything is cleaned up.
func TestRoomsConcurrent(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.RoomBatchWindow = time.Millisecond; c.SendQueue = 1024 })
	const clients, rounds = 8, 20
	stop := make(chan struct{})
	var sent atomic.Int64
	var bg sync.WaitGroup
	bg.Add(1)
	go func() { // broadcasts to room "c", seqs 1, 2, 3…
		defer bg.Done()
		for seq := int64(1); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := tb.unary.Broadcast(context.Background(), &boatpb.BroadcastRequest{Room: "c",
				Msgs: []*msgpb.Message{{Seq: seq}}}); err != nil {
				t.Error(err)
				return
			}
			sent.Store(seq)
		}
	}()
	var wg sync.WaitGroup
	for i := range clients {
		c := tb.roomClient(t, fmt.Sprint("u", i), "ios", "*")
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := int64(0)
			answers := 0
			for r := range rounds {
				join := r%2 == 0
				p := &msgpb.ClientPayload{Body: &msgpb.ClientPayload_LeaveRoom{LeaveRoom: &msgpb.LeaveRoom{Room: "c"}}}
				if join {
					p = &msgpb.ClientPayload{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Room: "c"}}}
				}
				if err := c.stream.Send(p); err != nil {
					t.Error(err)
					return
				}
				// Read until the answer, checking the order of what came.
				for answers <= r {
					p, err := c.stream.Recv()
					if err != nil {
						t.Error(err)
						return
					}
					if a := p.GetRoomAnswer(); a != nil {
						if a.GetStatus() != 0 || a.GetJoin() != join {
							t.Errorf("answer %v, want OK join=%v", a, join)
						}
						answers++
					}
					for _, m := range p.GetRoomMessages().GetMsgs() {
						if m.GetSeq() <= last {
							t.Errorf("seq %d after %d", m.GetSeq(), last)
						}
						last = m.GetSeq()
					}
				}
				// Let some broadcasts through (as a member or not).
				deadline := time.Now().Add(10 * time.Second)
				for at := sent.Load(); sent.Load() < at+2; {
					if time.Now().After(deadline) {
						t.Error("broadcasts stalled")
						return
					}
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	tb.waitGauges(t, 0, 0)
}

// TestJoinAfterEndRefused: once a session left every room at its end (a
// JoinRoom may still be read after a kick), it joins none again, so no
// room keeps a session that is gone.
func TestJoinAfterEndRefused(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	s := newSession("s1", 1)
	s.roomPatterns = []string{"*"}
	if err := tb.joinRoom(s, "a"); err != nil {
		t.Fatal(err)
	}
	tb.waitGauges(t, 1, 1)
	tb.leaveRooms(s)
	if err := tb.joinRoom(s, "b"); !errors.Is(err, errRoomsClosed) {
		t.Fatalf("join after the end: %v, want errRoomsClosed", err)
	}
	tb.waitGauges(t, 0, 0)
}

// TestBroadcastRepeatedTaskIsDropped: a call repeating a task the room took
// recently (a carrier's retry after a timed-out call, a record handed again
// after a carrier restart) queues nothing and answers the members; task seq
// 0 is never checked; a room remembers its last 16 tasks.
func TestBroadcastRepeatedTaskIsDropped(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.RoomBatchWindow = NoBatchWindow })
	m := tb.roomClient(t, "m", "ios", "lobby")
	m.join(t, "lobby")
	call := func(task, seq int64) int64 {
		t.Helper()
		resp, err := tb.unary.Broadcast(context.Background(), &boatpb.BroadcastRequest{Room: "lobby", TaskSeq: task,
			Msgs: []*msgpb.Message{{Seq: seq, Body: textBody(fmt.Sprint(seq))}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetMembers()
	}
	var want []int64
	send := func(task, seq int64, taken bool) {
		t.Helper()
		if n := call(task, seq); n != 1 {
			t.Fatalf("task %d answered %d members, want 1", task, n)
		}
		if taken {
			want = append(want, seq)
		}
	}
	send(100, 1, true)
	send(100, 2, false) // a retry of task 100
	send(0, 3, true)
	send(0, 4, true) // no task seq: never dropped
	for task := int64(101); task <= 116; task++ {
		send(task, task, true)
	}
	send(101, 200, false) // still among the last 16
	send(100, 201, true)  // 16 tasks ago: forgotten, taken again
	seqs, _ := m.frames(t, "lobby", len(want))
	if !slices.Equal(seqs, want) {
		t.Fatalf("member got %v, want %v", seqs, want)
	}
	m.noRoomMessages(t)
	if got := promtest.ToFloat64(tb.metrics.BroadcastDropped.WithLabelValues("repeat")); got != 2 {
		t.Errorf("dropped{repeat} = %v, want 2", got)
	}
}

// TestConnectedMeansCounted: a session counts as connected — a broadcast
// to all includes it — before its Connected payload can reach the device:
// here the device has read Connected while the handler is held right after
// queuing it, and a broadcast to all sent then reaches it.
func TestConnectedMeansCounted(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	tb := startBoatWith(t, boatOpts{connected: func(string) { <-release }})
	c := tb.connect(t, "early") // has read Connected
	resp, err := tb.unary.Broadcast(context.Background(), &boatpb.BroadcastRequest{All: true,
		Msgs: []*msgpb.Message{{Seq: 1, Body: textBody("all")}}})
	free()
	if err != nil || resp.GetMembers() != 1 {
		t.Fatalf("Broadcast all after the device read Connected: %v, %v; want 1 member", resp, err)
	}
	if seqs, _ := c.frames(t, "", 1); fmt.Sprint(seqs) != "[1]" {
		t.Fatalf("got %v, want [1]", seqs)
	}
}
