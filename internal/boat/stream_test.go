package boat

import (
	"context"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// smallWindow keeps the client's flow-control windows at 64 KiB (no BDP
// growth), so a client that does not read blocks the boat's Send soon.
var smallWindow = []grpc.DialOption{grpc.WithInitialWindowSize(1 << 16), grpc.WithInitialConnWindowSize(1 << 16)}

// probe serves the boat's client stream and records, when Loop returns,
// whether the session's sender had stopped.
type probe struct {
	msgpb.UnimplementedMsgServer
	c *clientServer

	mu       sync.Mutex
	s        *session // the session under test, set by the test
	returned time.Time
	stopped  bool // the sender had stopped when Loop returned
}

func (p *probe) Loop(stream msgpb.Msg_LoopServer) error {
	err := p.c.Loop(stream)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.returned = time.Now()
	if p.s != nil {
		select {
		case <-p.s.sendEnded:
			p.stopped = true
		default:
		}
	}
	return err
}

func (p *probe) result() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.returned, p.stopped
}

// startProbe serves tb's client stream through a probe on its own listener.
func startProbe(t *testing.T, tb *testBoat) (*probe, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &probe{c: &clientServer{b: tb.Boat}}
	srv := grpc.NewServer()
	msgpb.RegisterMsgServer(srv, p)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return p, ln.Addr().String()
}

// blockSender pushes big messages to sid until its sender is blocked in
// Send (the client reads nothing) with more queued behind; it returns the
// number of pushes and a channel of their results.
func blockSender(t *testing.T, tb *testBoat, s *session) (int, chan error) {
	t.Helper()
	n := 8
	body := textBody(strings.Repeat("x", 60<<10))
	results := make(chan error, n)
	for i := range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			results <- tb.push(ctx, s.sid, &msgpb.Message{Seq: int64(i + 1), Body: body})
		}()
	}
	// Blocked: every push answered (sent) or queued but the one in the
	// sender's hands, for five polls in a row.
	stable := 0
	testutil.WaitFor(t, 10*time.Second, func() error {
		answered, queued := len(results), s.queuedPayloads()
		if answered+queued != n-1 || queued == 0 {
			stable = 0
			return testutil.Errorf("%d answered, %d queued: sender not blocked yet", answered, queued)
		}
		if stable++; stable < 5 {
			return testutil.Errorf("sender blocked for %d polls", stable)
		}
		return nil
	})
	// What was sent was answered; only the blocked and the queued remain.
	for range len(results) {
		if err := <-results; err != nil {
			t.Fatalf("push before the sender blocked: %v", err)
		}
	}
	return s.queuedPayloads() + 1, results
}

// TestLoopReturnsAfterItsSender: the client stops reading with the sender
// blocked in Send, then closes its side. The handler ends the session and
// waits for the sender: once the client reads again the blocked Send
// completes, the sender stops, and only then does the handler return.
func TestLoopReturnsAfterItsSender(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	p, addr := startProbe(t, tb)
	c := connectTo(t, addr, "u1", smallWindow...)
	s := tb.sessions.get(c.sid)
	p.mu.Lock()
	p.s = s
	p.mu.Unlock()
	n, results := blockSender(t, tb, s)

	if err := c.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if !s.ended() {
			return testutil.Errorf("session not ended after the client closed its side")
		}
		return nil
	})
	if returned, _ := p.result(); !returned.IsZero() {
		t.Fatal("handler returned while its sender was blocked in Send")
	}
	// Read again: the blocked Send completes.
	for {
		if _, err := c.stream.Recv(); err != nil {
			break
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if returned, _ := p.result(); returned.IsZero() {
			return testutil.Errorf("handler has not returned")
		}
		return nil
	})
	if _, stopped := p.result(); !stopped {
		t.Fatal("handler returned before its sender stopped")
	}
	for range n {
		if err := <-results; err != nil && !isNotHeld(err) {
			t.Errorf("push: %v, want success or session not held", err)
		}
	}
}

