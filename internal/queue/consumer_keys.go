package queue

import (
	"context"
	"sync"
)

// keyQueue holds the records of one key of one partition, in offset order.
// While one of them is being handled the key is running and not ready: a key
// occupies at most one worker, and its next record starts only after the
// previous one finished.
type keyQueue struct {
	p       *partition
	key     string
	msgs    []pending
	running bool
}

type pending struct {
	m    Message
	size int64
}

// keyPool is the set of key queues of every partition this member holds,
// served by the consumer's workers in the order keys became ready.
type keyPool struct {
	mu     sync.Mutex
	cond   *sync.Cond
	ready  []*keyQueue // keys with a record to start and none running
	head   int
	closed bool
	// records and bytes buffered over all partitions.
	records int
	bytes   int64
	// spawn starts one more worker; live counts the workers running (those
	// released included); released counts the handlers running that gave
	// their worker back (Release), at most maxReleased.
	spawn       func()
	live        int
	released    int
	maxReleased int
	// spares are workers whose released handler finished, parked for the
	// next Release to take instead of starting a goroutine (at most
	// maxSpares); woken counts those told to go and not yet gone.
	// A fresh goroutine's stack grows, copied, while it decodes its first
	// records: with a Release per message that asks for an ACK, a tenth of
	// carrier's CPU at saturation.
	spares, woken, maxSpares int
	spareCond                *sync.Cond
	// Releases that handed a worker back, and those of them that started
	// a goroutine for want of a spare.
	handedBack, fresh int
	// resumed counts released handlers that took a place to go on (Resume),
	// at most maxResumed; the others wait on resumeCond.
	resumed, maxResumed int
	resumeCond          *sync.Cond
	resumeWaiting       int    // released handlers waiting in Resume now
	onResumeWait        func() // ConsumerConfig.OnResumeWait
}

// slot is one handler's hold on its worker.
type slot struct {
	kp       *keyPool
	released bool // guarded by kp.mu
	resumed  bool // guarded by kp.mu
	// waiting counts the handler's goroutines waiting in Resume (a
	// handler may deliver to several sessions at once); guarded by kp.mu.
	waiting int
}

type slotKey struct{}

// lockSlot returns the slot of the handler running with ctx with its pool's
// lock held, or nil (and no lock) outside a consumer's handler.
func lockSlot(ctx context.Context) *slot {
	sl, _ := ctx.Value(slotKey{}).(*slot)
	if sl != nil {
		sl.kp.mu.Lock()
	}
	return sl
}

// Release tells the consumer that the handler running with ctx is about to
// wait for something that takes no CPU (carrier: a client's ACK): its worker
// is handed back, so that other keys go on while it waits, and the goroutine
// ends once the handler returns. The handler's key stays held until then, so
// order per key is kept, and its record counts against its partition's
// bounds as before. Beyond ConsumerConfig.MaxReleased such handlers at once,
// or outside a consumer's handler, Release does nothing. Calling it again
// does nothing.
func Release(ctx context.Context) {
	sl := lockSlot(ctx)
	if sl == nil {
		return
	}
	kp := sl.kp
	defer kp.mu.Unlock()
	if sl.released || kp.closed || kp.released >= kp.maxReleased || kp.spawn == nil {
		return
	}
	sl.released = true
	kp.released++
	kp.handedBack++
	if kp.spares > kp.woken { // the worker it was
		kp.woken++
		kp.spareCond.Signal()
		return
	}
	kp.fresh++
	kp.spawn()
}

