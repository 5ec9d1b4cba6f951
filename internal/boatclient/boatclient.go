// Package boatclient is the client carrier holds for each boat. Its
// PushMessages does not make a call per delivery: deliveries from every
// carrier worker share one long-lived Deliver stream per boat connection,
// those queued together going out in one frame, and the boat answers by id,
// batching its answers too (goim's comet push carries batches the same way).
// Kickout and FinishReplay are plain calls. A boat that does not serve
// Deliver (an older gomsg) gets unary PushMessages calls.
package boatclient

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/tracing"
	"github.com/gomsg/gomsg/pb/boatpb"
)

// Frame bounds: a frame carries at most MaxFrameDeliveries deliveries and
// MaxFrameBytes bytes of them. A delivery larger than MaxFrameBytes on its
// own goes as a unary call, so a frame stays well inside any boat's
// --grpc-max-recv-bytes that can take the push at all.
const (
	MaxFrameDeliveries = 256
	MaxFrameBytes      = 256 << 10
)

// Client is a boat's client. Its zero value is not usable; see New.
type Client struct {
	boatpb.BoatClient // unary calls

	mu     sync.Mutex
	stream *stream // nil until first used, and after it ended
	unary  bool    // the boat does not serve Deliver
}

// New returns a client on cc.
func New(cc grpc.ClientConnInterface) *Client {
	return &Client{BoatClient: boatpb.NewBoatClient(cc)}
}

// PushMessages sends req on the boat's Deliver stream and waits for its
// answer, or for ctx. Its deadline goes to the boat as the delivery's
// timeout, as a unary call's would. Call options apply only to unary calls.
// Unlike a unary call, a boat's refusal comes with a response too: the
// seqs the client ACKed before the failure (none on a unary call, whose
// refusal carries no response).
func (c *Client) PushMessages(ctx context.Context, req *boatpb.PushMessagesRequest, opts ...grpc.CallOption) (*boatpb.PushMessagesResponse, error) {
	d := &boatpb.Delivery{Push: req}
	if dl, ok := ctx.Deadline(); ok {
		d.Timeout = durationpb.New(time.Until(dl))
	}
	if tracing.Enabled() {
		d.Trace = make(map[string]string)
		tracing.Inject(ctx, d.Trace)
	}
	size := proto.Size(d)
	s := c.current()
	if s == nil || size > MaxFrameBytes {
		return c.BoatClient.PushMessages(ctx, req, opts...)
	}
	resp, err := s.push(ctx, d, size)
	if errors.Is(err, errNotSent) {
		// The boat never saw it (an older boat, or the stream ended before
		// it went out): a unary call is a first attempt, not a repeat.
		return c.BoatClient.PushMessages(ctx, req, opts...)
	}
	return resp, err
}

// current returns the open stream, opening one if there is none; nil when
// the boat takes unary calls only.
func (c *Client) current() *stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unary {
		return nil
	}
	if c.stream == nil {
		c.stream = newStream(c)
	}
	return c.stream
}

// ended forgets s once it has ended, so the next delivery opens a new one.
func (c *Client) ended(s *stream, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stream == s {
		c.stream = nil
	}
	if status.Code(err) == codes.Unimplemented {
		c.unary = true
	}
}

// errNotSent fails a delivery that never reached the boat: the stream ended
// before it went out, or the boat does not serve Deliver.
var errNotSent = errors.New("delivery not sent")

// stream is one Deliver stream and the deliveries waiting on it.
type stream struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}

	mu      sync.Mutex
	nextID  uint64
	queue   []queued                               // not yet sent
	pending map[uint64]chan *boatpb.DeliveryResult // sent or queued, not answered
	err     error                                  // why the stream ended
}

type queued struct {
	d    *boatpb.Delivery
	size int
}

func newStream(c *Client) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{c: c, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1),
		pending: make(map[uint64]chan *boatpb.DeliveryResult)}
	go s.run()
	return s
}

