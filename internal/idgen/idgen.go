// Package idgen makes unique, time-sortable 64-bit ids (seqs and sids):
// 41 bits of milliseconds since 2024-01-01 UTC, 10 bits of node id and 12 bits
// of a per-millisecond counter. Node ids are leased from etcd (see Claim), so
// two live processes never share one.
package idgen

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

const (
	nodeBits    = 10
	counterBits = 12
	// MaxNode is the largest node id.
	MaxNode    = 1<<nodeBits - 1
	maxCounter = 1<<counterBits - 1
)

// Epoch is the zero of the id's time part.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrBadNode is returned for a node id outside [0, MaxNode].
var ErrBadNode = errors.New("idgen: node id out of range")

// ErrFenced is returned by Next while the generator's claim on its node id
// may have lapsed: past the claim's deadline, or after the claim was ended,
// until a new claim is held. Another process may own the node id by then.
var ErrFenced = errors.New("idgen: node id claim lapsed")

// Generator makes ids for one node. It is safe for concurrent use.
type Generator struct {
	now func() time.Time

	mu      sync.Mutex
	node    int64
	lastMs  int64
	counter int64
	// fenced: ids are made only before deadline, under claim number claim
	// (see Hold). A generator made by New is not fenced.
	fenced   bool
	claim    uint64
	deadline time.Time
}

// New returns a generator for node that is never fenced (tools, tests).
// Processes whose node id is leased from etcd use NewFenced.
func New(node int) (*Generator, error) {
	if node < 0 || node > MaxNode {
		return nil, fmt.Errorf("%w: %d", ErrBadNode, node)
	}
	return &Generator{node: int64(node), now: time.Now}, nil
}

// NewFenced returns a generator that makes no ids until Hold gives it a node
// id and a deadline.
func NewFenced() *Generator {
	return &Generator{now: time.Now, fenced: true}
}

// Hold switches the generator to node, claimed until deadline, and returns
// the claim's number for Extend and Fence. Node and deadline change together:
// no id mixes the old claim with the new one. Ids stay increasing.
func (g *Generator) Hold(node int, deadline time.Time) (uint64, error) {
	if node < 0 || node > MaxNode {
		return 0, fmt.Errorf("%w: %d", ErrBadNode, node)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fenced = true
	g.claim++
	if int64(node) != g.node {
		// A smaller node id in the same millisecond would make a smaller id:
		// the next id starts a millisecond after the last one.
		g.lastMs++
		g.counter = -1
	}
	g.node = int64(node)
	g.deadline = deadline
	return g.claim, nil
}

// Extend moves the deadline of claim forward to deadline. It does nothing
// for a claim that is no longer held or for an earlier deadline.
func (g *Generator) Extend(claim uint64, deadline time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if claim == g.claim && deadline.After(g.deadline) {
		g.deadline = deadline
	}
}

// Fence ends claim now (its lease is known lost): Next fails until Hold.
func (g *Generator) Fence(claim uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if claim == g.claim {
		g.deadline = time.Time{}
	}
}

// Next returns a new id, larger than every id this generator returned before.
// When the clock steps back, ids keep growing from the last millisecond used.
// A fenced generator returns ErrFenced once now reaches the claim's deadline,
// and also for an id whose millisecond would not start before the deadline
// (the clock stepped back, or the counter borrowed ahead): every id it makes
// carries a time before the deadline.
func (g *Generator) Next() (int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if g.fenced && !now.Before(g.deadline) {
		return 0, ErrFenced
	}
	ms := now.Sub(Epoch).Milliseconds()
	if ms < g.lastMs {
		ms = g.lastMs
	}
	counter := g.counter
	if ms == g.lastMs {
		counter++
		if counter > maxCounter {
			// 4096 ids in one millisecond: borrow the next millisecond.
			ms++
			counter = 0
		}
	} else {
		counter = 0
	}
	if g.fenced && !Epoch.Add(time.Duration(ms)*time.Millisecond).Before(g.deadline) {
		return 0, ErrFenced
	}
	g.lastMs, g.counter = ms, counter
	return ms<<(nodeBits+counterBits) | g.node<<counterBits | counter, nil
}

// Time returns the instant encoded in id, at millisecond precision.
func Time(id int64) time.Time {
	return Epoch.Add(time.Duration(id>>(nodeBits+counterBits)) * time.Millisecond)
}
