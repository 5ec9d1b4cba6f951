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

// Deliver serves one carrier's stream of deliveries. Each delivery runs as
// its own PushMessages call (they wait for ACKs independently); answers go
// back as they finish, those ready together in one frame. The stream ends
// once the carrier closed its side and every delivery has been answered, or
// at once when the carrier goes (its context ends every delivery).
func (s *internalServer) Deliver(stream boatpb.Boat_DeliverServer) error {
	ctx := stream.Context()
	results := make(chan *boatpb.DeliveryResult, maxResultsPerFrame)
	sent := make(chan error, 1)
	go func() { sent <- sendResults(stream, results) }()

	var (
		wg      sync.WaitGroup
		recvErr error
	)
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
			go func() {
				defer wg.Done()
				results <- s.deliver(ctx, d)
			}()
		}
	}
	wg.Wait()
	close(results)
	if err := <-sent; recvErr == nil {
		recvErr = err
	}
	return recvErr
}

// deliver runs one delivery under its own timeout and trace context.
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
	code, msg, detail := grpcerr.Parts(err)
	if span != nil && err != nil {
		span.SetStatus(otelcodes.Error, msg)
	}
	return &boatpb.DeliveryResult{Id: d.GetId(), AckedSeqs: acked, Code: uint32(code), Message: msg, Error: detail}
}

// sendResults sends the answers in frames of those ready together. After a
// failed Send it keeps draining, so no delivery blocks on a full channel; it
// returns the first Send error once results is closed.
func sendResults(stream boatpb.Boat_DeliverServer, results <-chan *boatpb.DeliveryResult) error {
	var failed error
	for r := range results {
		batch := []*boatpb.DeliveryResult{r}
	gather:
		for len(batch) < maxResultsPerFrame {
			select {
			case r, ok := <-results:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			default:
				break gather
			}
		}
		if failed == nil {
			failed = stream.Send(&boatpb.DeliverResponse{Results: batch})
		}
	}
	return failed
}
