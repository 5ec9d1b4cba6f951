package client

import "sync"

// dedup remembers the seqs of the last n messages handed to the handler,
// and whether each was ACKed, in a ring: the oldest is forgotten first.
type dedup struct {
	mu   sync.Mutex
	ring []int64
	next int
	full bool
	// acked says, for every seq in ring, whether the application ACKed it.
	acked map[int64]bool
}

func newDedup(n int) *dedup {
	return &dedup{ring: make([]int64, n), acked: make(map[int64]bool, n)}
}

// seen reports whether seq is remembered, and if so whether it was ACKed.
func (d *dedup) seen(seq int64) (seen, acked bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	acked, seen = d.acked[seq]
	return seen, acked
}

// add remembers seq (ACKed or not), forgetting the oldest seq when full; a
// seq remembered already keeps its ACK.
func (d *dedup) add(seq int64, acked bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addLocked(seq, acked)
}

func (d *dedup) addLocked(seq int64, acked bool) {
	if was, ok := d.acked[seq]; ok {
		d.acked[seq] = was || acked
		return
	}
	if d.full {
		delete(d.acked, d.ring[d.next])
	}
	d.ring[d.next] = seq
	d.acked[seq] = acked
	d.next++
	if d.next == len(d.ring) {
		d.next, d.full = 0, true
	}
}

// ack remembers the seqs as ACKed: an application may ACK a message before
// its handler returned.
func (d *dedup) ack(seqs []int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range seqs {
		d.addLocked(s, true)
	}
}
