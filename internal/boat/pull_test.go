package boat

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// openPull opens a session for uid on ios in pull mode.
func openPull(t *testing.T, addr, uid string) *client {
	t.Helper()
	cc, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(),
		"authorization", "Bearer "+uid+"/ios", OfflineModeHeader, OfflinePull))
	t.Cleanup(cancel)
	stream, err := msgpb.NewMsgClient(cc).Loop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := stream.Recv()
	if err != nil || p.GetConnected() == nil {
		t.Fatalf("first payload %v %v, want Connected", p, err)
	}
	return &client{stream: stream, cancel: cancel, sid: p.GetConnected().GetSid()}
}

func (c *client) sendPull(t *testing.T, id int64, limit int32, ack ...int64) {
	t.Helper()
	if err := c.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Pull{Pull: &msgpb.Pull{Id: id, Limit: limit, Ack: ack}}}); err != nil {
		t.Fatalf("send Pull %d: %v", id, err)
	}
}

func (c *client) pullResult(t *testing.T) *msgpb.PullResult {
	t.Helper()
	return c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetPullResult() != nil }).GetPullResult()
}

// A Pull reaches station with the uid, sid and boat id the boat holds for
// the session (the device names none of them) and the device's ack and
// limit; the PullResult carries the Pull's id and station's page. The
// session's pull mode reached station's Connect; a plain session's did not.
func TestPullForwardsSession(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	tb.station.mu.Lock()
	tb.station.pullFn = func(_ context.Context, r *stationpb.PullOfflineRequest) (*stationpb.PullOfflineResponse, error) {
		return &stationpb.PullOfflineResponse{Msgs: []*msgpb.Message{{Seq: 10}, {Seq: 11}}, More: true}, nil
	}
	tb.station.mu.Unlock()
	c := openPull(t, tb.ClientAddr(), "pam")
	plain := tb.connect(t, "pat")
	c.sendPull(t, 7, 2, 3, 4)
	res := c.pullResult(t)
	if res.GetId() != 7 || res.GetStatus() != 0 || !res.GetMore() || len(res.GetMsgs()) != 2 || res.GetMsgs()[1].GetSeq() != 11 {
		t.Fatalf("PullResult %v, want id 7, OK, seqs 10 and 11, more", res)
	}
	tb.station.mu.Lock()
	defer tb.station.mu.Unlock()
	r := tb.station.pullReqs[0]
	if r.GetBoatId() != "b1" || r.GetUid() != "pam" || r.GetSid() != c.sid || r.GetLimit() != 2 || !slices.Equal(r.GetAck(), []int64{3, 4}) {
		t.Fatalf("station got %v, want boat b1, uid pam, sid %s, limit 2, ack [3 4]", r, c.sid)
	}
	if !tb.station.pullModes[c.sid] || tb.station.pullModes[plain.sid] {
		t.Fatalf("pull modes at connect %v, want %s only", tb.station.pullModes, c.sid)
	}
}

