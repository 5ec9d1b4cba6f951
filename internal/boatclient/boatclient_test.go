package boatclient

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

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"google.golang.org/protobuf/types/known/anypb"
)

// testBoat answers deliveries by sid: "gone" is not held, "hold" waits
// until release is closed (or the stream ends), "break" ends the stream
// with an error; any other sid gets its messages' seqs as ACKed.
type testBoat struct {
	boatpb.UnimplementedBoatServer
	release chan struct{}

	mu       sync.Mutex
	frames   []int           // deliveries per frame received
	timeouts []time.Duration // each delivery's timeout
	streams  atomic.Int64    // Deliver streams opened
	unary    atomic.Int64    // unary PushMessages calls
}

func newTestBoat() *testBoat { return &testBoat{release: make(chan struct{})} }

func (b *testBoat) answer(ctx context.Context, req *boatpb.PushMessagesRequest) ([]int64, error) {
	switch req.GetSid() {
	case "gone":
		return nil, grpcerr.New(codes.NotFound, errorpb.Code_SESSION_NOT_FOUND, "session gone is not held")
	case "partial": // the client ACKs the first message, then its ACK wait runs out
		return []int64{req.GetMsgs()[0].GetSeq()}, grpcerr.New(codes.DeadlineExceeded, errorpb.Code_ACK_TIMEOUT, "no ACK in time")
	case "hold":
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var seqs []int64
	for _, m := range req.GetMsgs() {
		seqs = append(seqs, m.GetSeq())
	}
	return seqs, nil
}

func (b *testBoat) PushMessages(ctx context.Context, req *boatpb.PushMessagesRequest) (*boatpb.PushMessagesResponse, error) {
	b.unary.Add(1)
	seqs, err := b.answer(ctx, req)
	if err != nil {
		return nil, grpcerr.Status(err)
	}
	return &boatpb.PushMessagesResponse{AckedSeqs: seqs}, nil
}

func (b *testBoat) Deliver(stream boatpb.Boat_DeliverServer) error {
	b.streams.Add(1)
	ctx, cancel := context.WithCancel(stream.Context())
	var (
		wg sync.WaitGroup
		mu sync.Mutex // Send is not safe for concurrent use
	)
	defer wg.Wait() // nothing may Send once the handler returned
	defer cancel()
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		b.mu.Lock()
		b.frames = append(b.frames, len(req.GetDeliveries()))
		for _, d := range req.GetDeliveries() {
			b.timeouts = append(b.timeouts, d.GetTimeout().AsDuration())
		}
		b.mu.Unlock()
		for _, d := range req.GetDeliveries() {
			if d.GetPush().GetSid() == "break" {
				return status.Error(codes.Internal, "broken on purpose")
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				seqs, err := b.answer(ctx, d.GetPush())
				if ctx.Err() != nil {
					return
				}
				code, msg, detail := grpcerr.Parts(err)
				mu.Lock()
				defer mu.Unlock()
				_ = stream.Send(&boatpb.DeliverResponse{Results: []*boatpb.DeliveryResult{{
					Id: d.GetId(), AckedSeqs: seqs, Code: uint32(code), Message: msg, Error: detail}}})
			}()
		}
	}
}

func (b *testBoat) received() (frames []int, deliveries int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.frames {
		deliveries += n
	}
	return slices.Clone(b.frames), deliveries
}

// onlyUnary serves PushMessages but not Deliver, as a boat older than it.
type onlyUnary struct {
	boatpb.UnimplementedBoatServer
	b *testBoat
}

func (o onlyUnary) PushMessages(ctx context.Context, req *boatpb.PushMessagesRequest) (*boatpb.PushMessagesResponse, error) {
	return o.b.PushMessages(ctx, req)
}

func serve(t testing.TB, srv boatpb.BoatServer, opts ...grpc.DialOption) *Client {
	t.Helper()
	s := grpc.NewServer()
	boatpb.RegisterBoatServer(s, srv)
	return New(testutil.ServeGRPC(t, s, opts...))
}

func req(sid string, seqs ...int64) *boatpb.PushMessagesRequest {
	r := &boatpb.PushMessagesRequest{Sid: sid}
	for _, s := range seqs {
		r.Msgs = append(r.Msgs, &msgpb.Message{Seq: s})
	}
	return r
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// gate holds the stream's first frame in SendMsg until opened, so that the
// deliveries made meanwhile queue up behind it.
type gate struct {
	open  chan struct{}
	first atomic.Bool
}

func (g *gate) interceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	return gatedStream{ClientStream: cs, g: g}, err
}

type gatedStream struct {
	grpc.ClientStream
	g *gate
}

func (s gatedStream) SendMsg(m any) error {
	if s.g.first.CompareAndSwap(false, true) {
		<-s.g.open
	}
	return s.ClientStream.SendMsg(m)
}