// Resume tells the consumer that the released handler running with ctx is
// done waiting and goes on with work that costs CPU and backend calls
// (carrier: storing the messages a failed delivery could not hand over).
// It waits until fewer than ConsumerConfig.MaxResumed such handlers go on,
// and the place is held until the handler returns. Released handlers end
// their waits together when what they waited on fails at once (a boat's
// delivery stream ends with a thousand deliveries waiting for ACKs): without
// a bound they would all run at once, and every other key's next record
// would wait behind them for a core and a Redis connection. The places free
// as resumed handlers return, whatever they wait on; a closing pool, or the
// end of the handler's context, lets a waiter go (past the bound, until its
// handler returns). A handler's goroutines may call it at once: the first to
// get a place takes it for the handler, and the others go on with it. For a
// handler that was not released, or that already resumed, it does nothing.
func Resume(ctx context.Context) {
	sl := lockSlot(ctx)
	if sl == nil {
		return
	}
	kp := sl.kp
	defer kp.mu.Unlock()
	if !sl.released || sl.resumed {
		return
	}
	if kp.resumed >= kp.maxResumed {
		if kp.onResumeWait != nil {
			kp.onResumeWait()
		}
		kp.resumeWaiting++
		sl.waiting++
		// A handler whose context ends (its partition revoked, and the
		// drain timeout over) stops waiting and goes on, failing fast.
		stop := context.AfterFunc(ctx, func() {
			kp.mu.Lock()
			kp.resumeCond.Broadcast()
			kp.mu.Unlock()
		})
		for !sl.resumed && kp.resumed >= kp.maxResumed && !kp.closed && ctx.Err() == nil {
			kp.resumeCond.Wait()
		}
		stop()
		sl.waiting--
		kp.resumeWaiting--
		if sl.resumed {
			return // another goroutine of the handler took its place
		}
	}
	sl.resumed = true
	kp.resumed++
	if sl.waiting > 0 {
		// The handler's other goroutines waiting here go on in this place:
		// the handler, which waits for them, holds it until it returns.
		kp.resumeCond.Broadcast()
	}
}

func newKeyPool() *keyPool {
	p := &keyPool{}
	p.cond = sync.NewCond(&p.mu)
	p.spareCond = sync.NewCond(&p.mu)
	p.resumeCond = sync.NewCond(&p.mu)
	return p
}

// add queues m behind the other records of its key if p has room for it:
// fewer than maxRecords records and m's bytes within maxBytes (or nothing
// else buffered). It reports whether m was queued.
func (kp *keyPool) add(c *Consumer, p *partition, m Message, maxRecords int, maxBytes int64) bool {
	n := size(m)
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if p.revoked || p.buffered >= maxRecords || (p.buffered > 0 && p.bytes+n > maxBytes) {
		return false
	}
	if !p.offsets.track(p.id, m.Offset) {
		return true // already here or already handled: not again
	}
	q := p.keys[m.Key]
	if q == nil {
		q = &keyQueue{p: p, key: m.Key}
		p.keys[m.Key] = q
	}
	q.msgs = append(q.msgs, pending{m: m, size: n})
	if len(q.msgs) == 1 && !q.running {
		kp.push(q)
	}
	p.buffered++
	p.bytes += n
	kp.records++
	kp.bytes += n
	peak(&c.peakRecords, int64(p.buffered))
	peak(&c.peakBytes, p.bytes)
	return true
}

