package client

import (
	"context"
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
	// rooms and regs wait for RoomAnswer and DeviceRegistered payloads,
	// which come in the order of the requests.
	rooms []waiter
	regs  []waiter
	// pulls wait for PullResult payloads, by the Pull's id.
	pulls map[int64]chan answer
}

// waiter is a request waiting for its answer: ch (buffered) gets it, or,
// for a request nobody waits for, onErr an error answer.
type waiter struct {
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
}

func (s *session) send(p *msgpb.ClientPayload) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.Send(p)
}

// request queues w among the waiters of q and sends p.
func (s *session) request(q *[]waiter, w waiter, p *msgpb.ClientPayload) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	*q = append(*q, w)
	s.mu.Unlock()
	return s.stream.Send(p)
}

// roomRequest joins or leaves w.room; w waits for the answer.
func (s *session) roomRequest(join bool, w waiter) error {
	room := w.room
	p := &msgpb.ClientPayload{Body: &msgpb.ClientPayload_LeaveRoom{LeaveRoom: &msgpb.LeaveRoom{Room: room}}}
	if join {
		p = &msgpb.ClientPayload{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Room: room}}}
	}
	return s.request(&s.rooms, w, p)
}

// answered hands a to the oldest waiter of q.
func (s *session) answered(q *[]waiter, a answer) {
	s.mu.Lock()
	if len(*q) == 0 {
		s.mu.Unlock()
		return
	}
	w := (*q)[0]
	*q = (*q)[1:]
	s.mu.Unlock()
	if w.ch != nil {
		w.ch <- a
	} else if a.err != nil && w.onErr != nil {
		w.onErr(a.err)
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