// push queues d and waits for its answer.
func (s *stream) push(ctx context.Context, d *boatpb.Delivery, size int) (*boatpb.PushMessagesResponse, error) {
	answer := make(chan *boatpb.DeliveryResult, 1)
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil, errNotSent // it ended between current and here
	}
	s.nextID++
	d.Id = s.nextID
	s.pending[d.Id] = answer
	s.queue = append(s.queue, queued{d: d, size: size})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}

	select {
	case r := <-answer:
		if r.GetCode() == uint32(codes.OK) {
			return &boatpb.PushMessagesResponse{AckedSeqs: r.GetAckedSeqs()}, nil
		}
		if r.GetId() == 0 { // the stream's end, not the boat's answer
			if r.GetCode() == uint32(codes.Unimplemented) {
				return nil, errNotSent
			}
			return nil, grpcerr.FromParts(codes.Code(r.GetCode()), r.GetMessage(), r.GetError())
		}
		// The boat's refusal still says which messages the client ACKed
		// before it (a replayed page ACKed in part, then ACK_TIMEOUT): the
		// caller deletes those from the offline store, not replays them again.
		return &boatpb.PushMessagesResponse{AckedSeqs: r.GetAckedSeqs()},
			grpcerr.FromParts(codes.Code(r.GetCode()), r.GetMessage(), r.GetError())
	case <-ctx.Done():
		// The boat may still work on it, bounded by the timeout it got.
		s.mu.Lock()
		delete(s.pending, d.Id)
		s.mu.Unlock()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// run opens the stream and sends what is queued, in frames, until the
// stream ends.
func (s *stream) run() {
	cs, err := s.c.BoatClient.Deliver(s.ctx)
	if err != nil {
		s.end(err)
		return
	}
	go s.receive(cs)
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		}
		for {
			frame := s.take()
			if len(frame) == 0 {
				break
			}
			if err := cs.Send(&boatpb.DeliverRequest{Deliveries: frame}); err != nil {
				// io.EOF: the stream ended and receive learns why.
				if !errors.Is(err, io.EOF) {
					s.end(err)
				}
				return
			}
		}
	}
}

// take removes one frame's worth of queued deliveries, leaving out those
// whose callers gave up.
func (s *stream) take() []*boatpb.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	var frame []*boatpb.Delivery
	bytes, n := 0, 0
	for _, q := range s.queue {
		if len(frame) == MaxFrameDeliveries || (len(frame) > 0 && bytes+q.size > MaxFrameBytes) {
			break
		}
		n++
		if _, waiting := s.pending[q.d.Id]; !waiting {
			continue
		}
		frame = append(frame, q.d)
		bytes += q.size
	}
	if n == len(s.queue) {
		// All taken: the next deliveries reuse the array rather than grow a
		// new one. The frame holds its own copies of the pointers.
		clear(s.queue)
		s.queue = s.queue[:0]
	} else {
		s.queue = s.queue[n:]
	}
	return frame
}

// receive hands each answer to its caller until the stream ends.
func (s *stream) receive(cs boatpb.Boat_DeliverClient) {
	for {
		resp, err := cs.Recv()
		if err != nil {
			s.end(err)
			return
		}
		s.mu.Lock()
		for _, r := range resp.GetResults() {
			if answer, ok := s.pending[r.GetId()]; ok {
				delete(s.pending, r.GetId())
				answer <- r
			}
		}
		s.mu.Unlock()
	}
}

// end closes the stream and fails every delivery not answered: Unavailable
// (the boat may or may not have delivered them), as a broken unary call
// would.
func (s *stream) end(err error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	st := status.Convert(err)
	if st.Code() != codes.Unimplemented {
		st = status.Newf(codes.Unavailable, "boat delivery stream ended: %v", st.Message())
	}
	s.err = st.Err()
	failed := s.pending
	s.pending, s.queue = nil, nil
	s.mu.Unlock()
	s.cancel()
	s.c.ended(s, err)
	r := &boatpb.DeliveryResult{Code: uint32(st.Code()), Message: st.Message()}
	for _, answer := range failed {
		answer <- r
	}
}
