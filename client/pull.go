package client

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// offlineModeHeader carries pull mode at connect (boat's OfflineModeHeader).
const offlineModeHeader = "x-gomsg-offline"

// MaxPullAck is the most seqs one Pull may ACK (the server refuses more).
const MaxPullAck = 1000

// Pull ACKs ack — messages of earlier pages the application has handled,
// which the server then deletes from the offline store — and returns the
// next page of the messages stored while the device was offline, oldest
// first: at most limit (0 or more than the server's page size, 100: the page
// size), and more when messages are left after it. Page through the backlog
// by pulling until more is false, each time ACKing the page before:
//
//	var ack []int64
//	for {
//		msgs, more, err := c.Pull(ctx, 100, ack)
//		if err != nil { … }                 // nothing was ACKed; pull again later
//		ack = ack[:0]
//		for _, m := range msgs {
//			handle(m)
//			ack = append(ack, m.GetSeq())
//		}
//		if !more { break }
//	}
//	_, _, err = c.Pull(ctx, 0, ack)        // the last page's ACK
//
// A message not ACKed comes again in a later page (and on the next connect).
// Pulled messages are ACKed only through Pull, whatever their options: an
// Ack does not delete them from the store. Pull works with or without
// WithPullOffline; without it the server also replays the store at connect,
// so messages may come both ways (de-duplicate by seq).
//
// A Pull the boat refuses for the session's request rate (a loop draining
// a large backlog outruns it: 50 requests a second by default) is sent
// again after a short, growing wait, not returned: such a loop is paced to
// what the boat allows.
//
// The error is a gRPC status error the server answered — InvalidArgument
// naming the field (ack: more than MaxPullAck seqs, or one not positive),
// Unavailable (retry) — after which nothing was ACKed; or ctx's error, after
// which the ACKs may or may not have been applied: the client keeps them
// and sends them with the next Pull (an ACK applied twice is harmless), so
// the application need not pass them again. With no session up Pull waits
// for one (or ctx); a session that ends while a Pull waits for its answer
// has the same Pull sent again on the next one. Pulls go one at a time, as
// the server serves one per session at a time: a Pull waits for the answer
// to the one before, even when that one's caller gave up after sending it.
//
// Pull and the handler share nothing: a message pushed live is never
// returned by Pull once ACKed (a page's message the client had ACKed live
// already is left out and ACKed by the next Pull), but a pulled message is
// handed to the handler if it is also pushed before its Pull ACK.
func (c *Client) Pull(ctx context.Context, limit int, ack []int64) (msgs []*msgpb.Message, more bool, err error) {
	if len(ack) > MaxPullAck {
		return nil, false, fmt.Errorf("gomsg client: pull: ack has %d seqs, at most %d", len(ack), MaxPullAck)
	}
	limit = min(max(limit, 0), math.MaxInt32)
	c.pullMu.Lock()
	defer c.pullMu.Unlock()
	limited := 0 // answers refused for the session's request rate
	for {
		s, err := c.session(ctx)
		if err == nil {
			var ok bool
			if ok, err = s.acquire(ctx, s.pullGate); err == nil && !ok {
				continue // the session ended: the next one
			}
		}
		if err != nil {
			c.holdPullAcks(ack)
			return nil, false, err
		}
		// The ACKs the client holds go along as far as the server's bound
		// allows; the rest wait for the next Pull.
		held := min(len(c.pullAcks), MaxPullAck-len(ack))
		all := append(slices.Clone(ack), c.pullAcks[:held]...)
		c.pullIDs++
		id := c.pullIDs
		ch := make(chan answer, 1)
		_ = s.pullRequest(id, ch, &msgpb.ClientPayload{Body: &msgpb.ClientPayload_Pull{Pull: &msgpb.Pull{
			Id: id, Limit: int32(limit), Ack: all}}}) // a failed send: the wait sees the end
		a, ok := s.wait(ctx, ch)
		s.forgetPull(id)
		if !ok {
			continue
		}
		if ctx.Err() != nil {
			c.holdPullAcks(ack)
			return nil, false, ctx.Err()
		}
		if a.limited {
			// Nothing was done, the ACKs included: the same Pull goes
			// again once the session's request bucket has refilled.
			limited++
			if !sleep(ctx, backoffWait(pullRetryMin, pullRetryMax, limited)) {
				c.holdPullAcks(ack)
				return nil, false, ctx.Err()
			}
			continue
		}
		if a.err != nil {
			return nil, false, fmt.Errorf("gomsg client: pull: %w", a.err)
		}
		c.seen.ack(ack)
		c.pullAcks = append(c.pullAcks[:0], c.pullAcks[held:]...)
		msgs = make([]*msgpb.Message, 0, len(a.msgs))
		for _, m := range a.msgs {
			if seen, acked := c.seen.seen(m.GetSeq()); seen && acked {
				c.pullAcks = append(c.pullAcks, m.GetSeq())
				if c.cfg.duplicate != nil {
					c.cfg.duplicate(m.GetSeq())
				}
				continue
			}
			msgs = append(msgs, m)
		}
		return msgs, a.more, nil
	}
}

// PullError is nil for a PullResult with status OK, and otherwise a gRPC
// status error naming the field at fault.
func PullError(r *msgpb.PullResult) error {
	return answerError(r.GetStatus(), r.GetMessage(), r.GetError())
}

// holdPullAcks keeps ack for the next Pull, which sends it: a Pull ended by
// its ctx may have been applied or not. ack is remembered as ACKed, as a
// Pull that succeeded does.
func (c *Client) holdPullAcks(ack []int64) {
	c.seen.ack(ack)
	for _, seq := range ack {
		if !slices.Contains(c.pullAcks, seq) {
			c.pullAcks = append(c.pullAcks, seq)
		}
	}
}

// pullRequest registers ch for the answer to Pull id and sends p.
func (s *session) pullRequest(id int64, ch chan answer, p *msgpb.ClientPayload) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	s.pulls[id] = ch
	s.mu.Unlock()
	return s.stream.Send(p)
}

// forgetPull drops the wait for Pull id's answer.
func (s *session) forgetPull(id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pulls, id)
}

// pullAnswered hands a PullResult to the Pull waiting for it (none: it gave
// up, and the answer is dropped).
func (s *session) pullAnswered(r *msgpb.PullResult) {
	release(s.pullGate)
	s.mu.Lock()
	ch := s.pulls[r.GetId()]
	delete(s.pulls, r.GetId())
	s.mu.Unlock()
	if ch != nil {
		ch <- answer{err: PullError(r), msgs: r.GetMsgs(), more: r.GetMore(), limited: requestRateLimited(r)}
	}
}

// requestRateLimited says whether the boat refused a Pull for the session's
// request rate, which the refusal names as the flag that sets it.
func requestRateLimited(r *msgpb.PullResult) bool {
	return codes.Code(r.GetStatus()) == codes.ResourceExhausted &&
		r.GetError().GetCode() == errorpb.Code_LIMIT_EXCEEDED && r.GetError().GetField() == "--session-request-rate"
}

// Waits before a Pull the boat refused for the session's request rate is
// sent again: the boat's bucket refills at its rate (50 a second by
// default), so a short wait is enough, doubled while it refuses.
const (
	pullRetryMin = 50 * time.Millisecond
	pullRetryMax = 2 * time.Second
)
