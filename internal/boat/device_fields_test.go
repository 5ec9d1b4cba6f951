package boat

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/gomsg/gomsg/internal/room"
	"github.com/gomsg/gomsg/internal/testutil"
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
