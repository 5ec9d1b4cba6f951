package boat

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// entry is one queued broadcast message; platforms (broadcasts to all
// only; empty: every platform) limits the sessions it goes to.
type entry struct {
	msg       *msgpb.Message
	platforms []string
}

// batcher sends the broadcasts of one room (or, room "", those to every
// session) in frames of up to --room-batch messages, goim style: it takes
// the first queued message, gathers more for up to --room-batch-window,
// then queues ONE RoomMessages payload on each member's send queue. Its
// goroutine runs only while messages are queued (an idle room holds none).
// One goroutine per room keeps a room's messages in the order they were
// queued.
type batcher struct {
	b    *Boat
	room string
	// members are the sessions a frame goes to, at the time it is built.
	members func() []*session

	mu      sync.Mutex
	q       []entry
	running bool
	waiting int           // Broadcast calls waiting for space
	space   chan struct{} // closed (and replaced) when messages leave q while some wait
	full    chan struct{} // signalled when q holds a frame's worth
	// recent are the task seqs of the last calls queued (a ring of
	// recentTasks, made on first use), to drop a call seen before.
	recent []int64
	next   int
}

// recentTasks is how many task seqs a room remembers to drop repeated
// calls: a retry comes right after the call it repeats, and a record handed
// again after a carrier restart is among the room's last uncommitted ones.
const recentTasks = 16

func (b *Boat) newBatcher(roomName string, members func() []*session) *batcher {
	return &batcher{b: b, room: roomName, members: members, space: make(chan struct{}), full: make(chan struct{}, 1)}
}

// put queues msgs, all together and after every message queued before,
// waiting while the queue holds --room-queue messages until ctx ends. A
// call with more messages than the queue holds waits for it to be empty.
// A call whose taskSeq (non-zero) the room took recently is not queued
// again: put reports it a repeat.
func (q *batcher) put(ctx context.Context, taskSeq int64, msgs []*msgpb.Message, platforms []string) (repeat bool, err error) {
	q.mu.Lock()
	for len(q.q) > 0 && len(q.q)+len(msgs) > q.b.cfg.RoomQueue {
		space := q.space
		q.waiting++
		q.mu.Unlock()
		var err error
		select {
		case <-space:
		case <-ctx.Done():
			err = ctx.Err()
		}
		q.mu.Lock()
		q.waiting--
		if err != nil {
			q.mu.Unlock()
			return false, err
		}
	}
	if taskSeq != 0 {
		if slices.Contains(q.recent, taskSeq) {
			q.mu.Unlock()
			return true, nil
		}
		if len(q.recent) < recentTasks {
			q.recent = append(q.recent, taskSeq)
		} else {
			q.recent[q.next] = taskSeq
			q.next = (q.next + 1) % recentTasks
		}
	}
	for _, m := range msgs {
		q.q = append(q.q, entry{msg: m, platforms: platforms})
	}
	if len(q.q) >= q.b.cfg.RoomBatch {
		select {
		case q.full <- struct{}{}:
		default:
		}
	}
	if !q.running {
		q.running = true
		q.b.batchers.Add(1)
		go q.run()
	}
	q.mu.Unlock()
	return false, nil
}

// run sends frames until the queue is empty.
func (q *batcher) run() {
	defer q.b.batchers.Done()
	batch, window := q.b.cfg.RoomBatch, q.b.cfg.RoomBatchWindow
	var timer *time.Timer
	for {
		q.mu.Lock()
		if len(q.q) == 0 {
			q.running = false
			q.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return
		}
		wait := len(q.q) < batch && window > 0
		q.mu.Unlock()
		if wait {
			if timer == nil {
				timer = time.NewTimer(window)
			} else {
				timer.Reset(window)
			}
			select {
			case <-timer.C:
			case <-q.full:
			case <-q.b.stopping: // the boat stops: no waiting
			}
			timer.Stop()
		}
		q.mu.Lock()
		k := min(len(q.q), batch)
		frame := slices.Clone(q.q[:k])
		clear(q.q[:k])
		if k == len(q.q) {
			q.q = q.q[:0]
		} else {
			q.q = q.q[k:]
		}
		select { // a signal for the messages just taken
		case <-q.full:
		default:
		}
		if q.waiting > 0 {
			close(q.space)
			q.space = make(chan struct{})
		}
		q.mu.Unlock()
		q.send(frame)
	}
}

