package boat

import (
	"context"
	"errors"
	"io"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/tracing"
	"github.com/gomsg/gomsg/pb/boatpb"
)

// maxResultsPerFrame bounds the answers sent in one DeliverResponse.
const maxResultsPerFrame = 256

// Deliver serves one carrier's stream of deliveries. Each delivery is its
// own push (they wait for ACKs independently); answers go back as they
// finish, those ready together in one frame. The stream ends once the
// carrier closed its side and every delivery has been answered, or at once
// when the carrier goes (its context ends every delivery).
//
// A push waits for its ACKs without a goroutine of its own: whichever
// goroutine finishes it (the session's sender or receiver, the ACK wheel)
// queues its answer. Only a delivery that must wait for its session's
// Connected payload, or that is traced, runs on a goroutine.
func (s *internalServer) Deliver(stream boatpb.Boat_DeliverServer) error {
	ctx := stream.Context()
	results := newResultQueue()
	sent := make(chan error, 1)
	go func() { sent <- results.sendTo(stream) }()

	var (
		wg      sync.WaitGroup
		recvErr error
		pending inflight
	)
	stop := context.AfterFunc(ctx, func() { pending.failAll(ctx.Err()) })
	for {
		req, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				recvErr = err
			}
			break
		}
		s.b.metrics.BoatDeliverFrame.Observe(float64(len(req.GetDeliveries())))
		for _, d := range req.GetDeliveries() {
			wg.Add(1)
			s.start(ctx, d, &pending, func(r *boatpb.DeliveryResult) {
				results.put(r)
				wg.Done()
			})
		}
	}
	wg.Wait()
	stop()
	results.close()
	if err := <-sent; recvErr == nil {
		recvErr = err
	}
	return recvErr
}

// start begins one delivery; answer gets its result once.
func (s *internalServer) start(ctx context.Context, d *boatpb.Delivery, pending *inflight, answer func(*boatpb.DeliveryResult)) {
	if req := d.GetPush(); len(d.GetTrace()) == 0 {
		if err := checkRequest(req); err != nil {
			answer(deliveryResult(d, nil, err))
			return
		}
		p, started := s.b.pushAsync(req.GetSid(), req.GetAckWait().AsDuration(), d.GetTimeout().AsDuration(), req.GetMsgs(), req.GetReplay(),
			func(p *pendingPush, acked []int64, err error) {
				if p != nil {
					pending.remove(p)
				}
				answer(deliveryResult(d, acked, err))
			})
		if started {
			if p != nil {
				pending.add(p)
				if ctx.Err() != nil { // the carrier went while it started
					p.d.fail(ctx.Err())
				}
			}
			return
		}
	}
	go func() { answer(s.deliver(ctx, d)) }()
}

// deliver runs one delivery on the caller's goroutine, under its own
// timeout and trace context.
func (s *internalServer) deliver(ctx context.Context, d *boatpb.Delivery) *boatpb.DeliveryResult {
	if t := d.GetTimeout().AsDuration(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	var span trace.Span
	if len(d.GetTrace()) > 0 { // carrier traces: the delivery is a span of its task
		ctx, span = tracing.Tracer().Start(tracing.Extract(ctx, d.GetTrace()), "boat.deliver",
			trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attribute.String("gomsg.sid", d.GetPush().GetSid())))
		defer span.End()
	}
	acked, err := s.push(ctx, d.GetPush())
	if span != nil && err != nil {
		_, msg, _ := grpcerr.Parts(err)
		span.SetStatus(otelcodes.Error, msg)
	}
	return deliveryResult(d, acked, err)
}

func deliveryResult(d *boatpb.Delivery, acked []int64, err error) *boatpb.DeliveryResult {
	code, msg, detail := grpcerr.Parts(err)
	return &boatpb.DeliveryResult{Id: d.GetId(), AckedSeqs: acked, Code: uint32(code), Message: msg, Error: detail}
}

// inflight are a stream's pushes still waiting, to be failed at once when
// the carrier goes.
type inflight struct {
	mu sync.Mutex
	m  map[*pendingPush]struct{}
}

// add keeps p unless it is already done (its answer may come before add).
func (f *inflight) add(p *pendingPush) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-p.d.done:
		return
	default:
	}
	if f.m == nil {
		f.m = make(map[*pendingPush]struct{})
	}
	f.m[p] = struct{}{}
}

func (f *inflight) remove(p *pendingPush) {
	f.mu.Lock()
	delete(f.m, p)
	f.mu.Unlock()
}

func (f *inflight) failAll(err error) {
	f.mu.Lock()
	all := make([]*pendingPush, 0, len(f.m))
	for p := range f.m {
		all = append(all, p)
	}
	f.mu.Unlock()
	for _, p := range all {
		p.d.fail(err)
	}
}

// resultQueue holds the answers not sent yet. put never blocks: the
// goroutines that finish pushes (a session's receiver, the ACK wheel) must
// not wait for the carrier's stream. It holds at most one answer per
// delivery in flight, which carrier bounds.
type resultQueue struct {
	mu     sync.Mutex
	items  []*boatpb.DeliveryResult
	closed bool
	wake   chan struct{}
}

func newResultQueue() *resultQueue { return &resultQueue{wake: make(chan struct{}, 1)} }

func (q *resultQueue) put(r *boatpb.DeliveryResult) {
	q.mu.Lock()
	q.items = append(q.items, r)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// close says no answer follows; sendTo returns once it sent the rest.
func (q *resultQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns up to maxResultsPerFrame answers, waiting for one; nil once
// the queue is closed and empty.
func (q *resultQueue) take() []*boatpb.DeliveryResult {
	for {
		q.mu.Lock()
		if n := min(len(q.items), maxResultsPerFrame); n > 0 {
			batch := make([]*boatpb.DeliveryResult, n)
			copy(batch, q.items)
			q.items = q.items[:copy(q.items, q.items[n:])]
			q.mu.Unlock()
			return batch
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil
		}
		<-q.wake
	}
}

// sendTo sends the answers in frames of those ready together. After a
// failed Send it keeps taking them, so the queue empties; it returns the
// first Send error once the queue is closed.
func (q *resultQueue) sendTo(stream boatpb.Boat_DeliverServer) error {
	var failed error
	for batch := q.take(); batch != nil; batch = q.take() {
		if failed == nil {
			failed = stream.Send(&boatpb.DeliverResponse{Results: batch})
		}
	}
	return failed
}
