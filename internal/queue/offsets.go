package queue

import (
	"sort"
	"sync"
)

// offsetTracker records, per partition, which fetched offsets are finished,
// so that the consumer commits only up to the lowest offset not yet finished
// (at-least-once: a crash re-delivers, never skips).
//
// Offsets of one partition are tracked in the order they were fetched, which
// is ascending; they need not be contiguous (compacted topics, transaction
// markers, or a partition that was owned by another consumer for a while).
// After a rebalance the same offsets can be fetched again. An offset below
// the highest one already tracked is then reported as not to be dispatched:
// it is either still being handled here, already finished here, or was
// committed by another group member before this one got the partition.
type offsetTracker struct {
	mu    sync.Mutex
	parts map[int]*partitionOffsets
}

type partitionOffsets struct {
	// pending holds tracked offsets in ascending order; entries before head
	// are finished and only kept until the slice is compacted.
	pending []pendingOffset
	head    int
	// next is one past the highest offset tracked.
	next int64
	// committed is the commit point last reported as committed; it starts
	// at the first offset tracked, which the group had already reached.
	committed int64
}

type pendingOffset struct {
	offset int64
	done   bool
}

func newOffsetTracker() *offsetTracker {
	return &offsetTracker{parts: make(map[int]*partitionOffsets)}
}

// track records that offset of partition was fetched. It returns false when
// the offset was seen before (a re-delivery after a rebalance), in which case
// the message must not be dispatched again.
func (t *offsetTracker) track(partition int, offset int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[partition]
	if p == nil {
		p = &partitionOffsets{next: offset, committed: offset}
		t.parts[partition] = p
	}
	if offset < p.next {
		return false
	}
	p.pending = append(p.pending, pendingOffset{offset: offset})
	p.next = offset + 1
	return true
}

// done records that the message at offset of partition is finished.
func (t *offsetTracker) done(partition int, offset int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.parts[partition]
	if p == nil {
		return
	}
	live := p.pending[p.head:]
	i := sort.Search(len(live), func(i int) bool { return live[i].offset >= offset })
	if i == len(live) || live[i].offset != offset {
		return
	}
	live[i].done = true
	for p.head < len(p.pending) && p.pending[p.head].done {
		p.head++
	}
	if p.head == len(p.pending) {
		p.pending, p.head = p.pending[:0], 0
	} else if p.head > 1024 && p.head > len(p.pending)/2 {
		n := copy(p.pending, p.pending[p.head:])
		p.pending, p.head = p.pending[:n], 0
	}
}

// commitPoint is the offset to commit for p: the lowest unfinished offset,
// or one past the highest tracked when all are finished.
func (p *partitionOffsets) commitPoint() int64 {
	if p.head < len(p.pending) {
		return p.pending[p.head].offset
	}
	return p.next
}

// uncommitted returns, per partition, the commit point where it moved past
// the last committed one.
func (t *offsetTracker) uncommitted() map[int]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[int]int64
	for partition, p := range t.parts {
		if cp := p.commitPoint(); cp > p.committed {
			if out == nil {
				out = make(map[int]int64)
			}
			out[partition] = cp
		}
	}
	return out
}

// committed records that the commit points in points were committed.
func (t *offsetTracker) committed(points map[int]int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for partition, cp := range points {
		if p := t.parts[partition]; p != nil && cp > p.committed {
			p.committed = cp
		}
	}
}

// inFlight reports how many tracked offsets are not finished yet.
func (t *offsetTracker) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, p := range t.parts {
		for _, e := range p.pending[p.head:] {
			if !e.done {
				n++
			}
		}
	}
	return n
}
