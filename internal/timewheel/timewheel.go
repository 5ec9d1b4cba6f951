// Package timewheel is a hashed timing wheel: the boat service uses it to time
// out messages that wait for a client ACK.
//
// The wheel is a ring of slots, each an intrusive doubly linked list of
// entries. A cursor moves one slot per tick; every entry in the slot it lands
// on either has rounds left (the deadline is more than one turn away), which
// are counted down, or is due and fires. Adding and stopping an entry are O(1)
// under one mutex, one goroutine (Run) and one ticker serve every entry, and an
// outstanding entry costs one small heap object, not a goroutine or a timer.
//
// Resolution is one tick: an entry added with a delay of n ticks fires on the
// n-th tick after Add, so its real delay lies in ((n-1)*tick, n*tick].
package timewheel

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// maxKeptDue caps the callback buffer advance keeps between ticks, so one
// burst of expiries does not pin a large slice for the life of the wheel.
const maxKeptDue = 1024

// Wheel fires callbacks for entries whose deadline passed, at tick resolution.
// Add, Stop and Len are safe for concurrent use with each other and with Run.
type Wheel struct {
	tick    time.Duration
	running atomic.Bool

	mu    sync.Mutex
	slots []Timer // list heads (sentinels); slots[i].next is the oldest entry
	pos   int     // slot of the current tick; an entry due in n ticks goes to pos+n
	n     int     // outstanding entries
	due   []func()
}

// Timer is the handle of one scheduled entry.
type Timer struct {
	w          *Wheel
	prev, next *Timer // nil when the entry is not pending (fired, stopped or a sentinel's self-loop)
	fn         func()
	rounds     int // full turns of the wheel left before the entry is due
}

// New makes a wheel with the given tick and number of slots. Deadlines farther
// than tick*slots away are handled by rounds (a per-entry remaining-rounds
// counter), so any duration works. It panics if tick or slots is not positive.
func New(tick time.Duration, slots int) *Wheel {
	if tick <= 0 {
		panic("timewheel: non-positive tick")
	}
	if slots <= 0 {
		panic("timewheel: non-positive number of slots")
	}
	w := &Wheel{tick: tick, slots: make([]Timer, slots)}
	for i := range w.slots {
		s := &w.slots[i]
		s.prev, s.next = s, s
	}
	return w
}

// Run advances the wheel every tick until ctx is done; it owns the only
// ticker. Expired callbacks run on Run's goroutine outside the wheel's lock, so
// a callback may call Add or Stop; a slow callback delays the wheel, which then
// catches up on the ticks it missed. Run panics if it is already running.
func (w *Wheel) Run(ctx context.Context) {
	if !w.running.CompareAndSwap(false, true) {
		panic("timewheel: Run called while already running")
	}
	defer w.running.Store(false)

	start := time.Now()
	t := time.NewTicker(w.tick)
	defer t.Stop()
	var done int64 // ticks advanced since start
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// The ticker drops ticks when the receiver is late (a slow callback,
			// a long pause); count ticks from the monotonic clock instead so
			// deadlines do not drift.
			for elapsed := int64(time.Since(start) / w.tick); done < elapsed; done++ {
				w.advance()
			}
		}
	}
}

// Add schedules fn to run once after d, rounded up to the next tick; d <= 0
// fires at the next tick. The returned handle removes the entry. Entries due at
// the same tick fire in the order they were added. Add panics if fn is nil.
func (w *Wheel) Add(d time.Duration, fn func()) *Timer {
	if fn == nil {
		panic("timewheel: nil func")
	}
	n := int64(1)
	if d > 0 {
		n = int64(d / w.tick)
		if d%w.tick != 0 {
			n++
		}
	}
	t := &Timer{w: w, fn: fn}
	size := int64(len(w.slots))
	t.rounds = int((n - 1) / size)

	w.mu.Lock()
	s := &w.slots[(int64(w.pos)+n%size)%size]
	t.prev, t.next = s.prev, s
	s.prev.next = t
	s.prev = t
	w.n++
	w.mu.Unlock()
	return t
}

// Stop removes the entry; it reports whether it was still pending (false if it
// already fired or was stopped). When Stop races with the entry becoming due,
// exactly one of two things happens: Stop returns true and fn never runs, or
// fn runs (or is about to) and Stop returns false.
func (t *Timer) Stop() bool {
	if t == nil {
		return false
	}
	w := t.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.next == nil {
		return false
	}
	w.unlink(t)
	return true
}

// Len reports outstanding entries.
func (w *Wheel) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// unlink takes a pending t out of its slot. w.mu must be held.
func (w *Wheel) unlink(t *Timer) {
	t.prev.next = t.next
	t.next.prev = t.prev
	t.prev, t.next = nil, nil
	t.fn = nil // a handle kept after the entry is done does not pin the closure
	w.n--
}

// advance moves the wheel one tick and runs the callbacks that became due, in
// order, after releasing the lock. Run calls it; tests call it directly in
// place of Run to move time deterministically.
func (w *Wheel) advance() {
	w.mu.Lock()
	w.pos++
	if w.pos == len(w.slots) {
		w.pos = 0
	}
	due := w.due[:0]
	w.due = nil // a concurrent advance (tests only) allocates its own buffer
	s := &w.slots[w.pos]
	for t := s.next; t != s; {
		next := t.next
		if t.rounds > 0 {
			t.rounds--
		} else {
			due = append(due, t.fn)
			w.unlink(t)
		}
		t = next
	}
	w.mu.Unlock()

	for i, fn := range due {
		due[i] = nil
		fn()
	}

	if cap(due) <= maxKeptDue {
		w.mu.Lock()
		if cap(due) > cap(w.due) {
			w.due = due[:0]
		}
		w.mu.Unlock()
	}
}