func peak(v interface {
	Load() int64
	CompareAndSwap(old, new int64) bool
}, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

func (kp *keyPool) push(q *keyQueue) {
	kp.ready = append(kp.ready, q)
	kp.cond.Signal()
}

// compact reclaims the ready queue's served entries. Under a sustained
// backlog the queue is never empty, as a key goes back at its end as soon
// as its record finishes: without this the array would grow by one entry
// per record handled (200,000 records of two keys: an array of over
// 200,000). Once the served entries are at least as many as the waiting
// ones, the waiting ones move to the front: each entry is moved at most
// once per entry served, and the array stays within about twice (four
// times, with append's growth) the keys ready.
func (kp *keyPool) compact() {
	live := len(kp.ready) - kp.head
	if kp.head < live {
		return
	}
	n := copy(kp.ready, kp.ready[kp.head:])
	clear(kp.ready[n:])
	kp.ready, kp.head = kp.ready[:n], 0
}

// work serves ready keys until the pool is closed: it starts the first
// record of a ready key, and when that finished, puts the key back at the
// end of the ready queue if it has more.
func (kp *keyPool) work(c *Consumer) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	kp.live++
	defer func() { kp.live-- }()
	for {
		for kp.head == len(kp.ready) && !kp.closed {
			kp.cond.Wait()
		}
		if kp.head == len(kp.ready) {
			return
		}
		q := kp.ready[kp.head]
		kp.ready[kp.head] = nil
		kp.head++
		kp.compact()
		if len(q.msgs) == 0 {
			continue // its partition was revoked
		}
		next := q.msgs[0]
		q.msgs = q.msgs[1:]
		q.running = true
		p := q.p
		p.running++

		sl := &slot{kp: kp}
		kp.mu.Unlock()
		ok := c.handle(p, next.m, sl)
		kp.mu.Lock()

		q.running = false
		p.running--
		p.buffered--
		p.bytes -= next.size
		kp.records--
		kp.bytes -= next.size
		if ok {
			// The offset is finished only now, so a commit never passes a
			// record still being handled.
			p.offsets.done(p.id, next.m.Offset)
		}
		switch {
		case !ok || p.revoked:
			// Not done, or the partition is going: what is left of the key
			// stays uncommitted for the next owner.
			kp.drop(p, q)
		case len(q.msgs) > 0:
			kp.push(q)
		default:
			delete(p.keys, q.key)
		}
		p.signal()
		if sl.resumed {
			kp.resumed--
			kp.resumeCond.Signal()
		}
		if sl.released {
			// Another worker took this one's place when it was released:
			// this one waits to take the place of the next one released.
			kp.released--
			if !kp.spare() {
				return
			}
		}
	}
}

// drop removes q's records that did not start; kp.mu is held.
func (kp *keyPool) drop(p *partition, q *keyQueue) {
	for _, r := range q.msgs {
		p.buffered--
		p.bytes -= r.size
		kp.records--
		kp.bytes -= r.size
	}
	q.msgs = nil
	if !q.running {
		delete(p.keys, q.key)
	}
}

// revoke stops p: records not started are dropped, and nothing more is
// queued. Running handlers go on; waitIdle waits for them.
func (kp *keyPool) revoke(p *partition) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	p.revoked = true
	p.stopNow()
	for _, q := range p.keys {
		kp.drop(p, q)
	}
}

// waitIdle returns once no handler of p is running.
func (kp *keyPool) waitIdle(p *partition) {
	for {
		kp.mu.Lock()
		idle := p.running == 0
		kp.mu.Unlock()
		if idle {
			return
		}
		<-p.room
	}
}

// waitRoom waits until p holds fewer than maxRecords records and maxBytes
// bytes and returns the bytes left; false once ctx is done.
func (kp *keyPool) waitRoom(ctx context.Context, p *partition, maxRecords int, maxBytes int64) (int64, bool) {
	for {
		kp.mu.Lock()
		free := p.buffered < maxRecords && p.bytes < maxBytes
		room := maxBytes - p.bytes
		kp.mu.Unlock()
		if free {
			return room, ctx.Err() == nil
		}
		select {
		case <-ctx.Done():
			return 0, false
		case <-p.room:
		}
	}
}

func (kp *keyPool) buffered() (records, bytes int64) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	return int64(kp.records), kp.bytes
}

func (kp *keyPool) waitingToResume() int64 {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	return int64(kp.resumeWaiting)
}

// close makes the workers return once the ready keys are served.
func (kp *keyPool) close() {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	kp.closed = true
	kp.cond.Broadcast()
	kp.spareCond.Broadcast()
	kp.resumeCond.Broadcast()
}

// spare parks the calling worker until a Release wakes it to serve again;
// false means it should end (the pool has spares enough, or closed).
// Spares already woken and not yet gone do not count: they serve now.
// kp.mu is held.
func (kp *keyPool) spare() bool {
	if kp.closed || kp.spares-kp.woken >= kp.maxSpares {
		return false
	}
	kp.spares++
	for kp.woken == 0 && !kp.closed {
		kp.spareCond.Wait()
	}
	kp.spares--
	if kp.woken == 0 { // closed
		return false
	}
	kp.woken--
	return true
}