// TestLoopWaitForSenderIsBounded: a client that stops reading and closes its
// side never lets the blocked Send complete; the handler returns senderWait
// after the session ended, which cancels the stream and stops the sender.
func TestLoopWaitForSenderIsBounded(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	p, addr := startProbe(t, tb)
	c := connectTo(t, addr, "u1", smallWindow...)
	s := tb.sessions.get(c.sid)
	n, results := blockSender(t, tb, s)

	closed := time.Now()
	if err := c.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, senderWait+5*time.Second, func() error {
		if returned, _ := p.result(); returned.IsZero() {
			return testutil.Errorf("handler has not returned %s after the client closed its side", time.Since(closed))
		}
		return nil
	})
	returned, _ := p.result()
	if took := returned.Sub(closed); took < senderWait || took > senderWait+2*time.Second {
		t.Errorf("handler returned %s after the client closed its side, want senderWait (%s) to %s", took, senderWait, senderWait+2*time.Second)
	}
	select {
	case <-s.sendEnded:
	case <-time.After(2 * time.Second):
		t.Fatal("sender still blocked 2s after the handler returned")
	}
	answered := 0
	for range n {
		select {
		case err := <-results:
			answered++
			if err != nil && !isNotHeld(err) {
				t.Errorf("push: %v, want success or session not held", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%d of %d pushes answered 2s after the stream ended", answered, n)
		}
	}
}

// TestPushToKickedSessionAnswersAtOnce: a session kicked while its sender is
// blocked (the kickout notice cannot go out) ends up to kickNoticeWait +
// senderWait later; meanwhile a push to it, and every push queued before the
// kick, is answered "not held" at once instead of waiting for the end.
func TestPushToKickedSessionAnswersAtOnce(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	c := tb.connect(t, "u1", smallWindow...)
	s := tb.sessions.get(c.sid)
	_, results := blockSender(t, tb, s)
	queued := s.queuedPayloads()

	kicked := make(chan error, 1)
	go func() { kicked <- tb.Kickout(context.Background(), s.sid, msgpb.KickoutReason_BY_REQUEST) }()
	testutil.WaitFor(t, 5*time.Second, func() error {
		select {
		case <-s.kicked:
			return nil
		default:
			return testutil.Errorf("session not kicked yet")
		}
	})
	start := time.Now()
	for i := range queued {
		select {
		case err := <-results:
			if !isNotHeld(err) {
				t.Errorf("queued push %d: %v, want session not held", i, err)
			}
		case <-time.After(700 * time.Millisecond):
			t.Fatalf("only %d of %d pushes queued before the kick answered %s after it", i, queued, time.Since(start))
		}
	}
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := tb.push(ctx, s.sid, &msgpb.Message{Seq: 100, Body: textBody("late")})
	if took := time.Since(start); !isNotHeld(err) || took > 700*time.Millisecond {
		t.Fatalf("push to a kicked session: %v after %s, want session not held at once", err, took)
	}
	select {
	case err := <-kicked:
		if err != nil {
			t.Fatalf("kickout: %v", err)
		}
	case <-time.After(kickNoticeWait + senderWait + 3*time.Second):
		t.Fatal("kicked session did not end")
	}
}

// TestNoPushStrandedByASessionEnding: pushes racing with their sessions'
// ends are all answered soon (delivered, or "not held"); none is queued
// after the session drained its queue, which would hold its caller until
// its deadline.
func TestNoPushStrandedByASessionEnding(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.SendQueue = 4096 })
	const sessions, pushers = 20, 8
	var slow, total atomic.Int64
	var wg sync.WaitGroup
	for i := range sessions {
		c := tb.connect(t, "u"+string(rune('a'+i)))
		stop := make(chan struct{})
		for range pushers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := int64(1); ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					start := time.Now()
					err := tb.push(ctx, c.sid, &msgpb.Message{Seq: seq, Body: textBody("m")})
					cancel()
					total.Add(1)
					if time.Since(start) > 3*time.Second {
						slow.Add(1)
					}
					if err != nil {
						if !isNotHeld(err) {
							t.Errorf("push: %v", err)
						}
						return
					}
				}
			}()
		}
		go func() {
			// Read a little, then go away while pushes are in flight.
			for range 20 {
				if _, err := c.stream.Recv(); err != nil {
					break
				}
			}
			c.cancel()
			close(stop)
		}()
	}
	wg.Wait()
	if n := slow.Load(); n > 0 {
		t.Fatalf("%d of %d pushes took more than 3s (queued to an ended session)", n, total.Load())
	}
}

func textBody(s string) *anypb.Any {
	a, err := anypb.New(wrapperspb.String(s))
	if err != nil {
		panic(err)
	}
	return a
}

