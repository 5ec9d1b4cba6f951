package boat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/room"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/presencepb"
)

// TestDeviceFieldsBounded: a device token, provider or room name longer than
// a device may send is refused InvalidArgument naming the field, with the
// request's id and without the field echoed back; a valid request's id is
// echoed as the SDKs match answers by it.
func TestDeviceFieldsBounded(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	c := tb.roomClient(t, "f", "ios", "*")
	long := strings.Repeat("x", 64<<10)
	send := func(p *msgpb.ClientPayload) {
		t.Helper()
		if err := c.stream.Send(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		p     *msgpb.ClientPayload
		field string
	}{
		{"token", &msgpb.ClientPayload{Body: &msgpb.ClientPayload_RegisterDevice{RegisterDevice: &msgpb.RegisterDevice{
			Id: 41, Provider: "apns", Token: strings.Repeat("t", maxTokenBytes+1)}}}, "device.token"},
		{"provider", &msgpb.ClientPayload{Body: &msgpb.ClientPayload_RegisterDevice{RegisterDevice: &msgpb.RegisterDevice{
			Id: 42, Provider: long, Token: "tok"}}}, "device.provider"},
	} {
		send(tc.p)
		a := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetDeviceRegistered() != nil }).GetDeviceRegistered()
		if a.GetId() != tc.p.GetRegisterDevice().GetId() || codes.Code(a.GetStatus()) != codes.InvalidArgument ||
			a.GetError().GetField() != tc.field || a.GetToken() != "" || a.GetProvider() != "" {
			t.Fatalf("%s too long: %.300v, want InvalidArgument naming %q, id %d, nothing echoed", tc.name, a, tc.field, tc.p.GetRegisterDevice().GetId())
		}
	}
	for i, join := range []bool{true, false} {
		id := int64(50 + i)
		if join {
			send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Id: id, Room: long}}})
		} else {
			send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_LeaveRoom{LeaveRoom: &msgpb.LeaveRoom{Id: id, Room: long}}})
		}
		a := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetRoomAnswer() != nil }).GetRoomAnswer()
		if a.GetId() != id || a.GetJoin() != join || codes.Code(a.GetStatus()) != codes.InvalidArgument ||
			a.GetError().GetField() != "room" || a.GetRoom() != "" || len(a.GetMessage()) > 200 {
			t.Fatalf("join=%v of a %d-byte room name: %.300v, want InvalidArgument naming room, id %d, the name not echoed", join, len(long), a, id)
		}
	}
	// A valid request is answered with its id (and a room name up to the
	// limit echoed).
	okName := strings.Repeat("r", room.MaxName)
	send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Id: 60, Room: okName}}})
	a := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetRoomAnswer() != nil }).GetRoomAnswer()
	if a.GetId() != 60 || a.GetStatus() != 0 || a.GetRoom() != okName {
		t.Fatalf("join of a %d-byte name: %v, want OK with id 60", len(okName), a)
	}
	send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_RegisterDevice{RegisterDevice: &msgpb.RegisterDevice{Id: 61, Provider: "apns", Token: "tok"}}})
	d := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetDeviceRegistered() != nil }).GetDeviceRegistered()
	if d.GetId() != 61 || d.GetToken() != "tok" {
		t.Fatalf("registration: %v, want id 61 and its token", d)
	}
	for label, want := range map[string]float64{"device_field_bytes": 2, "room_name_bytes": 2} {
		if got := promtest.ToFloat64(tb.metrics.LimitRejections.WithLabelValues(label)); got != want {
			t.Errorf("limit_rejections{%s} = %g, want %g", label, got, want)
		}
	}
}

// TestSendQueueBytes: a session's queue is bounded in bytes too: a client
// that stops reading is kicked SLOW_CONSUMER once the payloads queued for it
// pass --send-queue-bytes, long before --send-queue payloads or
// --write-timeout.
func TestSendQueueBytes(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) {
		c.SendQueue = 64
		c.SendQueueBytes = 256 << 10
		c.WriteTimeout = time.Minute
	})
	c := tb.connect(t, "q", smallWindow...) // never reads again
	body := textBody(strings.Repeat("x", 100<<10))
	const n = 16 // 1.6 MB: far below 64 payloads
	results := make(chan error, n)
	for i := range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			results <- tb.push(ctx, c.sid, &msgpb.Message{Seq: int64(i + 1), Body: body})
		}()
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if r := tb.station.reason(c.sid); r != presencepb.Reason_SLOW_CONSUMER {
			return testutil.Errorf("session ended with %v", r)
		}
		return nil
	})
	failed := 0
	for range n {
		if err := <-results; err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("every push succeeded although the session was kicked")
	}
}

