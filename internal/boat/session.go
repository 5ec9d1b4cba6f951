package boat

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/pb/msgpb"
)

var (
	// ErrSessionGone means the session ended before the messages were
	// delivered (and ACKed where asked).
	ErrSessionGone = errors.New("session ended")
	// ErrAckTimeout means the client did not ACK within ack_wait.
	ErrAckTimeout = errors.New("client did not ack in time")
	// ErrNotReady means a live message reached a session whose offline
	// replay has not finished.
	ErrNotReady = errors.New("session offline replay not finished")
	// ErrSlowConsumer means the session's send queue was full (in
	// payloads or in bytes).
	ErrSlowConsumer = errors.New("session send queue full")
)

// outgoing is one payload on a session's send queue, or (frame set) one
// already marshalled; sent (may be nil) learns whether it reached the
// stream.
type outgoing struct {
	payload *msgpb.ServerPayload
	frame   *encodedFrame
	sent    *delivery
	size    int64 // its encoded bytes, counted against the queue's byte bound
}

// encodedSize is what o takes on the wire (and, about, in memory).
func (o *outgoing) encodedSize() int64 {
	if o.frame != nil {
		return int64(len(o.frame.b))
	}
	return int64(proto.Size(o.payload))
}

// session is one client stream. The stream's receive goroutine handles ACKs
// and pings; its send goroutine is the only one that sends.
type session struct {
	sid      string
	uid      string
	platform string
	// roomPatterns are the rooms the session's token allows it to join.
	roomPatterns []string

	roomsMu     sync.Mutex
	rooms       map[string]struct{} // the rooms it is in
	roomsClosed bool                // it left every room for good (ended or kicked)

	// sendq holds what waits for the sender. It exists only while a
	// sender runs: the first enqueue makes it and the sender drops it when
	// it stops idle, so an idle session holds no queue (its sendqCap slots
	// of 32 bytes were 2 KB of every idle session's memory). Both happen
	// under mu, never while a sender reads it.
	sendq    chan outgoing
	sendqCap int
	// maxQueued bounds the bytes on sendq (--send-queue-bytes; 0: no
	// bound); queued counts them. An empty queue takes one payload of any
	// size, so a large message is never refused for its size alone.
	maxQueued int64
	queued    atomic.Int64
	connected chan struct{} // closed once the Connected payload is queued
	kicked    chan struct{} // closed on kickout
	done      chan struct{} // closed when the stream has ended
	sendEnded chan struct{} // closed when the sender stopped for good (the session ended, was kicked, or Send failed)

	// startSender, set by the stream's handler, starts a sender goroutine.
	// One runs only while there is something to send: an idle session has
	// none (its stack is most of what a goroutine costs an idle session).
	startSender func()
	sendEndOnce sync.Once

	ready       atomic.Bool // the offline replay is done; live messages may flow
	registering atomic.Bool // a device registration is in flight
	// pullOffline: the device pulls its offline messages (pull mode), so
	// live messages flow before carrier's FinishReplay.
	pullOffline bool
	pulling     atomic.Bool // a Pull is in flight
	// requests is the bucket of the session's Pull, RegisterDevice and room
	// requests (see allowRequest); made on the first, used by the receive
	// goroutine only.
	requests *rate.Limiter

	kickOnce   sync.Once
	kickReason msgpb.KickoutReason
	doneOnce   sync.Once

	mu      sync.Mutex
	pending map[int64]waiters // seq → deliveries waiting for its ACK
	closed  bool              // finished: the stream has ended
	ending  bool              // kicked: the stream is ending
	sending bool              // a sender goroutine runs

	// raceHook, set only by tests, runs in enqueue between the check that
	// the session takes payloads and the send to its queue.
	raceHook func()
	// idleHook, set only by tests, runs in the sender when it found the
	// queue empty, before it decides to stop.
	idleHook func()
}

func newSession(sid string, queue int) *session {
	return &session{
		sid:       sid,
		sendqCap:  queue,
		connected: make(chan struct{}),
		kicked:    make(chan struct{}),
		done:      make(chan struct{}),
		sendEnded: make(chan struct{}),
		pending:   make(map[int64]waiters),
	}
}

