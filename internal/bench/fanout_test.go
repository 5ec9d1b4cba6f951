package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// okLog is a room whose broadcaster sent indices 0 to n-1 and whose calls
// for them succeeded except for failed.
func okLog(name string, n int, failed ...int) *roomLog {
	lg := &roomLog{name: name, next: n}
	for i := range n {
		lg.ok.set(i)
	}
	for _, i := range failed {
		lg.ok[i/64] &^= 1 << (i % 64)
	}
	return lg
}

// receiving returns a member of room r (roomIdx idx) that received the
// indices in order.
func receiving(room string, roomIdx int, idxs ...int) *member {
	m := newMember(room, roomIdx, false)
	for _, i := range idxs {
		m.receive(room, i, true)
	}
	return m
}

func TestTally(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		rooms   []*roomLog
		members []*member
		want    fanoutCounts
	}{{
		name:    "every member got every message once in order",
		rooms:   []*roomLog{okLog("a", 3)},
		members: []*member{receiving("a", 0, 0, 1, 2), receiving("a", 0, 0, 1, 2)},
		want:    fanoutCounts{Delivered: 6},
	}, {
		name:  "one message missed by two members counts two pairs, one message",
		rooms: []*roomLog{okLog("a", 4)},
		members: []*member{receiving("a", 0, 0, 2, 3), receiving("a", 0, 0, 2, 3),
			receiving("a", 0, 0, 1, 2, 3)},
		want: fanoutCounts{Delivered: 10, Missing: 2, MissingMessages: 1, MembersMissing: 2},
	}, {
		name:    "a member that missed everything",
		rooms:   []*roomLog{okLog("a", 130)},
		members: []*member{receiving("a", 0)},
		want:    fanoutCounts{Missing: 130, MissingMessages: 130, MembersMissing: 1},
	}, {
		name:    "duplicates are counted, not missing",
		rooms:   []*roomLog{okLog("a", 2)},
		members: []*member{receiving("a", 0, 0, 0, 1, 1, 1)},
		want:    fanoutCounts{Delivered: 5, Duplicates: 3},
	}, {
		name:    "out of order: first receipts below the highest seen",
		rooms:   []*roomLog{okLog("a", 5)},
		members: []*member{receiving("a", 0, 0, 3, 1, 2, 4)},
		want:    fanoutCounts{Delivered: 5, OutOfOrder: 2},
	}, {
		name:    "a gap is missing, not out of order",
		rooms:   []*roomLog{okLog("a", 3)},
		members: []*member{receiving("a", 0, 0, 2)},
		want:    fanoutCounts{Delivered: 2, Missing: 1, MissingMessages: 1, MembersMissing: 1},
	}, {
		name:    "a message of a failed call received is unexpected; not received, not missing",
		rooms:   []*roomLog{okLog("a", 4, 1, 3)},
		members: []*member{receiving("a", 0, 0, 1, 2)},
		want:    fanoutCounts{Delivered: 3, Unexpected: 1},
	}, {
		name:  "rooms are counted apart",
		rooms: []*roomLog{okLog("a", 2), okLog("b", 70)},
		members: []*member{receiving("a", 0, 0, 1), receiving("b", 1, 0, 69),
			receiving("b", 1, 68, 69)},
		want: fanoutCounts{Delivered: 6, Missing: 68 + 68, MissingMessages: 68 + 1, MembersMissing: 2, OutOfOrder: 0},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tally(tc.members, tc.rooms); got != tc.want {
				t.Errorf("tally = %+v\nwant    %+v", got, tc.want)
			}
		})
	}
}

func TestMemberReceiveWrong(t *testing.T) {
	t.Parallel()
	m := newMember("a", 0, false)
	m.receive("b", 0, true)        // another room
	m.receive("a", 1, false)       // not our body
	m.receive("a", maxIndex, true) // beyond the bound: would grow the set to 2 MB
	m.receive("a", maxIndex-1, true)
	if m.wrong != 3 || m.received != 1 {
		t.Errorf("wrong = %d, received = %d, want 3 and 1", m.wrong, m.received)
	}
	if len(m.got) != maxIndex/64 {
		t.Errorf("got holds %d words, want %d", len(m.got), maxIndex/64)
	}
	if lg := okLog("a", 1); tally([]*member{m}, []*roomLog{lg}).WrongRoom != 3 {
		t.Error("tally lost the wrong receipts")
	}
}

func TestCheckAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a    *msgpb.RoomAnswer
		want string // part of the error; empty: none
	}{
		{"ok", &msgpb.RoomAnswer{Room: "r", Join: true}, ""},
		{"denied", &msgpb.RoomAnswer{Room: "r", Join: true, Status: uint32(codes.PermissionDenied), Message: "token"},
			"JoinRoom \"r\" refused: PermissionDenied: token"},
		{"limited", &msgpb.RoomAnswer{Room: "r", Join: true, Status: uint32(codes.ResourceExhausted)}, "ResourceExhausted"},
		{"another room", &msgpb.RoomAnswer{Room: "s", Join: true}, "want the answer to JoinRoom \"r\""},
		{"a leave", &msgpb.RoomAnswer{Room: "r"}, "join false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkAnswer(tc.a, "r")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("err = %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestDecodeBody(t *testing.T) {
	t.Parallel()
	sent := time.Date(2026, 11, 26, 12, 0, 0, 123, time.UTC).UnixNano()
	s, idx, ok := decodeBody(encodeBody(sent, 1<<20+7))
	if !ok || s != sent || idx != 1<<20+7 {
		t.Errorf("decode(encode) = %d, %d, %v; want %d, %d, true", s, idx, ok, sent, 1<<20+7)
	}
	// Same bytes under another type: not ours.
	other := encodeBody(sent, 3)
	other.TypeUrl = "type.googleapis.com/google.protobuf.StringValue"
	if _, _, ok := decodeBody(other); ok {
		t.Error("a StringValue of the same bytes decoded as a bench body")
	}
	short, _ := anypb.New(wrapperspb.Bytes(make([]byte, bodyLen-1)))
	if _, _, ok := decodeBody(short); ok {
		t.Error("a short body decoded")
	}
	if _, _, ok := decodeBody(nil); ok {
		t.Error("nil decoded")
	}
}

func TestParseSeries(t *testing.T) {
	t.Parallel()
	page := `# HELP gomsg_boat_room_batch_messages Messages per room frame.
# TYPE gomsg_boat_room_batch_messages histogram
gomsg_boat_room_batch_messages_bucket{le="1"} 2
gomsg_boat_room_batch_messages_bucket{le="+Inf"} 10
gomsg_boat_room_batch_messages_sum 45
gomsg_boat_room_batch_messages_count 10
gomsg_boat_broadcast_dropped_total{reason="slow_consumer"} 3
gomsg_boat_broadcast_dropped_total{reason="overflow"} 4
gomsg_boat_room_members{boat="b1"} 100
gomsg_boat_room_members{boat="b2"} 50
`
	after, err := parseSeries(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	before := series{"gomsg_boat_room_batch_messages_sum": 5, "gomsg_boat_room_batch_messages_count": 2}
	if mean, n := histogramMean(before, after, "gomsg_boat_room_batch_messages"); mean != 5 || n != 8 {
		t.Errorf("mean = %v over %v frames, want 5 over 8", mean, n)
	}
	if mean, n := histogramMean(after, after, "gomsg_boat_room_batch_messages"); mean != 0 || n != 0 {
		t.Errorf("no frames between: mean = %v over %v, want 0 over 0", mean, n)
	}
	if v, ok := after.sum("gomsg_boat_room_members"); !ok || v != 150 {
		t.Errorf("room members = %v, %v; want 150, true", v, ok)
	}
	if _, ok := after.sum("gomsg_boat_rooms"); ok {
		t.Error("a metric the page lacks was found")
	}
	d := after.byLabel("gomsg_boat_broadcast_dropped_total", "reason")
	if len(d) != 2 || d["slow_consumer"] != 3 || d["overflow"] != 4 {
		t.Errorf("dropped = %v", d)
	}
	if _, err := parseSeries(strings.NewReader("x{a=\"b\"} notanumber\n")); err == nil {
		t.Error("a bad value parsed")
	}
}

func TestMintTokenRooms(t *testing.T) {
	t.Parallel()
	tok, err := mintToken(testSecret, "u1", "ios", []string{"room-1"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := auth.NewJWT(testSecret, true).Authenticate(t.Context(), tok)
	if err != nil {
		t.Fatal(err)
	}
	if id.UID != "u1" || id.Platform != "ios" || len(id.Rooms) != 1 || id.Rooms[0] != "room-1" {
		t.Errorf("identity = %+v, want u1 on ios allowed room-1", id)
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	for c, want := range map[codes.Code]bool{
		codes.PermissionDenied: true, codes.Unauthenticated: true, codes.Unimplemented: true, codes.InvalidArgument: true,
		codes.Unavailable: false, codes.DeadlineExceeded: false, codes.ResourceExhausted: false, codes.Internal: false,
	} {
		if got := refused(status.Error(c, "x")); got != want {
			t.Errorf("refused(%s) = %v, want %v", c, got, want)
		}
	}
}

func TestWaitWindow(t *testing.T) {
	t.Parallel()
	const members, window = 10, 4
	t.Run("room within its window goes on at once", func(t *testing.T) {
		t.Parallel()
		lg := newRoomLog("a")
		lg.sentOK = 5
		lg.received(2*members + 1) // 3 on their way, on average
		stalled, err := lg.waitWindow(t.Context(), members, window, time.Hour)
		if stalled || err != nil {
			t.Errorf("stalled %v, err %v; want neither", stalled, err)
		}
	})
	t.Run("a full window waits for receipts", func(t *testing.T) {
		t.Parallel()
		lg := newRoomLog("a")
		lg.sentOK = 6
		lg.received(members) // 5 on their way
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			stalled, err := lg.waitWindow(ctx, members, window, time.Hour)
			if stalled {
				err = errors.New("stalled")
			}
			done <- err
		}()
		for range members - 1 { // 4.1 on their way
			lg.received(1)
		}
		select {
		case err := <-done:
			t.Fatalf("returned (%v) with 4.1 messages on their way, window %d", err, window)
		case <-time.After(50 * time.Millisecond):
		}
		lg.received(2) // 3.9
		if err := <-done; err != nil {
			t.Errorf("wait: %v, want it to return once under the window", err)
		}
	})
	t.Run("a room without receipts stalls, then goes on", func(t *testing.T) {
		t.Parallel()
		lg := newRoomLog("a")
		lg.sentOK = window
		start := time.Now()
		stalled, err := lg.waitWindow(t.Context(), members, window, 20*time.Millisecond)
		if !stalled || err != nil || time.Since(start) < 20*time.Millisecond {
			t.Errorf("stalled %v, err %v after %s; want a stall after 20ms", stalled, err, time.Since(start))
		}
	})
}

// TestFanoutShortRun runs the fanout scenario against an in-process
// cluster at a fixed rate: every member receives every message of its room
// exactly once and in order, and the report's counts agree.
func TestFanoutShortRun(t *testing.T) {
	c := startCluster(t)
	const rooms, members, bodies = 3, 40, 2
	rep, err := Run(t.Context(), Options{
		Scenario: ScenarioFanout, Fanout: []FanoutSize{{Rooms: rooms, Members: members}}, Rate: 60, Bodies: bodies,
		StreamsPerConn: 2, SourceSpread: 4, Warmup: 300 * time.Millisecond, Duration: 1500 * time.Millisecond,
		ConnectTimeout: 20 * time.Second,
		NewCluster:     func(context.Context) (*Cluster, bool, error) { return c, false, nil },
		Command:        "go test ./internal/bench -run TestFanoutShortRun",
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Fanout == nil {
		t.Fatalf("runs = %+v, want one fanout run", rep.Runs)
	}
	f := rep.Runs[0].Fanout
	if f.Calls == 0 || f.CallErrors != 0 {
		t.Fatalf("calls = %d, errors = %d; want some and none", f.Calls, f.CallErrors)
	}
	if f.Broadcast != f.Calls*bodies || f.Expected != f.Broadcast*members {
		t.Errorf("broadcast %d, expected %d for %d calls of %d bodies to %d members", f.Broadcast, f.Expected, f.Calls, bodies, members)
	}
	if f.Delivered != f.Expected || f.Missing != 0 || f.Duplicates != 0 || f.OutOfOrder != 0 || f.Unexpected != 0 || f.WrongRoom != 0 {
		t.Errorf("delivered %d of %d; missing %d dup %d out-of-order %d unexpected %d wrong %d; want all, once, in order",
			f.Delivered, f.Expected, f.Missing, f.Duplicates, f.OutOfOrder, f.Unexpected, f.WrongRoom)
	}
	if f.Kickouts != 0 || f.Ended != 0 {
		t.Errorf("kickouts %d, streams ended %d; want none", f.Kickouts, f.Ended)
	}
	// 60 calls/s: never more (slow calls on a busy machine may make it
	// fewer; one room's calls are one after another).
	if f.CallsPerSec < 10 || f.CallsPerSec > 70 || f.BroadcastsPerSec != f.CallsPerSec*bodies {
		t.Errorf("calls/s %.1f, broadcasts/s %.1f; want at most about 60 and twice that", f.CallsPerSec, f.BroadcastsPerSec)
	}
	if f.DeliveredPerSec <= 0 || f.Latency.Count == 0 || f.Latency.P50 <= 0 {
		t.Errorf("delivered/s %.0f, latency %+v; want receipts in the window, and latencies", f.DeliveredPerSec, f.Latency)
	}
	if f.RoomFrames <= 0 || f.RoomBatchMean < 1 {
		t.Errorf("room frames %.0f, mean %.2f messages each; want frames of at least one message", f.RoomFrames, f.RoomBatchMean)
	}
	if md := rep.Markdown(); !strings.Contains(md, "| fanout 3×40 | 3 × 40 | 60 calls/s |") {
		t.Errorf("markdown lacks the run's row:\n%s", md)
	}
}

// TestFanoutJoinRefused: a session that asks for a room its token does
// not allow makes the run fail, naming boat's answer.
func TestFanoutJoinRefused(t *testing.T) {
	c := startCluster(t)
	ms := []*member{newMember("allowed", 0, false), newMember("allowed", 0, false)}
	p, err := openSessions(t.Context(), openConfig{ClientAddr: c.ClientAddr, Secret: c.Secret, Platform: c.Platform,
		UIDPrefix: "refused-", N: len(ms), WaitReady: true, Timeout: 10 * time.Second, Member: func(i int) *member { return ms[i] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	ms[1].room = "other" // the token allows "allowed" only
	err = joinAll(t.Context(), p, 10*time.Second, t.Logf)
	if err == nil || !strings.Contains(err.Error(), `JoinRoom "other" refused: PermissionDenied`) {
		t.Fatalf("join = %v, want session 1 refused PermissionDenied", err)
	}
}

// TestFanoutShortRunWindow runs the fanout scenario without a rate: each
// room's broadcaster keeps its window full, and nothing is lost.
func TestFanoutShortRunWindow(t *testing.T) {
	c := startCluster(t)
	const rooms, members = 2, 30
	rep, err := Run(t.Context(), Options{
		Scenario: ScenarioFanout, Fanout: []FanoutSize{{Rooms: rooms, Members: members}}, Window: 4,
		StreamsPerConn: 2, SourceSpread: 4, Warmup: 300 * time.Millisecond, Duration: time.Second,
		ConnectTimeout: 20 * time.Second,
		NewCluster:     func(context.Context) (*Cluster, bool, error) { return c, false, nil },
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	f := rep.Runs[0].Fanout
	if f.Window != 4 || f.Calls == 0 || f.CallErrors != 0 || f.WindowStalls != 0 {
		t.Fatalf("window %d, calls %d, errors %d, stalls %d; want window 4, calls, no errors, no stalls", f.Window, f.Calls, f.CallErrors, f.WindowStalls)
	}
	if f.Delivered != f.Expected || f.Missing != 0 || f.Duplicates != 0 || f.OutOfOrder != 0 || f.DrainCutOff {
		t.Errorf("delivered %d of %d; missing %d dup %d out-of-order %d cut off %v", f.Delivered, f.Expected, f.Missing, f.Duplicates, f.OutOfOrder, f.DrainCutOff)
	}
}