// wantCalls checks how many Deliver streams and unary calls b has seen.
func (b *testBoat) wantCalls(t *testing.T, streams, unary int64) {
	t.Helper()
	if got := b.streams.Load(); got != streams {
		t.Fatalf("%d streams opened, want %d", got, streams)
	}
	if got := b.unary.Load(); got != unary {
		t.Fatalf("%d unary calls, want %d", got, unary)
	}
}

// waitFirst waits until the gated first frame is in SendMsg.
func (g *gate) waitFirst(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !g.first.Load() {
			return errors.New("first frame not sent yet")
		}
		return nil
	})
}

// waitQueued waits until n deliveries wait to be sent on c's stream.
func (c *Client) waitQueued(t *testing.T, n int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stream.mu.Lock()
		defer c.stream.mu.Unlock()
		if len(c.stream.queue) != n {
			return fmt.Errorf("%d deliveries queued, want %d", len(c.stream.queue), n)
		}
		return nil
	})
}

// TestDeliveriesShareFramesAndGetTheirOwnAnswers: deliveries made while a
// frame is on its way go out together in the next frame, on one stream, and
// each caller gets the answer to its own delivery.
func TestDeliveriesShareFramesAndGetTheirOwnAnswers(t *testing.T) {
	t.Parallel()
	const n = 200
	b := newTestBoat()
	g := &gate{open: make(chan struct{})}
	c := serve(t, b, grpc.WithStreamInterceptor(g.interceptor))
	ctx := ctxFor(t, 30*time.Second)

	errs := make(chan error, n)
	push := func(i int) {
		resp, err := c.PushMessages(ctx, req(fmt.Sprintf("s%d", i), int64(i), int64(1000+i)))
		if err == nil && !slices.Equal(resp.GetAckedSeqs(), []int64{int64(i), int64(1000 + i)}) {
			err = fmt.Errorf("delivery %d answered %v", i, resp.GetAckedSeqs())
		}
		errs <- err
	}
	go push(0)
	g.waitFirst(t)
	for i := 1; i < n; i++ {
		go push(i)
	}
	c.waitQueued(t, n-1)
	close(g.open)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	frames, deliveries := b.received()
	if deliveries != n || len(frames) != 2 || frames[0] != 1 || frames[1] != n-1 {
		t.Fatalf("boat got %d deliveries in frames %v, want %d in [1 %d]", deliveries, frames, n, n-1)
	}
	b.wantCalls(t, 1, 0)
}