// One Pull per session is in flight: a second one meanwhile is answered
// RESOURCE_EXHAUSTED at once, with its own id, and never reaches station;
// the first is answered when station answers. A Pull sent as soon as the
// previous answer arrived is served (the session takes it before queuing the
// answer), 1,000 times in a row.
func TestPullOneInFlight(t *testing.T) {
	t.Parallel()
	// 1,002 Pulls back to back: far past the default request rate.
	tb := startBoat(t, nil, func(c *Config) { c.SessionRequestRate, c.SessionRequestBurst = 1e6, 2000 })
	gate := make(chan struct{})
	tb.station.mu.Lock()
	tb.station.pullFn = func(ctx context.Context, r *stationpb.PullOfflineRequest) (*stationpb.PullOfflineResponse, error) {
		if r.GetLimit() == 1 {
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return &stationpb.PullOfflineResponse{Msgs: []*msgpb.Message{{Seq: int64(r.GetLimit())}}}, nil
	}
	tb.station.mu.Unlock()
	c := openPull(t, tb.ClientAddr(), "pia")
	c.sendPull(t, 1, 1)
	testutil.WaitFor(t, 10*time.Second, func() error {
		tb.station.mu.Lock()
		defer tb.station.mu.Unlock()
		if len(tb.station.pullReqs) != 1 {
			return testutil.Errorf("station got %d pulls, want 1", len(tb.station.pullReqs))
		}
		return nil
	})
	c.sendPull(t, 2, 2)
	res := c.pullResult(t)
	if res.GetId() != 2 || codes.Code(res.GetStatus()) != codes.ResourceExhausted || len(res.GetMsgs()) != 0 {
		t.Fatalf("second Pull in flight: %v, want id 2 RESOURCE_EXHAUSTED", res)
	}
	close(gate)
	if res := c.pullResult(t); res.GetId() != 1 || res.GetStatus() != 0 || res.GetMsgs()[0].GetSeq() != 1 {
		t.Fatalf("first Pull: %v, want id 1 OK", res)
	}
	for id := int64(3); id < 1003; id++ {
		c.sendPull(t, id, 5)
		if res := c.pullResult(t); res.GetId() != id || res.GetStatus() != 0 {
			t.Fatalf("Pull %d sent right after the previous answer: %v, want OK", id, res)
		}
	}
	tb.station.mu.Lock()
	defer tb.station.mu.Unlock()
	if n := len(tb.station.pullReqs); n != 1001 {
		t.Fatalf("station got %d pulls, want 1001 (the refused one never reaches it)", n)
	}
}

// A failed Pull is answered and never ends the session: bad input and a
// refusal keep their code and field, a backend failure reaches the device
// as UNAVAILABLE without its cause. The session still answers pings after.
func TestPullErrorsKeepSession(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	answers := []error{
		grpcerr.Status(grpcerr.Invalid("ack", "seq 0 (index 0) must be positive")),
		grpcerr.Status(grpcerr.New(codes.PermissionDenied, errorpb.Code_SESSION_NOT_FOUND, "uid has no session")),
		grpcerr.Status(grpcerr.New(codes.Unavailable, errorpb.Code_STORE_UNAVAILABLE, "offline store: redis: connection refused")),
		status.Error(codes.Internal, "secret backend detail"),
	}
	tb.station.mu.Lock()
	tb.station.pullFn = func(_ context.Context, r *stationpb.PullOfflineRequest) (*stationpb.PullOfflineResponse, error) {
		return nil, answers[r.GetLimit()]
	}
	tb.station.mu.Unlock()
	c := tb.connect(t, "pog") // Pull works without pull mode too
	want := []struct {
		code  codes.Code
		field string
	}{{codes.InvalidArgument, "ack"}, {codes.PermissionDenied, ""}, {codes.Unavailable, ""}, {codes.Unavailable, ""}}
	for i, w := range want {
		c.sendPull(t, int64(i+1), int32(i), 0)
		res := c.pullResult(t)
		if res.GetId() != int64(i+1) || codes.Code(res.GetStatus()) != w.code || res.GetError().GetField() != w.field || res.GetMessage() == "" {
			t.Fatalf("Pull %d: %v, want %s naming %q", i+1, res, w.code, w.field)
		}
		if w.code == codes.Unavailable && res.GetMessage() != "pull failed; retry later" {
			t.Fatalf("Pull %d: message %q shows the backend's failure", i+1, res.GetMessage())
		}
	}
	if err := c.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ping{Ping: &msgpb.Ping{Id: 9}}}); err != nil {
		t.Fatal(err)
	}
	if p := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetPong() != nil || p.GetKickout() != nil }); p.GetPong().GetId() != 9 {
		t.Fatalf("after failed pulls: %v, want pong 9", p)
	}
}

// A pull-mode session takes live messages before carrier's FinishReplay
// (there is no replay to wait for); a plain one is refused as not ready.
// Both get Ready once.
func TestPullModeTakesLiveBeforeReady(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pm := openPull(t, tb.ClientAddr(), "pmo")
	plain := tb.connect(t, "pla")
	live := []*msgpb.Message{{Seq: 5, Body: textBody("live")}}
	if _, err := tb.internal.PushMessages(ctx, &boatpb.PushMessagesRequest{Sid: pm.sid, Msgs: live}); err != nil {
		t.Fatalf("live push to a pull-mode session before FinishReplay: %v", err)
	}
	if p := pm.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetMessages() != nil || p.GetReady() != nil }); p.GetMessages().GetMsgs()[0].GetSeq() != 5 {
		t.Fatalf("pull-mode session got %v, want the live message", p)
	}
	_, err := tb.internal.PushMessages(ctx, &boatpb.PushMessagesRequest{Sid: plain.sid, Msgs: live})
	wantCode(t, "live push to a plain session before FinishReplay", err, codes.FailedPrecondition, errorpb.Code_SESSION_NOT_READY)
	if _, err := tb.internal.FinishReplay(ctx, &boatpb.FinishReplayRequest{Sid: pm.sid}); err != nil {
		t.Fatal(err)
	}
	if p := pm.recvUntil(t, func(p *msgpb.ServerPayload) bool { return true }); p.GetReady() == nil {
		t.Fatalf("after FinishReplay: %v, want Ready", p)
	}
}

