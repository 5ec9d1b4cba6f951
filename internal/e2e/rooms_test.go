package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const broadcastTopic = "gomsg.broadcast"

// member dials uid on the boat at addr with a token allowing allowed, joins
// rooms and waits for each answer; it returns the device and the answers'
// codes.
func (e *env) member(addr, uid, platform string, allowed []string, rooms ...string) (*device, []codes.Code) {
	e.t.Helper()
	d, err := e.tryDialAt(addr, uid, platform, true, allowed...)
	if err != nil {
		e.t.Fatal(err)
	}
	d.waitReady(e.t)
	for _, r := range rooms {
		if err := d.JoinRoom(r); err != nil {
			e.t.Fatalf("%s joins %s: %v", uid, r, err)
		}
	}
	return d, d.waitRoomAnswers(e.t, len(rooms))
}

// waitRoomAnswers waits until the device holds n room answers and returns
// their codes.
func (d *device) waitRoomAnswers(t *testing.T, n int) []codes.Code {
	t.Helper()
	var out []codes.Code
	testutil.WaitFor(t, 10*time.Second, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(d.roomAnswers) < n {
			return fmt.Errorf("%s has %d room answers, want %d", d.UID, len(d.roomAnswers), n)
		}
		out = out[:0]
		for _, a := range d.roomAnswers[:n] {
			out = append(out, codes.Code(a.GetStatus()))
		}
		return nil
	})
	return out
}

// roomSeqs are the seqs the device got in room, in order of receipt.
func (d *device) roomSeqs(room string) []int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []int64
	for _, m := range d.roomMsgs[room] {
		out = append(out, m.GetSeq())
	}
	return out
}

// waitRoom waits until the device got n messages in room.
func (d *device) waitRoom(t *testing.T, room string, n int) []int64 {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if got := len(d.roomSeqs(room)); got < n {
			return fmt.Errorf("%s has %d messages of room %q, want %d", d.UID, got, room, n)
		}
		return nil
	})
	return d.roomSeqs(room)
}

// broadcast sends texts to rooms in one call and returns their seqs.
func (e *env) broadcast(rooms []string, texts ...string) []int64 {
	e.t.Helper()
	var bodies []*anypb.Any
	for _, s := range texts {
		bodies = append(bodies, text(s))
	}
	resp, err := e.push.BroadcastRoom(context.Background(), &pushpb.BroadcastRoomRequest{Rooms: rooms, MsgBodies: bodies})
	if err != nil {
		e.t.Fatalf("broadcast to %v: %v", rooms, err)
	}
	if len(resp.GetSeqs()) != len(texts) {
		e.t.Fatalf("broadcast returned %d seqs, want %d", len(resp.GetSeqs()), len(texts))
	}
	return resp.GetSeqs()
}

// waitRoomOnline polls RoomOnline until it counts n members in room (station
// learns of boats through an etcd watch) and returns the answer.
func (e *env) waitRoomOnline(room string, n int64) *pushpb.RoomOnlineResponse {
	e.t.Helper()
	var resp *pushpb.RoomOnlineResponse
	testutil.WaitFor(e.t, 10*time.Second, func() error {
		var err error
		if resp, err = e.push.RoomOnline(context.Background(), &pushpb.RoomOnlineRequest{Room: room}); err != nil {
			return err
		}
		if resp.GetMembers() != n {
			return fmt.Errorf("room %s has %d members, want %d: %v", room, resp.GetMembers(), n, resp)
		}
		return nil
	})
	return resp
}

// secondBoat starts boat-2 on the same backends and returns its client
// address.
func (e *env) secondBoat() (*app.Cluster, string) {
	e.t.Helper()
	b := e.startExtraWith(func(c *app.ClusterConfig) { c.Boat.ID = "boat-2" }, "boat")
	e.waitBoat("boat-2")
	return b, b.Boat.ClientAddr()
}