// TestIdleSessionHoldsNoSender: a session's sender, and its send queue,
// exist only while there is something to send. Once Connected is out the
// sender stops and the queue goes; a push starts one that delivers and
// stops again; a pong and a kickout notice get one too.
func TestIdleSessionHoldsNoSender(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	c := tb.connect(t, "u1")
	s := tb.sessions.get(c.sid)
	idle := func(what string) {
		t.Helper()
		testutil.WaitFor(t, 5*time.Second, func() error {
			if s.senderRunning() {
				return testutil.Errorf("%s: the sender still runs", what)
			}
			s.mu.Lock()
			q := s.sendq
			s.mu.Unlock()
			if q != nil {
				return testutil.Errorf("%s: the sender stopped, but the session still holds its send queue", what)
			}
			return nil
		})
	}
	idle("after Connected")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		if err := tb.push(ctx, c.sid, &msgpb.Message{Seq: int64(i + 1), Body: textBody("m")}); err != nil {
			t.Fatalf("push %d to an idle session: %v", i, err)
		}
		p := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetMessages() != nil })
		if got := p.GetMessages().GetMsgs()[0].GetSeq(); got != int64(i+1) {
			t.Fatalf("got seq %d, want %d", got, i+1)
		}
		idle("after a push")
	}
	if err := c.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ping{Ping: &msgpb.Ping{Id: 7}}}); err != nil {
		t.Fatal(err)
	}
	if p := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetPong() != nil }); p.GetPong().GetId() != 7 {
		t.Fatalf("pong %v, want id 7", p)
	}
	idle("after a pong")
	select {
	case <-s.sendEnded:
		t.Fatal("the sender stopped for good while the session goes on")
	default:
	}
	s.kick(msgpb.KickoutReason_NEW_SESSION)
	if p := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetKickout() != nil }); p.GetKickout().GetReason() != msgpb.KickoutReason_NEW_SESSION {
		t.Fatalf("kickout %v, want NEW_SESSION", p)
	}
	select {
	case <-s.sendEnded:
	case <-time.After(5 * time.Second):
		t.Fatal("the sender did not stop for good after the kickout notice")
	}
}

// TestConnectRunsOffTheSessionGoroutine: a session's Connect call to
// station is made on a goroutine of its own, not on the one that then waits
// out the session, which would keep the stack the call grew for the
// session's whole life.
func TestConnectRunsOffTheSessionGoroutine(t *testing.T) {
	t.Parallel()
	stacks := make(chan string, 1)
	tb := startBoatWith(t, boatOpts{wrapStation: func(c stationpb.StationClient) stationpb.StationClient {
		return stackRecorder{StationClient: c, stacks: stacks}
	}})
	tb.connect(t, "u1")
	var stack string
	select {
	case stack = <-stacks:
	case <-time.After(10 * time.Second):
		t.Fatal("no Connect call reached station")
	}
	if !strings.Contains(stack, "stackRecorder.Connect(") {
		t.Fatalf("the recorded stack is not a Connect call's:\n%s", stack)
	}
	if strings.Contains(stack, ".serveSession(") {
		t.Errorf("Connect ran on the goroutine that serves the session:\n%s", stack)
	}
}

// stackRecorder records the stack of the goroutine making each Connect
// call (while there is room for it).
type stackRecorder struct {
	stationpb.StationClient
	stacks chan<- string
}

func (r stackRecorder) Connect(ctx context.Context, req *stationpb.ConnectRequest, opts ...grpc.CallOption) (*stationpb.ConnectResponse, error) {
	buf := make([]byte, 64<<10)
	select {
	case r.stacks <- string(buf[:runtime.Stack(buf, false)]):
	default:
	}
	return r.StationClient.Connect(ctx, req, opts...)
}

// TestSenderLingersBetweenMessages: messages that come one after another,
// each after the last was sent, are sent by one sender: it waits a moment
// before stopping rather than leaving the next message a new goroutine.
func TestSenderLingersBetweenMessages(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	c := tb.connect(t, "u1")
	s := tb.sessions.get(c.sid)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if s.senderRunning() {
			return testutil.Errorf("the sender still runs after Connected")
		}
		return nil
	})
	var starts atomic.Int32
	s.mu.Lock()
	start := s.startSender
	s.startSender = func() { starts.Add(1); start() }
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const n = 5
	for i := range n {
		if err := tb.push(ctx, c.sid, &msgpb.Message{Seq: int64(i + 1), Body: textBody("m")}); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
		p := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetMessages() != nil })
		if got := p.GetMessages().GetMsgs()[0].GetSeq(); got != int64(i+1) {
			t.Fatalf("got seq %d, want %d", got, i+1)
		}
	}
	if got := starts.Load(); got != 1 {
		t.Errorf("%d senders started for %d messages sent one after another, want 1", got, n)
	}
}
