package boat

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/internal/timewheel"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"google.golang.org/grpc/metadata"
)

// A session kicked while station is still answering its Connect gets the
// kickout notice (and no Connected) once station has answered: the notice
// needs a sender, which the session starts only then.
func TestKickoutWhileConnecting(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	gate := make(chan struct{})
	tb.station.mu.Lock()
	tb.station.connectGate = gate
	tb.station.mu.Unlock()
	cc, err := grpcx.Dial(tb.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer held/ios"), 15*time.Second)
	defer cancel()
	stream, err := msgpb.NewMsgClient(cc).Loop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sid string
	testutil.WaitFor(t, 10*time.Second, func() error {
		tb.station.mu.Lock()
		defer tb.station.mu.Unlock()
		if len(tb.station.heldSids) != 1 {
			return testutil.Errorf("station holds %d connects", len(tb.station.heldSids))
		}
		sid = tb.station.heldSids[0]
		return nil
	})
	kicked := make(chan error, 1)
	go func() {
		_, err := tb.unary.Kickout(context.Background(), &boatpb.KickoutRequest{Sid: sid, Reason: msgpb.KickoutReason_NEW_SESSION})
		kicked <- err
	}()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if s := tb.sessions.get(sid); s == nil || !s.ended() {
			return testutil.Errorf("session %s not kicked yet", sid)
		}
		return nil
	})
	close(gate)
	p, err := stream.Recv()
	if err != nil || p.GetKickout().GetReason() != msgpb.KickoutReason_NEW_SESSION {
		t.Fatalf("first payload of a session kicked while connecting: %v, %v; want the Kickout NEW_SESSION notice", p, err)
	}
	if err := <-kicked; err != nil {
		t.Fatalf("Kickout: %v", err)
	}
}

// chanConn is a clientConn whose payloads go to a channel.
type chanConn struct{ sent chan *msgpb.ServerPayload }

func (c chanConn) Context() context.Context            { return context.Background() }
func (c chanConn) Recv() (*msgpb.ClientPayload, error) { select {} }
func (c chanConn) Send(p *msgpb.ServerPayload) error   { c.sent <- p; return nil }
func (c chanConn) SendFrame(f *encodedFrame) error     { return fmt.Errorf("no frames here") }

// A payload queued just as the sender finds the queue empty, before it
// stops, is sent: either that sender goes on or a new one starts.
func TestSenderWakesForPayloadQueuedAsItIdles(t *testing.T) {
	t.Parallel()
	b := &Boat{cfg: Config{WriteTimeout: time.Minute}, wheel: timewheel.New(50*time.Millisecond, 64)}
	conn := chanConn{sent: make(chan *msgpb.ServerPayload, 4)}
	s := newSession("s", 8)
	s.startSender = func() { go b.send(conn, s) }
	pong := func(id int64) outgoing {
		return outgoing{payload: &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Pong{Pong: &msgpb.Pong{Id: id}}}}
	}
	var idles atomic.Int32
	s.idleHook = func() {
		if idles.Add(1) == 1 { // the first time the sender finds the queue empty
			if err := s.enqueue(pong(2)); err != nil {
				t.Errorf("enqueue as the sender idles: %v", err)
			}
		}
	}
	t.Cleanup(s.finish)
	if err := s.enqueue(pong(1)); err != nil {
		t.Fatal(err)
	}
	for want := int64(1); want <= 2; want++ {
		select {
		case p := <-conn.sent:
			if p.GetPong().GetId() != want {
				t.Fatalf("sent %v, want Pong %d", p, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Pong %d not sent within 5s (the sender idled with it queued)", want)
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if s.senderRunning() {
			return testutil.Errorf("sender still running with nothing queued")
		}
		return nil
	})
}

// A single Broadcast waiting for space in a room's full batcher queue is
// woken when the batcher takes a frame: it is queued long before its
// deadline, and the member gets every message in order.
func TestBroadcastWaiterWoken(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.RoomBatch = 4; c.RoomQueue = 4; c.RoomBatchWindow = 300 * time.Millisecond })
	c := tb.roomClient(t, "w", "ios", "r")
	c.join(t, "r")
	tb.broadcast(t, "r", 1, 3) // held for the window: 3 of 4 places taken
	start := time.Now()
	tb.broadcast(t, "r", 4, 5) // waits for space until the batcher takes the 3
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the waiting Broadcast took %s, want it woken when the first frame went (~300ms)", d)
	}
	seqs, _ := c.frames(t, "r", 5)
	wantInOrder(t, "member", seqs, 5)
}
