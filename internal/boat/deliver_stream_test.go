package boat

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// ackWaits is how many of sid's seqs a push still waits an ACK for.
func ackWaits(tb *testBoat, sid string) (int, error) {
	s := tb.sessions.get(sid)
	if s == nil {
		return 0, fmt.Errorf("session %s not held", sid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending), nil
}

// waitNoAckWaits waits until no push waits for an ACK of sid's. With gone
// allowed, a session no longer held counts as none left; else it fails the
// wait (the session must stay).
func waitNoAckWaits(t *testing.T, tb *testBoat, sid string, gone bool, left string) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, func() error {
		n, err := ackWaits(tb, sid)
		switch {
		case err != nil && gone:
			return nil
		case err != nil:
			return err
		case n != 0:
			return fmt.Errorf("%d ACK waits left%s", n, left)
		}
		return nil
	})
}

// openDeliver opens a raw Deliver stream to tb, as carrier does.
func openDeliver(t *testing.T, tb *testBoat, ctx context.Context) boatpb.Boat_DeliverClient {
	t.Helper()
	cc, err := grpcx.Dial(tb.InternalAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	stream, err := boatpb.NewBoatClient(cc).Deliver(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

func ackedDelivery(id uint64, sid string, seq int64, timeout time.Duration) *boatpb.Delivery {
	d := &boatpb.Delivery{Id: id, Push: &boatpb.PushMessagesRequest{Sid: sid, Replay: true, AckWait: durationpb.New(time.Minute),
		Msgs: []*msgpb.Message{{Seq: seq, Body: textBody("m"), Options: uint32(msgpb.Option_NEED_ACK)}}}}
	if timeout > 0 {
		d.Timeout = durationpb.New(timeout)
	}
	return d
}

// A delivery on the Deliver stream waits for its ACK without a goroutine of
// its own, so its timeout is a timer: a device that does not ACK gets the
// delivery answered DeadlineExceeded at the timeout, long before the ACK wait
// (a minute), and is not kicked for it; its wait is dropped.
func TestDeliveryTimeoutWithoutAWaitingGoroutine(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	c := tb.connect(t, "u1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream := openDeliver(t, tb, ctx)
	start := time.Now()
	if err := stream.Send(&boatpb.DeliverRequest{Deliveries: []*boatpb.Delivery{ackedDelivery(7, c.sid, 1, 300*time.Millisecond)}}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		r   *boatpb.DeliverResponse
		err error
	}
	got := make(chan answer, 1)
	go func() {
		r, err := stream.Recv()
		got <- answer{r, err}
	}()
	select {
	case a := <-got:
		r := a.r
		if a.err != nil {
			t.Fatalf("recv: %v", a.err)
		}
		if len(r.GetResults()) != 1 || r.GetResults()[0].GetId() != 7 || codes.Code(r.GetResults()[0].GetCode()) != codes.DeadlineExceeded {
			t.Fatalf("results %v, want delivery 7 answered DeadlineExceeded", r.GetResults())
		}
		t.Logf("answered after %v", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("no answer 10 s after a delivery with a 300 ms timeout")
	}
	if p, err := c.stream.Recv(); err != nil || p.GetMessages() == nil {
		t.Fatalf("device got %v, %v; want the message", p, err)
	}
	waitNoAckWaits(t, tb, c.sid, false, ", want none") // a timeout is not an ACK timeout: the session stays
}

// When the carrier's stream ends, the deliveries it left waiting for ACKs
// end with it: their waits are dropped at once, not after the ACK wait.
func TestCarrierGoneEndsItsWaitingDeliveries(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	c := tb.connect(t, "u1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := openDeliver(t, tb, ctx)
	var ds []*boatpb.Delivery
	for i := range 3 {
		ds = append(ds, ackedDelivery(uint64(i+1), c.sid, int64(i+1), 0))
	}
	if err := stream.Send(&boatpb.DeliverRequest{Deliveries: ds}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if p, err := c.stream.Recv(); err != nil || p.GetMessages() == nil {
			t.Fatalf("device got %v, %v; want a message", p, err)
		}
	}
	if n, err := ackWaits(tb, c.sid); err != nil || n != 3 {
		t.Fatalf("%d ACK waits (%v) with 3 messages sent and none ACKed, want 3", n, err)
	}
	cancel()
	waitNoAckWaits(t, tb, c.sid, false, " after the carrier went, want none")
}

// Deliveries that start while their session ends are each answered once,
// none lost or answered twice, and leave no wait behind. Run under -race it
// also checks what a push's beginning shares with the goroutine that ends
// it.
func TestDeliveriesRacingTheSessionEnd(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	c := tb.connect(t, "u1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream := openDeliver(t, tb, ctx)
	const frames, perFrame = 40, 10
	go func() {
		for f := range frames {
			var ds []*boatpb.Delivery
			for i := range perFrame {
				n := f*perFrame + i + 1
				ds = append(ds, ackedDelivery(uint64(n), c.sid, int64(n), 10*time.Second))
			}
			if err := stream.Send(&boatpb.DeliverRequest{Deliveries: ds}); err != nil {
				return
			}
			if f == frames/4 {
				c.cancel() // the device goes while deliveries keep coming
			}
		}
		_ = stream.CloseSend()
	}()
	answered := map[uint64]int{}
	for len(answered) < frames*perFrame {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv after %d answers: %v", len(answered), err)
		}
		for _, res := range r.GetResults() {
			answered[res.GetId()]++
		}
	}
	for id, n := range answered {
		if n != 1 || id < 1 || id > frames*perFrame {
			t.Fatalf("delivery %d answered %d times, want once", id, n)
		}
	}
	if r, err := stream.Recv(); err == nil {
		t.Fatalf("more answers after all %d: %v", frames*perFrame, r.GetResults())
	}
	waitNoAckWaits(t, tb, c.sid, true, " on an ended session")
}