// TestRoomBroadcastReachesMembersOnTwoBoats: members on two boats get every
// room message once and in order (several broadcasts in flight, several
// bodies per call); non-members get none; RoomOnline counts per boat.
func TestRoomBroadcastReachesMembersOnTwoBoats(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt)
		_, addr2 := e.secondBoat()
		allow := []string{"match-*", "lobby"}
		a1, c1 := e.member(e.boatAddr, "a1", "ios", allow, "match-42")
		a2, c2 := e.member(e.boatAddr, "a2", "web", allow, "match-42", "lobby")
		b1, c3 := e.member(addr2, "b1", "android", allow, "match-42")
		n1, c4 := e.member(e.boatAddr, "n1", "ios", allow, "match-7")
		n2, c5 := e.member(addr2, "n2", "ios", allow)
		for _, cs := range [][]codes.Code{c1, c2, c3, c4, c5} {
			for _, c := range cs {
				if c != codes.OK {
					t.Fatalf("join answers %v, want OK", cs)
				}
			}
		}
		resp := e.waitRoomOnline("match-42", 3)
		perBoat := map[string]int64{}
		for _, b := range resp.GetBoats() {
			perBoat[b.GetBoatId()] = b.GetMembers()
		}
		if resp.GetMembers() != 3 || perBoat["boat-1"] != 2 || perBoat["boat-2"] != 1 || len(resp.GetUnreachableBoats()) != 0 {
			t.Fatalf("RoomOnline(match-42) = %v, want 3 members: boat-1 2, boat-2 1", resp)
		}

		var want []int64
		for i := range 60 {
			if i%10 == 0 {
				want = append(want, e.broadcast([]string{"match-42"}, fmt.Sprint(i), fmt.Sprint(i, "b"), fmt.Sprint(i, "c"))...)
			} else {
				want = append(want, e.broadcast([]string{"match-42"}, fmt.Sprint(i))...)
			}
		}
		lobby := e.broadcast([]string{"lobby", "match-42"}, "both")
		want = append(want, lobby...)
		for _, d := range []*device{a1, a2, b1} {
			got := d.waitRoom(t, "match-42", len(want))
			if !slices.Equal(got, want) {
				t.Fatalf("%s got %d seqs %v, want %d in order %v", d.UID, len(got), got, len(want), want)
			}
		}
		if got := a2.waitRoom(t, "lobby", 1); !slices.Equal(got, lobby) {
			t.Fatalf("a2 got lobby %v, want %v", got, lobby)
		}
		for _, d := range []*device{n1, n2} {
			d.mu.Lock()
			got := d.roomMsgs
			d.mu.Unlock()
			if len(got) != 0 {
				t.Fatalf("non-member %s got room messages %v", d.UID, got)
			}
		}
		// Room messages are not ACKed and never stored: the offline store is
		// untouched.
		if keys := e.rdb.Keys(context.Background(), "msg/om:*").Val(); len(keys) != 0 {
			t.Fatalf("room messages stored offline: %v", keys)
		}
	})
}

// TestRoomMembershipEnds: a member that leaves, disconnects or is kicked
// stops getting the room's messages, and RoomOnline stops counting it.
func TestRoomMembershipEnds(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, queueOpt)
		allow := []string{"*"}
		stay, _ := e.member(e.boatAddr, "stay", "ios", allow, "r")
		leaver, _ := e.member(e.boatAddr, "leaver", "ios", allow, "r")
		gone, _ := e.member(e.boatAddr, "gone", "ios", allow, "r")
		kicked, _ := e.member(e.boatAddr, "kicked", "ios", allow, "r")
		first := e.broadcast([]string{"r"}, "first")
		for _, d := range []*device{stay, leaver, gone, kicked} {
			d.waitRoom(t, "r", 1)
		}
		if err := leaver.LeaveRoom("r"); err != nil {
			t.Fatal(err)
		}
		if cs := leaver.waitRoomAnswers(t, 2); cs[1] != codes.OK {
			t.Fatalf("leave answered %v", cs[1])
		}
		gone.Close()
		if _, err := e.push.Kickout(context.Background(), &pushpb.KickoutRequest{Uid: "kicked"}); err != nil {
			t.Fatal(err)
		}
		e.waitRoomOnline("r", 1)
		second := e.broadcast([]string{"r"}, "second")
		if got := stay.waitRoom(t, "r", 2); !slices.Equal(got, append(first, second...)) {
			t.Fatalf("stay got %v", got)
		}
		for _, d := range []*device{leaver, gone, kicked} {
			if got := d.roomSeqs("r"); !slices.Equal(got, first) {
				t.Fatalf("%s got %v after it left the room, want only %v", d.UID, got, first)
			}
		}
	})
}

// TestJoinRoomNeedsTheTokensRight: a session may join only the rooms its
// token allows; refusals change nothing.
func TestJoinRoomNeedsTheTokensRight(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, queueOpt)
		d, cs := e.member(e.boatAddr, "alice", "ios", []string{"match-*"}, "lobby", "match-1", "bad room", "match-*")
		want := []codes.Code{codes.PermissionDenied, codes.OK, codes.InvalidArgument, codes.InvalidArgument}
		if !slices.Equal(cs, want) {
			t.Fatalf("join answers %v, want %v", cs, want)
		}
		none, cs := e.member(e.boatAddr, "bob", "ios", nil, "match-1")
		if cs[0] != codes.PermissionDenied {
			t.Fatalf("a token without rooms joined: %v", cs)
		}
		// Station learns of boats through an etcd watch: poll until it counts
		// alice, then the refused room must count nobody.
		e.waitRoomOnline("match-1", 1)
		if resp, err := e.push.RoomOnline(context.Background(), &pushpb.RoomOnlineRequest{Room: "lobby"}); err != nil || resp.GetMembers() != 0 {
			t.Fatalf("RoomOnline(lobby) = %v, %v; want 0 members", resp, err)
		}
		lobby := e.broadcast([]string{"lobby"}, "not for alice")
		m1 := e.broadcast([]string{"match-1"}, "for alice")
		if got := d.waitRoom(t, "match-1", 1); !slices.Equal(got, m1) {
			t.Fatalf("alice got %v in match-1, want %v", got, m1)
		}
		if got := d.roomSeqs("lobby"); len(got) != 0 {
			t.Fatalf("alice got lobby %v (seq %v) though refused", got, lobby)
		}
		if got := none.roomSeqs("match-1"); len(got) != 0 {
			t.Fatalf("bob got match-1 %v though refused", got)
		}
	})
}

