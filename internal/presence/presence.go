// Package presence publishes presence events — a session connected,
// disconnected or was kicked — as gomsg.presence.Event records on a Kafka
// topic keyed by uid, for backends to consume.
//
// Delivery is best effort, never in a device's way: Emit only appends to a
// bounded in-memory buffer, and one sender goroutine writes the buffer to
// Kafka in order, retrying a failed batch (with backoff) until it is written
// or the process stops. While Kafka is down the buffer fills; past its bound
// the newest events are dropped and counted
// (gomsg_presence_dropped_total{reason="overflow"}), and what is still
// buffered when the process stops after its flush grace is dropped too
// (reason "shutdown"); a crash loses the buffer uncounted. A batch whose
// acknowledgement was lost is written again, so an event can arrive twice:
// consumers de-duplicate by (sid, kind).
//
// Order per uid: every record of a uid has the uid as key, so it lands in one
// partition; one sender writes batches one after another, each in buffer
// order; and callers that change a uid's sessions hold Lock for that uid
// from the store's change to Emit, so events enter the buffer in the order
// the store applied the changes.
package presence

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/pb/presencepb"
)

// Publisher is what the emitter needs of the queue: Publish returns once
// Kafka acknowledged every record, or fails.
type Publisher interface {
	Publish(ctx context.Context, recs ...queue.Record) error
}

// Config is the emitter's configuration.
type Config struct {
	// Topic is --presence-topic; empty turns presence events off.
	Topic string
	// Buffer is how many events may wait for Kafka (--presence-buffer).
	Buffer int
	// Batch is how many events one write carries at most.
	Batch int
	// WriteTimeout bounds one write.
	WriteTimeout time.Duration
	// FlushGrace is how long Run keeps writing, once its context ended,
	// what is still buffered.
	FlushGrace time.Duration
	// Retry times the retries of a failed write.
	Retry backoff.Policy
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.Buffer == 0 {
		c.Buffer = 100000
	}
	if c.Batch == 0 {
		c.Batch = 1000
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.FlushGrace == 0 {
		c.FlushGrace = 5 * time.Second
	}
	if c.Retry == (backoff.Policy{}) {
		c.Retry = backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	}
}

// Emitter buffers events and writes them to the topic. A nil *Emitter is
// presence turned off: Lock and Emit do nothing.
type Emitter struct {
	cfg     Config
	q       Publisher
	log     *zap.Logger
	metrics *metrics.Metrics

	locksMu sync.Mutex
	locks   map[string]*uidLock

	mu      sync.Mutex
	pending []pendingEvent
	drops   int // dropped since the buffer last had room
	kick    chan struct{}
}

type pendingEvent struct {
	rec  queue.Record
	kind string
}

// New returns an emitter, or nil when cfg.Topic is empty.
func New(cfg Config, q Publisher, log *zap.Logger, m *metrics.Metrics) *Emitter {
	if cfg.Topic == "" {
		return nil
	}
	cfg.Defaults()
	return &Emitter{cfg: cfg, q: q, log: log.With(zap.String("component", "presence")), metrics: m,
		locks: make(map[string]*uidLock), kick: make(chan struct{}, 1)}
}

// uidLock is one uid's ordering lock: a token in ch is the lock free; refs
// counts holders and waiters, so the entry leaves the map with the last.
type uidLock struct {
	ch   chan struct{}
	refs int
}

// Lock takes the ordering locks of uids, in sorted order (two callers never
// deadlock), and returns their release. Hold it from a change of the uids'
// sessions to the Emit of its events. It gives up, holding nothing, with
// ctx's error when ctx ends first. Only callers for the same uid wait for
// each other.
func (e *Emitter) Lock(ctx context.Context, uids ...string) (unlock func(), err error) {
	if e == nil {
		return func() {}, nil
	}
	uids = slices.Compact(slices.Sorted(slices.Values(uids)))
	held := make([]string, 0, len(uids))
	unlock = func() {
		for _, uid := range slices.Backward(held) {
			e.release(uid)
		}
	}
	for _, uid := range uids {
		l := e.acquire(uid)
		select {
		case <-l.ch:
			held = append(held, uid)
		case <-ctx.Done():
			e.unref(uid)
			unlock()
			return nil, ctx.Err()
		}
	}
	return unlock, nil
}

// acquire returns uid's lock entry, counted as referenced.
func (e *Emitter) acquire(uid string) *uidLock {
	e.locksMu.Lock()
	defer e.locksMu.Unlock()
	l := e.locks[uid]
	if l == nil {
		l = &uidLock{ch: make(chan struct{}, 1)}
		l.ch <- struct{}{}
		e.locks[uid] = l
	}
	l.refs++
	return l
}

// release frees uid's lock, held by the caller.
func (e *Emitter) release(uid string) {
	e.locksMu.Lock()
	e.locks[uid].ch <- struct{}{}
	e.locksMu.Unlock()
	e.unref(uid)
}

// unref drops a reference to uid's lock; the last one removes the entry.
func (e *Emitter) unref(uid string) {
	e.locksMu.Lock()
	defer e.locksMu.Unlock()
	l := e.locks[uid]
	if l.refs--; l.refs == 0 {
		delete(e.locks, uid)
	}
}

// Emit queues events, in order, without waiting; past the buffer's bound
// the rest are dropped and counted.
func (e *Emitter) Emit(events ...*presencepb.Event) {
	if e == nil || len(events) == 0 {
		return
	}
	e.mu.Lock()
	for _, ev := range events {
		if len(e.pending) >= e.cfg.Buffer {
			e.drop("overflow", 1)
			continue
		}
		v, err := proto.Marshal(ev)
		if err != nil { // cannot happen for a valid Event
			e.drop("invalid", 1)
			continue
		}
		e.pending = append(e.pending, pendingEvent{
			rec:  queue.Record{Topic: e.cfg.Topic, Key: ev.GetUid(), Value: v},
			kind: kindLabel(ev.GetKind()),
		})
	}
	e.mu.Unlock()
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Len is how many events wait to be written.
func (e *Emitter) Len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.pending)
}

