// Package batch gathers concurrent single-key look-ups into multi-key
// fetches, so that many callers share one round trip: the session store's
// List sends the HGETALLs of concurrent callers as one Redis pipeline.
package batch

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultMax is the number of keys one fetch carries when New is given none.
const DefaultMax = 128

// Fetch looks up keys together. It returns one value and one error per key,
// in the order of keys; errs may be nil when every key succeeded. It runs
// on the goroutine of one of the callers (the leader) and must not panic:
// the panic would unwind that caller, and the others would wait forever.
type Fetch[K, V any] func(ctx context.Context, keys []K) (vals []V, errs []error)

// Coalescer turns concurrent Do calls into as few fetches as it can without
// delaying any: there is no timer. A call that finds no fetch in flight runs
// one at once, on its own goroutine, so a lone caller pays for its own round
// trip only; calls that arrive while a fetch is in flight queue up and go
// together in the next one, at most max keys per fetch.
//
// There is no goroutine of its own, so it needs no Close: the caller that
// runs a fetch (the leader) hands the lead, when it is done, to the first
// caller still waiting, which runs the next fetch for everything queued
// then, and so on until the queue is empty. Each key is fetched once per Do
// call: equal keys are not merged, so no two callers share a value.
type Coalescer[K, V any] struct {
	fetch Fetch[K, V]
	max   int

	mu      sync.Mutex
	queue   []*call[K, V]
	leading bool // a caller runs fetches; the others queue
}

type call[K, V any] struct {
	ctx  context.Context
	key  K
	done chan struct{} // closed when val and err are set, or lead is

	val V
	err error

	// Guarded by Coalescer.mu.
	lead bool // the caller is to run the next fetch
	gone bool // the caller stopped waiting
}

// New returns a Coalescer that sends at most max keys to one fetch
// (DefaultMax when max <= 0).
func New[K, V any](max int, fetch Fetch[K, V]) *Coalescer[K, V] {
	if max <= 0 {
		max = DefaultMax
	}
	return &Coalescer[K, V]{fetch: fetch, max: max}
}

// Do returns key's value from the next fetch. When ctx ends first it
// returns ctx.Err() at once (the key may still be fetched, and its value is
// dropped), unless the caller is running the fetch itself: then it returns
// when the fetch does, as a lone call without Coalescer would.
func (c *Coalescer[K, V]) Do(ctx context.Context, key K) (V, error) {
	cl := &call[K, V]{ctx: ctx, key: key, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, cl)
	if !c.leading {
		c.leading = true
		c.mu.Unlock()
		return c.runFetch()
	}
	c.mu.Unlock()

	select {
	case <-cl.done:
		if cl.lead {
			return c.runFetch()
		}
		return cl.val, cl.err
	case <-ctx.Done():
		c.mu.Lock()
		cl.gone = true // left out of the next fetch if still queued
		if cl.lead {
			c.handOff() // made leader meanwhile: pass it on
		}
		c.mu.Unlock()
		var zero V
		return zero, ctx.Err()
	}
}

// Queued returns how many calls wait for a fetch that has not started yet
// (callers that are gone left out).
func (c *Coalescer[K, V]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, cl := range c.queue {
		if !cl.gone {
			n++
		}
	}
	return n
}

// runFetch is the leader's turn: it fetches the head of the queue, which
// its own call heads, hands the lead on and returns its own result.
func (c *Coalescer[K, V]) runFetch() (V, error) {
	calls := c.take()
	c.fetchFor(calls)
	return calls[0].val, calls[0].err
}

// take removes up to max waiting calls from the head of the queue, skipping
// those whose callers are gone. The leader's call heads the queue.
func (c *Coalescer[K, V]) take() []*call[K, V] {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := make([]*call[K, V], 0, min(len(c.queue), c.max))
	i := 0
	for ; i < len(c.queue) && len(calls) < c.max; i++ {
		if cl := c.queue[i]; !cl.gone {
			calls = append(calls, cl)
		}
	}
	n := copy(c.queue, c.queue[i:])
	clear(c.queue[n:]) // drop references to the calls taken
	c.queue = c.queue[:n]
	return calls
}

// handOff makes the first caller still waiting the leader, or ends the lead
// when nobody waits. c.mu must be held.
func (c *Coalescer[K, V]) handOff() {
	for len(c.queue) > 0 && c.queue[0].gone {
		c.queue[0] = nil
		c.queue = c.queue[1:]
	}
	if len(c.queue) == 0 {
		c.queue = nil
		c.leading = false
		return
	}
	next := c.queue[0]
	next.lead = true
	close(next.done)
}

// fetchFor runs one fetch for calls, hands the lead on and hands each
// caller its result. calls[0] is the leader's own, which waits on no
// channel (its done may be closed already: that made it the leader).
func (c *Coalescer[K, V]) fetchFor(calls []*call[K, V]) {
	keys := make([]K, len(calls))
	for i, cl := range calls {
		keys[i] = cl.key
	}
	ctx, cancel := fetchContext(calls)
	vals, errs := c.fetch(ctx, keys)
	cancel()
	c.mu.Lock()
	c.handOff() // the next fetch goes while this one's results are handed out
	c.mu.Unlock()
	if len(vals) != len(keys) || errs != nil && len(errs) != len(keys) {
		err := fmt.Errorf("batch: fetch returned %d values and %d errors for %d keys", len(vals), len(errs), len(keys))
		for _, cl := range calls {
			cl.err = err
		}
	} else {
		for i, cl := range calls {
			cl.val = vals[i]
			if errs != nil {
				cl.err = errs[i]
			}
		}
	}
	for _, cl := range calls[1:] {
		close(cl.done)
	}
}

// fetchContext is the context of one fetch. It is not cancelled when one of
// its callers goes: the others still wait. It carries the first caller's
// values (a trace, say) and, when every caller has a deadline, ends at the
// latest of them, when nobody waits any more; otherwise only the fetch's own
// timeouts (the Redis client's) bound it.
func fetchContext[K, V any](calls []*call[K, V]) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(calls[0].ctx)
	var latest time.Time
	for _, cl := range calls {
		d, ok := cl.ctx.Deadline()
		if !ok {
			return ctx, func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(ctx, latest)
}