// TestBroadcastAllByPlatform: BroadcastAll reaches every online session of
// the chosen platforms, and only those.
func TestBroadcastAllByPlatform(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt)
		_, addr2 := e.secondBoat()
		ios := e.connect("u1", "ios", true)
		web, _ := e.member(addr2, "u2", "web", nil)
		android := e.connect("u3", "android", true)
		resp, err := e.push.BroadcastAll(context.Background(), &pushpb.BroadcastAllRequest{
			PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios", "web"}}, MsgBodies: []*anypb.Any{text("ios and web")}})
		if err != nil {
			t.Fatal(err)
		}
		some := resp.GetSeqs()
		resp, err = e.push.BroadcastAll(context.Background(), &pushpb.BroadcastAllRequest{MsgBodies: []*anypb.Any{text("everyone")}})
		if err != nil {
			t.Fatal(err)
		}
		all := resp.GetSeqs()
		for _, d := range []*device{ios, web} {
			if got := d.waitRoom(t, "", 2); !slices.Equal(got, append(slices.Clone(some), all...)) {
				t.Fatalf("%s got %v, want %v then %v", d.UID, got, some, all)
			}
		}
		if got := android.waitRoom(t, "", 1); !slices.Equal(got, all) {
			t.Fatalf("android got %v, want only %v", got, all)
		}
	})
}

// TestBroadcastRejectsBadInput: bad input is InvalidArgument naming the
// field, and nothing reaches the broadcast topic.
func TestBroadcastRejectsBadInput(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, queueOpt)
		ctx := context.Background()
		body := []*anypb.Any{text("x")}
		for name, call := range map[string]func() error{
			"no rooms": func() error {
				_, err := e.push.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{MsgBodies: body})
				return err
			},
			"bad room": func() error {
				_, err := e.push.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: []string{"ok", "not ok"}, MsgBodies: body})
				return err
			},
			"no bodies": func() error {
				_, err := e.push.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: []string{"ok"}})
				return err
			},
			"unknown platform": func() error {
				_, err := e.push.BroadcastAll(ctx, &pushpb.BroadcastAllRequest{MsgBodies: body,
					PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"fax"}}})
				return err
			},
			"room online without room": func() error {
				_, err := e.push.RoomOnline(ctx, &pushpb.RoomOnlineRequest{})
				return err
			},
		} {
			if err := call(); status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s: %v, want InvalidArgument", name, err)
			}
		}
		if n := e.topicRecordsOf(broadcastTopic); n != 0 {
			t.Fatalf("refused broadcasts left %d records on %s", n, broadcastTopic)
		}
	})
}

// TestBoatLostMidBroadcast: a boat that stops while a room's broadcasts go
// on costs only its own members: the other boat's members get every
// message, in order; the lost boat's member got a prefix of them, in order.
func TestBoatLostMidBroadcast(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, queueOpt)
		b2, addr2 := e.secondBoat()
		allow := []string{"live"}
		here, _ := e.member(e.boatAddr, "here", "ios", allow, "live")
		there, _ := e.member(addr2, "there", "ios", allow, "live")
		const n = 80
		var want []int64
		for i := range n {
			if i == n/3 {
				there.waitRoom(t, "live", 1)
				if err := b2.Stop(); err != nil {
					t.Fatal(err)
				}
			}
			want = append(want, e.broadcast([]string{"live"}, fmt.Sprint(i))...)
		}
		if got := here.waitRoom(t, "live", n); !slices.Equal(got, want) {
			t.Fatalf("the surviving boat's member got %d %v, want %d in order", len(got), got, n)
		}
		got := there.roomSeqs("live")
		if len(got) == 0 || len(got) > n/3 || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("the lost boat's member got %v, want an in-order prefix of the first %d", got, n/3)
		}
		there.mu.Lock()
		k := there.kickout
		there.mu.Unlock()
		if k.GetReason() != msgpb.KickoutReason_SERVER_DRAINING {
			t.Fatalf("the lost boat's member got kickout %v, want SERVER_DRAINING", k)
		}
	})
}