// send queues one frame of entries on each member's send queue. A frame
// going to several members is marshalled once and shared by them.
func (q *batcher) send(frame []entry) {
	members := q.members()
	if len(members) == 0 {
		return
	}
	var sent, slow, ended, kicked int
	deliver := func(s *session, o outgoing, n int) {
		err := s.enqueue(o)
		switch {
		case err == nil:
			sent += n
		case errors.Is(err, ErrSlowConsumer):
			slow += n
			kicked++
			s.kick(msgpb.KickoutReason_SLOW_CONSUMER)
		default:
			ended += n
		}
	}
	if !hasPlatforms(frame) {
		msgs := make([]*msgpb.Message, len(frame))
		for i, e := range frame {
			msgs[i] = e.msg
		}
		o := q.outgoing(msgs, len(members))
		for _, s := range members {
			deliver(s, o, len(msgs))
		}
	} else {
		// Broadcasts to all of some platforms: one frame per platform,
		// shared by its sessions.
		type platformFrame struct {
			o outgoing
			n int
		}
		byPlatform := make(map[string]platformFrame)
		for _, s := range members {
			f, ok := byPlatform[s.platform]
			if !ok {
				var msgs []*msgpb.Message
				for _, e := range frame {
					if len(e.platforms) == 0 || slices.Contains(e.platforms, s.platform) {
						msgs = append(msgs, e.msg)
					}
				}
				if len(msgs) > 0 {
					f = platformFrame{o: q.outgoing(msgs, len(members)), n: len(msgs)}
				}
				byPlatform[s.platform] = f
			}
			if f.n > 0 {
				deliver(s, f.o, f.n)
			}
		}
	}
	m := q.b.metrics
	m.BroadcastSent.Add(float64(sent))
	if slow > 0 {
		m.BroadcastDropped.WithLabelValues("slow_consumer").Add(float64(slow))
		q.b.log.Warn("session send queues full on a broadcast; kicking them out", zap.String("room", q.room), zap.Int("sessions", kicked))
	}
	if ended > 0 {
		m.BroadcastDropped.WithLabelValues("ended").Add(float64(ended))
	}
}

// outgoing is the frame of msgs, marshalled here once when it goes to
// several sessions (if it does not marshal, each sender fails the same way
// as with any payload).
func (q *batcher) outgoing(msgs []*msgpb.Message, sessions int) outgoing {
	q.b.metrics.RoomBatch.Observe(float64(len(msgs)))
	o := outgoing{payload: &msgpb.ServerPayload{Body: &msgpb.ServerPayload_RoomMessages{
		RoomMessages: &msgpb.RoomMessages{Room: q.room, Msgs: msgs}}}}
	if sessions > 1 {
		f, err := encodeFrame(o.payload)
		if err != nil {
			q.b.log.Warn("room frame does not marshal", zap.String("room", q.room), zap.Error(err))
		}
		o.frame = f
	}
	return o
}

func hasPlatforms(frame []entry) bool {
	for _, e := range frame {
		if len(e.platforms) > 0 {
			return true
		}
	}
	return false
}

// overflowMargin is how long before the caller's deadline Broadcast stops
// waiting for space in a full batcher queue, to answer LIMIT_EXCEEDED (at
// most a quarter of the time left): room for the answer to reach the
// caller on a busy host.
const overflowMargin = 250 * time.Millisecond

// Broadcast queues msgs for the members of roomName, or with all for every
// session held (of platforms, when set), and returns the number of
// sessions they go to. It returns once they are queued on the room's
// batcher; while that holds --room-queue messages it waits for space until
// ctx ends, then refuses them (LIMIT_EXCEEDED naming --room-queue).
// Messages of one room reach each member in the order of the calls. A call
// whose taskSeq (non-zero) the room took among its last 16 is a repeat (a
// carrier's retry, or a record handed again): it is answered as the first
// was, and nothing is queued again.
func (b *Boat) Broadcast(ctx context.Context, taskSeq int64, roomName string, all bool, platforms []string, msgs []*msgpb.Message) (int, error) {
	var (
		q       *batcher
		members int
	)
	if all {
		q = b.allBatch
		for _, s := range b.heldSessions() {
			if len(platforms) == 0 || slices.Contains(platforms, s.platform) {
				members++
			}
		}
	} else if r := b.rooms.get(roomName); r != nil {
		q = r.batch
		r.mu.Lock()
		members = len(r.members)
		r.mu.Unlock()
	}
	if members == 0 {
		b.metrics.BroadcastFanout.Observe(0)
		return 0, nil
	}
	// The wait ends a little before the caller's deadline, so that the
	// caller learns why.
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-min(time.Until(d)/4, overflowMargin)))
		defer cancel()
	}
	repeat, err := q.put(ctx, taskSeq, msgs, platforms)
	if repeat {
		b.metrics.BroadcastDropped.WithLabelValues("repeat").Add(float64(len(msgs)))
		return members, nil
	}
	if err != nil {
		b.metrics.BroadcastDropped.WithLabelValues("overflow").Add(float64(len(msgs)))
		return 0, grpcerr.Limited("--room-queue", "the room's broadcast queue stayed full (%d messages) until the call ended: %v", b.cfg.RoomQueue, err)
	}
	b.metrics.BroadcastFanout.Observe(float64(members))
	return members, nil
}

// heldSessions are the sessions that are connected (their Connected
// payload is queued) and not ending: those a broadcast to all goes to.
func (b *Boat) heldSessions() []*session {
	all := b.sessions.all()
	out := all[:0]
	for _, s := range all {
		select {
		case <-s.connected:
		default:
			continue
		}
		if !s.ended() {
			out = append(out, s)
		}
	}
	return out
}

// RoomOnline counts the members of each room.
func (b *Boat) RoomOnline(names []string) []int64 {
	out := make([]int64, len(names))
	for i, n := range names {
		out[i] = int64(b.rooms.online(n))
	}
	return out
}