// A device that registers a token again as soon as it reads the answer to
// the one before is never refused as "already in flight".
func TestDeviceRegistrationBackToBack(t *testing.T) {
	t.Parallel()
	// 1,000 registrations back to back: far past the default request rate.
	tb := startBoat(t, nil, func(c *Config) { c.SessionRequestRate, c.SessionRequestBurst = 1e6, 2000 })
	c := openPull(t, tb.ClientAddr(), "reg")
	for i := range 1000 {
		if err := c.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_RegisterDevice{
			RegisterDevice: &msgpb.RegisterDevice{Provider: "apns", Token: fmt.Sprint("tok", i)}}}); err != nil {
			t.Fatalf("send registration %d: %v", i, err)
		}
		a := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetDeviceRegistered() != nil }).GetDeviceRegistered()
		if codes.Code(a.GetStatus()) == codes.ResourceExhausted {
			t.Fatalf("registration %d sent right after the previous answer was refused: %v", i, a)
		}
	}
}

// A session's Pull, RegisterDevice, JoinRoom and LeaveRoom requests share
// one bucket (--session-request-rate, --session-request-burst): past it each
// is answered RESOURCE_EXHAUSTED naming the flag, with its id, does nothing
// (no Pull reaches station, a leave leaves the session in the room) and is
// counted; the session goes on (a ping is answered).
func TestSessionRequestRate(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.SessionRequestRate, c.SessionRequestBurst = 0.001, 3 })
	tb.station.mu.Lock()
	tb.station.pullFn = func(context.Context, *stationpb.PullOfflineRequest) (*stationpb.PullOfflineResponse, error) {
		return &stationpb.PullOfflineResponse{}, nil
	}
	tb.station.mu.Unlock()
	c := tb.roomClient(t, "rr", "ios", "*")
	c.join(t, "lobby")
	c.sendPull(t, 1, 0)
	if res := c.pullResult(t); res.GetId() != 1 || res.GetStatus() != 0 {
		t.Fatalf("Pull within the burst: %v", res)
	}
	send := func(p *msgpb.ClientPayload) {
		t.Helper()
		if err := c.stream.Send(p); err != nil {
			t.Fatal(err)
		}
	}
	send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_RegisterDevice{RegisterDevice: &msgpb.RegisterDevice{Id: 2, Provider: "apns", Token: "t"}}})
	if a := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetDeviceRegistered() != nil }).GetDeviceRegistered(); a.GetId() != 2 ||
		codes.Code(a.GetStatus()) == codes.ResourceExhausted {
		t.Fatalf("registration within the burst: %v", a)
	}
	limited := func(what string, status uint32, detail *errorpb.Error) {
		t.Helper()
		if codes.Code(status) != codes.ResourceExhausted || detail.GetField() != "--session-request-rate" || detail.GetCode() != errorpb.Code_LIMIT_EXCEEDED {
			t.Fatalf("%s past the burst: status %d %v, want RESOURCE_EXHAUSTED naming --session-request-rate", what, status, detail)
		}
	}
	c.sendPull(t, 3, 0, 42)
	res := c.pullResult(t)
	if res.GetId() != 3 {
		t.Fatalf("answer %v, want Pull 3's", res)
	}
	limited("Pull", res.GetStatus(), res.GetError())
	send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_LeaveRoom{LeaveRoom: &msgpb.LeaveRoom{Id: 4, Room: "lobby"}}})
	a := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetRoomAnswer() != nil }).GetRoomAnswer()
	if a.GetId() != 4 || a.GetRoom() != "lobby" {
		t.Fatalf("answer %v, want LeaveRoom 4's", a)
	}
	limited("LeaveRoom", a.GetStatus(), a.GetError())
	send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_RegisterDevice{RegisterDevice: &msgpb.RegisterDevice{Id: 5, Provider: "apns", Token: "t"}}})
	d := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetDeviceRegistered() != nil }).GetDeviceRegistered()
	if d.GetId() != 5 {
		t.Fatalf("answer %v, want RegisterDevice 5's", d)
	}
	limited("RegisterDevice", d.GetStatus(), d.GetError())

	send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ping{Ping: &msgpb.Ping{Id: 6}}})
	if p := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetPong() != nil }); p.GetPong().GetId() != 6 {
		t.Fatalf("pong %v, want 6", p)
	}
	if got := tb.online(t, "lobby"); got[0] != 1 {
		t.Fatalf("lobby has %d members after a refused leave, want 1", got[0])
	}
	tb.station.mu.Lock()
	pulls := len(tb.station.pullReqs)
	tb.station.mu.Unlock()
	if pulls != 1 {
		t.Fatalf("station got %d pulls, want 1 (the refused one never reaches it)", pulls)
	}
	if got := promtest.ToFloat64(tb.metrics.LimitRejections.WithLabelValues("session_request_rate")); got != 3 {
		t.Fatalf("limit_rejections{session_request_rate} = %g, want 3", got)
	}
}