// TestFrameBounds: a frame carries at most MaxFrameDeliveries deliveries and
// MaxFrameBytes bytes; a delivery larger than a frame goes as a unary call.
func TestFrameBounds(t *testing.T) {
	t.Parallel()
	b := newTestBoat()
	g := &gate{open: make(chan struct{})}
	c := serve(t, b, grpc.WithStreamInterceptor(g.interceptor))
	ctx := ctxFor(t, 30*time.Second)

	body := func(n int) *anypb.Any {
		a, err := anypb.New(wrapperspb.Bytes([]byte(strings.Repeat("x", n))))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	big := req("s-big", 1)
	big.Msgs[0].Body = body(MaxFrameBytes)
	if resp, err := c.PushMessages(ctx, big); err != nil || !slices.Equal(resp.GetAckedSeqs(), []int64{1}) {
		t.Fatalf("delivery larger than a frame: %v %v", resp, err)
	}
	if got := b.unary.Load(); got != 1 {
		t.Fatalf("%d unary calls for the delivery larger than a frame, want 1", got)
	}

	// Behind the gated first frame: 300 small deliveries and 5 of a third
	// of a frame each.
	const small, third = 300, 5
	errs := make(chan error, 1+small+third)
	go func() { _, err := c.PushMessages(ctx, req("s-first", 1)); errs <- err }()
	g.waitFirst(t)
	for i := range small {
		go func() { _, err := c.PushMessages(ctx, req(fmt.Sprintf("s%d", i), 1)); errs <- err }()
	}
	c.waitQueued(t, small)
	for i := range third {
		r := req(fmt.Sprintf("t%d", i), 1)
		r.Msgs[0].Body = body(MaxFrameBytes / 3)
		go func() { _, err := c.PushMessages(ctx, r); errs <- err }()
	}
	c.waitQueued(t, small+third)
	close(g.open)
	for range 1 + small + third {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	frames, deliveries := b.received()
	// 1 | 256 small | 44 small + 2 thirds | 2 thirds | 1 third
	want := []int{1, MaxFrameDeliveries, small - MaxFrameDeliveries + 2, 2, 1}
	if deliveries != 1+small+third || !slices.Equal(frames, want) {
		t.Fatalf("frames %v (%d deliveries), want %v", frames, deliveries, want)
	}
}

// TestErrorsKeepTheirCodeAndDetail: a refusal crosses the stream with its
// gRPC code and errorpb detail, as a unary call's would, and the delivery's
// deadline reaches the boat as its timeout.
func TestErrorsKeepTheirCodeAndDetail(t *testing.T) {
	t.Parallel()
	b := newTestBoat()
	c := serve(t, b)
	_, err := c.PushMessages(ctxFor(t, 30*time.Second), req("gone", 1))
	if status.Code(err) != codes.NotFound || grpcerr.DetailCode(err) != errorpb.Code_SESSION_NOT_FOUND {
		t.Fatalf("push to a session not held: %v, want NotFound with SESSION_NOT_FOUND", err)
	}
	b.mu.Lock()
	timeouts := slices.Clone(b.timeouts)
	b.mu.Unlock()
	if len(timeouts) != 1 || timeouts[0] <= 25*time.Second || timeouts[0] > 30*time.Second {
		t.Fatalf("timeouts the boat got: %v, want one of the caller's 30s deadline", timeouts)
	}
	b.wantCalls(t, 1, 0)
}

// TestStreamEndFailsWaitingDeliveriesAtOnce: when the stream ends, every
// delivery waiting on it fails Unavailable at once (not at its deadline),
// and the next delivery opens a new stream.
func TestStreamEndFailsWaitingDeliveriesAtOnce(t *testing.T) {
	t.Parallel()
	b := newTestBoat()
	c := serve(t, b)
	ctx := ctxFor(t, time.Minute)
	held := make(chan error, 1)
	go func() { _, err := c.PushMessages(ctx, req("hold", 1)); held <- err }()
	testutil.WaitFor(t, 10*time.Second, func() error {
		if _, n := b.received(); n != 1 {
			return errors.New("the held delivery has not reached the boat")
		}
		return nil
	})
	start := time.Now()
	_, err := c.PushMessages(ctx, req("break", 2))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("delivery on a stream that broke: %v, want Unavailable", err)
	}
	select {
	case err := <-held:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("held delivery when the stream broke: %v, want Unavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("held delivery still waiting 10s after its stream ended")
	}
	t.Logf("waiting deliveries failed %s after the break", time.Since(start))
	if resp, err := c.PushMessages(ctx, req("s1", 3)); err != nil || !slices.Equal(resp.GetAckedSeqs(), []int64{3}) {
		t.Fatalf("delivery after the break: %v %v", resp, err)
	}
	b.wantCalls(t, 2, 0) // one after the break
}

// TestCallerThatGivesUpLeavesTheStreamWorking: a caller whose deadline
// passes gets DeadlineExceeded; the late answer is dropped and the stream
// goes on serving others.
func TestCallerThatGivesUpLeavesTheStreamWorking(t *testing.T) {
	t.Parallel()
	b := newTestBoat()
	c := serve(t, b)
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.PushMessages(short, req("hold", 1)); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("held delivery past its deadline: %v, want DeadlineExceeded", err)
	}
	close(b.release)
	ctx := ctxFor(t, 30*time.Second)
	for i := range 3 {
		if resp, err := c.PushMessages(ctx, req("s1", int64(10+i))); err != nil || !slices.Equal(resp.GetAckedSeqs(), []int64{int64(10 + i)}) {
			t.Fatalf("delivery %d after a caller gave up: %v %v", i, resp, err)
		}
	}
	b.wantCalls(t, 1, 0)
}

// TestBoatWithoutDeliverGetsUnaryCalls: an older boat (no Deliver) gets
// every delivery as a unary call, the first one included, and the client
// stops trying the stream.
func TestBoatWithoutDeliverGetsUnaryCalls(t *testing.T) {
	t.Parallel()
	b := newTestBoat()
	c := serve(t, onlyUnary{b: b})
	ctx := ctxFor(t, 30*time.Second)
	for i := range 3 {
		if resp, err := c.PushMessages(ctx, req("s1", int64(i))); err != nil || !slices.Equal(resp.GetAckedSeqs(), []int64{int64(i)}) {
			t.Fatalf("delivery %d to a boat without Deliver: %v %v", i, resp, err)
		}
	}
	b.wantCalls(t, 0, 3)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.unary || c.stream != nil {
		t.Fatalf("client still tries the stream (unary %v, stream %v)", c.unary, c.stream)
	}
}

// A refusal after the client ACKed part of the messages (ACK_TIMEOUT on a
// replayed page) keeps its code and says which seqs were ACKed: the caller
// must not replay those again.
func TestRefusalCarriesTheSeqsAckedBeforeIt(t *testing.T) {
	t.Parallel()
	b := newTestBoat()
	c := serve(t, b)
	resp, err := c.PushMessages(ctxFor(t, 30*time.Second), req("partial", 1, 2, 3))
	if status.Code(err) != codes.DeadlineExceeded || grpcerr.DetailCode(err) != errorpb.Code_ACK_TIMEOUT {
		t.Fatalf("push ACKed in part: %v, want DeadlineExceeded with ACK_TIMEOUT", err)
	}
	if got := resp.GetAckedSeqs(); !slices.Equal(got, []int64{1}) {
		t.Fatalf("acked %v with the refusal, want [1]", got)
	}
	b.wantCalls(t, 1, 0)
}