// enqueue puts p on the send queue without blocking; a full queue is the
// caller's to handle (the session is a slow consumer). Once the session was
// kicked or has ended nothing is queued: the check and the send happen under
// mu, which kick and finish take before they empty the queue, so no payload
// lands in a queue nobody will drain (its PushMessages would wait for its
// deadline).
func (s *session) enqueue(o outgoing) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enqueueLocked(o)
}

// enqueueLocked is enqueue with s.mu held.
func (s *session) enqueueLocked(o outgoing) error {
	if s.closed || s.ending {
		return ErrSessionGone
	}
	if s.raceHook != nil {
		s.raceHook()
	}
	if s.maxQueued > 0 {
		o.size = o.encodedSize()
		if q := s.queued.Load(); q > 0 && q+o.size > s.maxQueued {
			return ErrSlowConsumer
		}
	}
	if s.sendq == nil {
		s.sendq = make(chan outgoing, s.sendqCap)
	}
	select {
	case s.sendq <- o:
		s.queued.Add(o.size)
		s.wakeSender()
		return nil
	default:
		return ErrSlowConsumer
	}
}

// dequeued takes o's bytes off the queue's count.
func (s *session) dequeued(o outgoing) { s.queued.Add(-o.size) }

// wakeSender starts a sender unless one runs or the stream has ended; s.mu
// is held.
func (s *session) wakeSender() {
	if !s.sending && !s.closed && s.startSender != nil {
		s.sending = true
		s.startSender()
	}
}

// stopIfIdle ends the calling sender when nothing is queued and the session
// goes on (the next enqueue starts another); false when it must go on: a
// payload arrived meanwhile, or the session is ending and the sender's last
// duty (the kickout notice, or just stopping) is near.
func (s *session) stopIfIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sendq) > 0 || s.closed || s.ending {
		return false
	}
	s.sending = false
	s.sendq = nil
	return true
}

// queuedPayloads reports how many payloads wait for the sender.
func (s *session) queuedPayloads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sendq)
}

// senderEnded records that the sender stopped for good.
func (s *session) senderEnded() {
	s.sendEndOnce.Do(func() { close(s.sendEnded) })
}

// senderRunning reports whether a sender goroutine runs or ran to the end.
func (s *session) senderRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sending
}

// ended reports whether the session was kicked or has ended: it takes no
// more messages.
func (s *session) ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || s.ending
}

// kick asks the send loop to send the kickout notice and end the stream.
// Payloads still queued are not sent: they fail at once, and nothing more is
// queued.
func (s *session) kick(reason msgpb.KickoutReason) {
	s.kickOnce.Do(func() {
		s.mu.Lock()
		s.ending = true
		s.mu.Unlock()
		s.kickReason = reason
		close(s.kicked)
		s.failQueued()
		// The kickout notice needs a sender.
		s.mu.Lock()
		s.wakeSender()
		s.mu.Unlock()
	})
}

// failQueued fails every payload still queued. Called once enqueue refuses
// new ones, it leaves the queue empty for good. sendq no longer changes
// then: it changes only while the session is neither ending nor closed, and
// the caller marked it so under mu.
func (s *session) failQueued() {
	for {
		select {
		case o := <-s.sendq:
			s.dequeued(o)
			if o.sent != nil {
				o.sent.fail(ErrSessionGone)
			}
		default:
			return
		}
	}
}

// expect registers d as waiting for the ACK of seqs.
func (s *session) expect(d *delivery, seqs []int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ending {
		return ErrSessionGone
	}
	for _, seq := range seqs {
		s.pending[seq] = s.pending[seq].add(d)
	}
	return nil
}

// forget drops d's remaining waits (after it finished or gave up).
func (s *session) forget(d *delivery, seqs []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, seq := range seqs {
		w, ok := s.pending[seq]
		if !ok {
			continue
		}
		if w = w.remove(d); w.empty() {
			delete(s.pending, seq)
		} else {
			s.pending[seq] = w
		}
	}
}