// TestSendQueueBytesExactBound: a client that stops reading keeps its
// session while what waits on its queue reaches --send-queue-bytes exactly;
// the next push is refused (ResourceExhausted, SLOW_CONSUMER) and the session
// is kicked out as a slow consumer, which fails what it had queued.
func TestSendQueueBytesExactBound(t *testing.T) {
	t.Parallel()
	const bound = 64 << 10
	tb := startBoat(t, nil, func(c *Config) {
		c.SendQueue = 64
		c.SendQueueBytes = bound
		c.WriteTimeout = time.Minute
	})
	c := tb.connect(t, "q", smallWindow...) // never reads again
	s := tb.sessions.get(c.sid)
	msg := func(seq int64, n int) *msgpb.Message {
		return &msgpb.Message{Seq: seq, Body: textBody(strings.Repeat("x", n))}
	}
	// size is what a push of m counts against the bound: the encoded
	// payload that carries it.
	size := func(m *msgpb.Message) int64 {
		return int64(proto.Size(&msgpb.ServerPayload{Body: &msgpb.ServerPayload_Messages{Messages: &msgpb.Messages{Msgs: []*msgpb.Message{m}}}}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := make(chan error, 3)
	pushAsync := func(m *msgpb.Message) { go func() { results <- tb.push(ctx, c.sid, m) }() }
	queuedOrKicked := func(want int64) {
		t.Helper()
		testutil.WaitFor(t, 10*time.Second, func() error {
			if q := s.queued.Load(); q != want && !s.ended() {
				return testutil.Errorf("%d bytes queued, want %d", q, want)
			}
			return nil
		})
		if s.ended() {
			t.Fatalf("session kicked with %d of --send-queue-bytes %d queued, want it kept", s.queued.Load(), bound)
		}
	}

	// The client's window fills with the first push (1 MiB, which the
	// transport takes at once); the sender takes the second off the queue
	// and blocks sending it.
	idle := func() {
		t.Helper()
		testutil.WaitFor(t, 5*time.Second, func() error {
			if s.senderRunning() {
				return testutil.Errorf("sender still running with nothing queued")
			}
			return nil
		})
	}
	idle()
	if err := tb.push(ctx, c.sid, msg(1, 1<<20)); err != nil {
		t.Fatalf("first push: %v", err)
	}
	idle()
	pushAsync(msg(2, 10))
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !s.senderRunning() || s.queuedPayloads() > 0 {
			return testutil.Errorf("second push not taken by the sender")
		}
		return nil
	})
	// Two pushes that fill the bound to the byte.
	second := msg(3, 30<<10)
	third := msg(4, 0)
	for n := 0; size(third) < bound-size(second); n++ {
		third = msg(4, n)
	}
	if size(second)+size(third) != bound {
		t.Fatalf("payloads of %d and %d bytes, want %d together", size(second), size(third), bound)
	}
	pushAsync(second)
	queuedOrKicked(size(second))
	pushAsync(third)
	queuedOrKicked(bound)

	// One byte more is too many.
	err := tb.push(ctx, c.sid, msg(5, 0))
	if status.Code(err) != codes.ResourceExhausted || grpcerr.DetailCode(err) != errorpb.Code_SLOW_CONSUMER {
		t.Fatalf("push past --send-queue-bytes: %v, want ResourceExhausted SLOW_CONSUMER", err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if r := tb.station.reason(c.sid); r != presencepb.Reason_SLOW_CONSUMER {
			return testutil.Errorf("session ended with %v", r)
		}
		return nil
	})
	if got := promtest.ToFloat64(tb.metrics.Kickouts.WithLabelValues("SLOW_CONSUMER")); got != 1 {
		t.Fatalf("kickouts{SLOW_CONSUMER} %g, want 1", got)
	}
	// The pushes taken before it never reached the client.
	for range 3 {
		if err := <-results; status.Code(err) != codes.NotFound {
			t.Fatalf("push queued before the kick: %v, want NotFound (undelivered)", err)
		}
	}
}

// A session's queue takes one payload of any size when empty, and refuses
// one that would pass its byte bound; a payload taken off gives its bytes
// back.
func TestEnqueueByteBound(t *testing.T) {
	t.Parallel()
	s := newSession("s", 64)
	s.maxQueued = 1000
	big := func(n int) outgoing {
		return outgoing{payload: &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Messages{Messages: &msgpb.Messages{
			Msgs: []*msgpb.Message{{Seq: 1, Body: textBody(strings.Repeat("x", n))}}}}}}
	}
	if err := s.enqueue(big(5000)); err != nil {
		t.Fatalf("a big payload on an empty queue: %v", err)
	}
	if err := s.enqueue(big(10)); !errors.Is(err, ErrSlowConsumer) {
		t.Fatalf("a payload past the byte bound: %v, want ErrSlowConsumer", err)
	}
	s.dequeued(<-s.sendq)
	if q := s.queued.Load(); q != 0 {
		t.Fatalf("%d bytes counted on an empty queue", q)
	}
	for i := range 3 {
		if err := s.enqueue(big(200)); err != nil {
			t.Fatalf("small payload %d: %v", i, err)
		}
	}
	if err := s.enqueue(big(200)); !errors.Is(err, ErrSlowConsumer) {
		t.Fatalf("fourth payload of ~270 bytes under a 1000-byte bound: %v, want ErrSlowConsumer", err)
	}
	s.kick(msgpb.KickoutReason_SLOW_CONSUMER)
	if q := s.queued.Load(); q != 0 {
		t.Fatalf("%d bytes counted after the queue was failed", q)
	}
}
