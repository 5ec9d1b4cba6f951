package carrier

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/tracing"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/mqpb"
)

// broadcastBackoff is the wait between two tries of a broadcast on one boat
// (jittered to [½, 1]): short, because the room's next broadcast waits.
var broadcastBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: time.Second}

// boatResult is what became of a broadcast on one boat.
type boatResult int

const (
	handed  boatResult = iota // the boat queued it for its members
	skipped                   // the boat left etcd meanwhile
	gaveUp                    // the boat kept failing: its members miss it
)

// HandleBroadcast processes one record of the broadcast topic: it hands the
// Broadcast to every boat registered now, in parallel, and returns once each
// boat took it or was given up on. The consumer holds the record's key (the
// room) until then, so the room's next broadcast starts only after this one
// reached every boat: each boat gets a room's broadcasts in record order.
//
// It never returns an error. Broadcasts are at most once: a boat that keeps
// failing after BroadcastAttempts tries is given up on (its members miss the
// broadcast) rather than retried without end, because an error here would
// make the consumer retry the record in place forever, holding the room and
// resending to the boats that already took it.
func (c *Carrier) HandleBroadcast(ctx context.Context, m queue.Message) error {
	var p mqpb.Payload
	if err := proto.Unmarshal(m.Value, &p); err != nil {
		// A record no version of gomsg wrote: retrying cannot help.
		c.log.Error("dropping undecodable broadcast task", zap.Int("partition", m.Partition), zap.Int64("offset", m.Offset),
			zap.Error(err))
		return nil
	}
	b := p.GetBroadcast()
	switch {
	case b == nil:
		c.log.Error("dropping task of another kind on the broadcast topic", zap.Int64("task_seq", p.GetSeq()),
			zap.String("key", m.Key), zap.Int64("offset", m.Offset))
		c.metrics.TasksProcessed.WithLabelValues("unknown", "ok").Inc()
		return nil
	case len(b.GetMsgs()) == 0:
		c.log.Error("dropping broadcast task without messages", zap.Int64("task_seq", p.GetSeq()),
			zap.String("key", m.Key), zap.Int64("offset", m.Offset))
		return nil
	case b.GetRoom() == "" && !b.GetAll():
		c.log.Error("dropping broadcast task to no room", zap.Int64("task_seq", p.GetSeq()),
			zap.String("key", m.Key), zap.Int64("offset", m.Offset))
		return nil
	}
	c.broadcast(tracing.Extract(ctx, m.Headers), &p, b)
	return nil
}

// broadcast hands b to every registered boat in parallel and waits for each:
// one boat slow or failing delays no other boat's call, only the room's next
// broadcast. The wait is bounded: per boat at most BroadcastAttempts calls
// of CallTimeout each, with at most broadcastBackoff.Max between two.
func (c *Carrier) broadcast(ctx context.Context, p *mqpb.Payload, b *mqpb.Broadcast) {
	ctx, span := tracing.Tracer().Start(ctx, "carrier.broadcast", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("gomsg.room", b.GetRoom()), attribute.Bool("gomsg.broadcast_all", b.GetAll()),
			attribute.Int64("gomsg.task_seq", p.GetSeq())))
	defer span.End()
	req := &boatpb.BroadcastRequest{Room: b.GetRoom(), All: b.GetAll(), Platforms: b.GetPlatforms(), Msgs: b.GetMsgs(),
		TaskSeq: p.GetSeq()}
	ids := c.boats.IDs()
	c.failing.keep(ids)
	var failed atomic.Int32
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if c.broadcastTo(ctx, id, req) == gaveUp {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	result := "ok"
	if n := failed.Load(); n > 0 {
		result = "partial"
		span.SetStatus(otelcodes.Error, fmt.Sprintf("%d of %d boats given up on", n, len(ids)))
	}
	c.metrics.TasksProcessed.WithLabelValues("broadcast", result).Inc()
	span.SetAttributes(attribute.String("gomsg.task_kind", "broadcast"), attribute.String("gomsg.result", result),
		attribute.Int("gomsg.boats", len(ids)), attribute.Int("gomsg.boats_failed", int(failed.Load())))
}

// broadcastTo calls one boat until it takes req, it leaves etcd, it answers
// with a code a retry cannot change, or BroadcastAttempts calls failed.
// A call that timed out may have been queued all the same; the retry
// carries the same task seq, and the boat drops it as a repeat.
//
// A boat given up on before, and not heard from since, gets one call and no
// retries: a boat that is down but still registered (until its lease ends)
// costs each broadcast one failed call, not BroadcastAttempts calls and the
// backoff between them, which every room's next broadcast would wait for.
func (c *Carrier) broadcastTo(ctx context.Context, id string, req *boatpb.BroadcastRequest) boatResult {
	seq := req.GetTaskSeq()
	attempts := c.cfg.BroadcastAttempts
	if c.failing.has(id) {
		attempts = 1
	}
	var err error
	attempt := 1
	for ; ; attempt++ {
		var client boatpb.BoatClient
		var found bool
		client, found, err = c.boats.Client(ctx, id)
		if err == nil && !found {
			c.log.Info("broadcast skips a boat gone from etcd", zap.String("boat", id), zap.String("room", req.GetRoom()),
				zap.Int64("task_seq", seq))
			return skipped
		}
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
			_, err = client.Broadcast(cctx, req)
			cancel()
			if err == nil {
				c.metrics.BroadcastBoats.WithLabelValues("ok").Inc()
				c.failing.set(id, false)
				return handed
			}
			if permanentBroadcastErr(err) {
				break
			}
		}
		if attempt >= attempts {
			break
		}
		if !backoff.Sleep(ctx, backoff.Jitter(broadcastBackoff.Exp(attempt), 0.5, 1)) {
			break
		}
	}
	c.log.Error("broadcast given up on a boat: its members miss it", zap.String("boat", id),
		zap.String("room", req.GetRoom()), zap.Bool("all", req.GetAll()), zap.Int64("task_seq", seq),
		zap.Int("attempts", attempt), zap.Error(err))
	c.metrics.BroadcastBoats.WithLabelValues("error").Inc()
	c.failing.set(id, true)
	return gaveUp
}

// failingBoats is the set of boats given up on since they last answered.
type failingBoats struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (f *failingBoats) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[id]
}

func (f *failingBoats) set(id string, failing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case failing && f.ids == nil:
		f.ids = map[string]bool{id: true}
	case failing:
		f.ids[id] = true
	default:
		delete(f.ids, id)
	}
}

// keep forgets the boats not in ids (no longer registered).
func (f *failingBoats) keep(ids []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.ids {
		if !slices.Contains(ids, id) {
			delete(f.ids, id)
		}
	}
}

// permanentBroadcastErr reports a boat's answer that a retry of the same
// request cannot change: a boat without Broadcast (older than carrier), or
// a request it refuses.
func permanentBroadcastErr(err error) bool {
	switch status.Code(err) {
	case codes.Unimplemented, codes.InvalidArgument:
		return true
	}
	return false
}