// ack resolves the waits for seqs.
func (s *session) ack(seqs []int64) {
	var resolved []*delivery
	var resolvedSeqs []int64
	s.mu.Lock()
	for _, seq := range seqs {
		for d := range s.pending[seq].all {
			resolved = append(resolved, d)
			resolvedSeqs = append(resolvedSeqs, seq)
		}
		delete(s.pending, seq)
	}
	s.mu.Unlock()
	for i, d := range resolved {
		d.acked(resolvedSeqs[i])
	}
}

// finish marks the stream ended and fails every wait.
func (s *session) finish() {
	s.doneOnce.Do(func() {
		close(s.done)
		s.mu.Lock()
		s.closed = true
		var all []*delivery
		for seq, w := range s.pending {
			for d := range w.all {
				all = append(all, d)
			}
			delete(s.pending, seq)
		}
		s.mu.Unlock()
		for _, d := range all {
			d.fail(ErrSessionGone)
		}
		// Payloads still queued never reach the client.
		s.failQueued()
	})
}

// waiters are the deliveries waiting for the ACK of one seq, in the order
// they began to wait. Nearly always there is one: it is held in the map's
// value itself, so a message's wait costs no allocation of its own.
type waiters struct {
	first *delivery
	more  []*delivery // after first, when pushes of the same seq overlap
}

// add returns w with d waiting last.
func (w waiters) add(d *delivery) waiters {
	if w.first == nil {
		w.first = d
	} else {
		w.more = append(w.more, d)
	}
	return w
}

// remove returns w without d.
func (w waiters) remove(d *delivery) waiters {
	if w.first == d {
		if len(w.more) == 0 {
			return waiters{}
		}
		return waiters{first: w.more[0], more: w.more[1:]}
	}
	if i := slices.Index(w.more, d); i >= 0 {
		w.more = slices.Delete(w.more, i, i+1)
	}
	return w
}

func (w waiters) empty() bool { return w.first == nil }

// all yields the waiting deliveries in order.
func (w waiters) all(yield func(*delivery) bool) {
	if w.first == nil || !yield(w.first) {
		return
	}
	for _, d := range w.more {
		if !yield(d) {
			return
		}
	}
}

// delivery is one PushMessages call waiting for its payload to be sent and
// for the ACKs it needs.
type delivery struct {
	mu        sync.Mutex
	remaining int // 1 for "sent" plus one per seq needing an ACK
	ackedSeqs []int64
	err       error
	done      chan struct{}
	// then, if set, runs once done is closed, on the goroutine that closed
	// it, after mu is released.
	then func()
}

func newDelivery(acks int) *delivery {
	return &delivery{remaining: acks + 1, done: make(chan struct{})}
}

// step counts one of the things d waits for; it reports whether that was
// the last. d.mu must be held.
func (d *delivery) step() bool {
	d.remaining--
	if d.remaining == 0 {
		close(d.done)
		return true
	}
	return false
}

// finished runs then once d is done; d.mu must not be held.
func (d *delivery) finished(last bool) {
	if last && d.then != nil {
		d.then()
	}
}

func (d *delivery) wasSent() {
	d.mu.Lock()
	last := d.err == nil && d.remaining > 0 && d.step()
	d.mu.Unlock()
	d.finished(last)
}

func (d *delivery) acked(seq int64) {
	d.mu.Lock()
	last := false
	if d.err == nil && d.remaining > 0 {
		d.ackedSeqs = append(d.ackedSeqs, seq)
		last = d.step()
	}
	d.mu.Unlock()
	d.finished(last)
}

func (d *delivery) fail(err error) {
	d.mu.Lock()
	last := false
	if d.err == nil && d.remaining > 0 {
		d.err = err
		d.remaining = 0
		close(d.done)
		last = true
	}
	d.mu.Unlock()
	d.finished(last)
}

func (d *delivery) result() ([]int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ackedSeqs, d.err
}
