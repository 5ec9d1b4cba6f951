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

// Generator makes ids for one node. It is safe for concurrent use.
type Generator struct {
	node int64
	now  func() time.Time

	mu      sync.Mutex
	lastMs  int64
	counter int64
}

// New returns a generator for node.
func New(node int) (*Generator, error) {
	if node < 0 || node > MaxNode {
		return nil, fmt.Errorf("%w: %d", ErrBadNode, node)
	}
	return &Generator{node: int64(node), now: time.Now}, nil
}

// Next returns a new id, larger than every id this generator returned before.
// When the clock steps back, ids keep growing from the last millisecond used.
func (g *Generator) Next() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	ms := g.now().Sub(Epoch).Milliseconds()
	if ms < g.lastMs {
		ms = g.lastMs
	}
	if ms == g.lastMs {
		g.counter++
		if g.counter > maxCounter {
			// 4096 ids in one millisecond: borrow the next millisecond.
			ms++
			g.counter = 0
		}
	} else {
		g.counter = 0
	}
	g.lastMs = ms
	return ms<<(nodeBits+counterBits) | g.node<<counterBits | g.counter
}

// SetNode switches the generator to another node id, for a process that lost
// its etcd lease and had to claim a new id. Ids stay increasing.
func (g *Generator) SetNode(node int) error {
	if node < 0 || node > MaxNode {
		return fmt.Errorf("%w: %d", ErrBadNode, node)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.node = int64(node)
	return nil
}

// Time returns the instant encoded in id, at millisecond precision.
func Time(id int64) time.Time {
	return Epoch.Add(time.Duration(id>>(nodeBits+counterBits)) * time.Millisecond)
}