// drop counts n dropped events and logs the first of a burst. Called with mu
// held.
func (e *Emitter) drop(reason string, n int) {
	if e.drops == 0 && reason == "overflow" {
		e.log.Warn("presence buffer full (Kafka unreachable?); dropping the newest presence events",
			zap.Int("buffer", e.cfg.Buffer))
	}
	if reason == "overflow" {
		e.drops += n
	}
	e.metrics.PresenceDropped.WithLabelValues(reason).Add(float64(n))
}

// Run writes buffered events until ctx ends, then for at most FlushGrace
// what is left; what is still buffered then is dropped and counted.
func (e *Emitter) Run(ctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		if e.Len() == 0 {
			select {
			case <-ctx.Done():
			case <-e.kick:
			}
			continue
		}
		if e.writeBatch(ctx) {
			failures = 0
			continue
		}
		failures++
		backoff.Sleep(ctx, backoff.Jitter(e.cfg.Retry.Exp(failures), 0.5, 1))
	}
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.FlushGrace)
	defer cancel()
	for e.Len() > 0 && flushCtx.Err() == nil {
		if !e.writeBatch(flushCtx) {
			backoff.Sleep(flushCtx, e.cfg.Retry.Min)
		}
	}
	e.mu.Lock()
	if n := len(e.pending); n > 0 {
		e.log.Warn("presence events not written before shutdown", zap.Int("events", n))
		e.drop("shutdown", n)
		e.pending = nil
	}
	e.mu.Unlock()
	return nil
}

// writeBatch writes the oldest events, at most Batch, and removes them from
// the buffer once Kafka acknowledged them; false: the write failed and they
// stay first in line.
func (e *Emitter) writeBatch(ctx context.Context) bool {
	e.mu.Lock()
	batch := slices.Clone(e.pending[:min(len(e.pending), e.cfg.Batch)])
	e.mu.Unlock()
	recs := make([]queue.Record, len(batch))
	for i, p := range batch {
		recs[i] = p.rec
	}
	wctx, cancel := context.WithTimeout(ctx, e.cfg.WriteTimeout)
	err := e.q.Publish(wctx, recs...)
	cancel()
	if errors.Is(err, queue.ErrInvalidRecord) {
		// Never writable (a topic refusing them): retrying would hold up
		// every later event.
		e.log.Error("presence events refused by Kafka; dropping them", zap.Int("events", len(batch)), zap.Error(err))
		e.mu.Lock()
		e.removeFront(len(batch))
		e.drop("invalid", len(batch))
		e.mu.Unlock()
		return true
	}
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("presence events not written; will retry", zap.Int("events", len(batch)), zap.Error(err))
		}
		return false
	}
	e.mu.Lock()
	// Only the sender removes from the front, so the batch is still there.
	e.removeFront(len(batch))
	if e.drops > 0 && len(e.pending) < e.cfg.Buffer {
		e.log.Warn("presence buffer has room again; events were dropped meanwhile", zap.Int("dropped", e.drops))
		e.drops = 0
	}
	e.mu.Unlock()
	for _, p := range batch {
		e.metrics.PresenceEvents.WithLabelValues(p.kind).Inc()
	}
	return true
}

// removeFront drops the n oldest events. Called with mu held.
func (e *Emitter) removeFront(n int) {
	clear(e.pending[:n])
	e.pending = e.pending[n:]
}

func kindLabel(k presencepb.Kind) string {
	switch k {
	case presencepb.Kind_CONNECTED:
		return "connected"
	case presencepb.Kind_DISCONNECTED:
		return "disconnected"
	case presencepb.Kind_KICKED:
		return "kicked"
	}
	return "unspecified"
}
