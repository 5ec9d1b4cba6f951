package client

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gomsg/gomsg/pb/msgpb"
)

// session is one stream the server accepted.
type session struct {
	info   Session
	stream msgpb.Msg_LoopClient
	// ctx ends with the session, or when the client is closed; handlers
	// get it.
	ctx     context.Context
	hcancel context.CancelFunc
	// cancel ends the stream. Closing the client does not cancel it at
	// once: see closeGracefully.
	cancel context.CancelFunc
	// stopClose stops the graceful close from being started (the session
	// ended otherwise).
	stopClose func() bool
	// delivering is held while messages are handed to the handler and
	// their ACKs sent; closeGracefully takes it for good.
	delivering chan struct{}
	// done is closed when the session ended: waiters for answers give up
	// on it.
	done    chan struct{}
	endOnce sync.Once

	// sendMu orders sends (a gRPC stream takes one at a time) and keeps
	// the waiters below in the order of their requests.
	sendMu sync.Mutex
	mu     sync.Mutex
	// ids numbers the room and registration requests; the boat echoes
	// the id in its answer.
	ids int64
	// rooms and regs wait for RoomAnswer and DeviceRegistered payloads,
	// oldest first: an answer goes to the waiter with its id, or, from a
	// boat that echoes no id, to the oldest.
	rooms []waiter
	regs  []waiter
	// pulls wait for PullResult payloads, by the Pull's id.
	pulls map[int64]chan answer
	// regGate and pullGate are held from the moment a registration or a
	// Pull is sent until its answer arrives, even when its caller gave
	// up meanwhile: the boat serves one of each at a time per session and
	// refuses another sent before the answer.
	regGate  chan struct{}
	pullGate chan struct{}
}

// waiter is a request waiting for its answer: ch (buffered) gets it, or,
// for a request nobody waits for (any more), onErr an error answer (if
// set).
type waiter struct {
	id    int64
	room  string
	ch    chan answer
	onErr func(error)
}

// answer is the server's answer to a request.
type answer struct {
	err error
	// provider is the provider a device token was registered with.
	provider string
	// msgs and more are a PullResult's page.
	msgs []*msgpb.Message
	more bool
	// limited is a Pull refused for the session's request rate: sent
	// again after a wait rather than returned.
	limited bool
}

func (s *session) send(p *msgpb.ClientPayload) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(p)
}

// request gives w a new id, queues it among the waiters of q and sends
// the payload make builds with that id. It returns the id.
func (s *session) request(q *[]waiter, w waiter, make func(id int64) *msgpb.ClientPayload) (int64, error) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	id := s.queue(q, w)
	return id, s.stream.Send(make(id))
}

// queue gives w a new id and queues it among the waiters of q.
func (s *session) queue(q *[]waiter, w waiter) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	w.id = s.ids
	*q = append(*q, w)
	return w.id
}

// roomRequest joins or leaves w.room; w waits for the answer.
func (s *session) roomRequest(join bool, w waiter) (int64, error) {
	room := w.room
	return s.request(&s.rooms, w, func(id int64) *msgpb.ClientPayload {
		if join {
			return &msgpb.ClientPayload{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Room: room, Id: id}}}
		}
		return &msgpb.ClientPayload{Body: &msgpb.ClientPayload_LeaveRoom{LeaveRoom: &msgpb.LeaveRoom{Room: room, Id: id}}}
	})
}

// answered hands a to the waiter of q with id, or, for id 0 (a boat that
// echoes no id), to the oldest.
func (s *session) answered(q *[]waiter, id int64, a answer) {
	s.mu.Lock()
	i := 0
	if id != 0 {
		i = slices.IndexFunc(*q, func(w waiter) bool { return w.id == id })
	}
	if i < 0 || len(*q) == 0 {
		s.mu.Unlock()
		return // an answer to no request of this session
	}
	w := (*q)[i]
	*q = slices.Delete(*q, i, i+1)
	s.mu.Unlock()
	if w.ch != nil {
		w.ch <- a
	} else if a.err != nil && w.onErr != nil {
		w.onErr(a.err)
	}
}

// abandon is called by the caller of request id of q when it gives up
// waiting: its answer, when it comes, is dropped. The waiter keeps its
// place, which a boat that answers in order without ids needs.
func (s *session) abandon(q *[]waiter, id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.IndexFunc(*q, func(w waiter) bool { return w.id == id }); i >= 0 {
		(*q)[i].ch, (*q)[i].onErr = nil, nil
	}
}

// acquire takes gate for a request, waiting for the answer to the one
// before; false when the session ended first. ctx's end is its error.
func (s *session) acquire(ctx context.Context, gate chan struct{}) (bool, error) {
	select {
	case gate <- struct{}{}:
		return true, nil
	case <-s.done:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// release frees gate once the answer it waited for came.
func release(gate chan struct{}) {
	select {
	case <-gate:
	default:
	}
}

// wait waits for ch's answer; ok is false when the session ended first.
func (s *session) wait(ctx context.Context, ch chan answer) (a answer, ok bool) {
	select {
	case a := <-ch:
		return a, true
	case <-s.done:
		return answer{}, false
	case <-ctx.Done():
		return answer{err: ctx.Err()}, true
	}
}

func (s *session) end() {
	s.endOnce.Do(func() {
		if s.stopClose != nil {
			s.stopClose()
		}
		s.hcancel()
		s.cancel()
		close(s.done)
	})
}

// closeWait bounds how long a closing client waits for a handler that is
// running to return, and then for the server to end the stream once the
// client half-closed it.
const closeWait = 2 * time.Second

// closeGracefully ends the session of a client that is being closed
// without losing the ACKs of messages handled before: the handlers'
// context ends, a delivery under way finishes (its ACKs are sent), no other
// starts, and the stream is half-closed after everything sent on it, so
// the server reads every ACK before the end of the stream. The stream is
// cut when the server has not ended it within closeWait.
func (s *session) closeGracefully() {
	s.hcancel()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case s.delivering <- struct{}{}: // held for good: no delivery after
	case <-s.done:
		return
	case <-t.C: // a handler that does not return
		s.cancel()
		return
	}
	s.sendMu.Lock()
	_ = s.stream.CloseSend()
	s.sendMu.Unlock()
	select {
	case <-s.done: // serve saw the server end the stream
	case <-t.C:
		s.cancel()
	}
}
