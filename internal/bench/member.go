package bench

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gomsg/gomsg/pb/msgpb"
)

// maxIndex bounds the body index of a room's messages: a body naming a
// higher one is counted wrong, not recorded (its bit would cost memory).
const maxIndex = 1 << 24

// bitset is a growable set of small non-negative integers.
type bitset []uint64

// set adds i and reports whether it was there already.
func (b *bitset) set(i int) (had bool) {
	w := i / 64
	if w >= len(*b) {
		*b = append(*b, make([]uint64, w+1-len(*b))...)
	}
	bit := uint64(1) << (i % 64)
	had = (*b)[w]&bit != 0
	(*b)[w] |= bit
	return had
}

func (b bitset) has(i int) bool {
	w := i / 64
	return w < len(b) && b[w]&(uint64(1)<<(i%64)) != 0
}

func (b bitset) count() int64 {
	var n int64
	for _, w := range b {
		n += int64(bits.OnesCount64(w))
	}
	return n
}

func (b bitset) word(w int) uint64 {
	if w < len(b) {
		return b[w]
	}
	return 0
}

// member is one session's membership in a fanout run: its room and which
// of the room's messages (by the body's index, which the room's broadcaster
// counts up from 0) it received, and how.
type member struct {
	room    string
	roomIdx int
	// log, when set, is told of each receipt (the broadcaster's window).
	log *roomLog
	// sampled members' receipts give the latencies (a bounded sample:
	// 10,000 members × every message would not fit).
	sampled bool
	// answers passes RoomAnswers from the receive loop to the joiner.
	answers chan *msgpb.RoomAnswer

	mu       sync.Mutex
	got      bitset
	maxSeen  int   // highest index received, -1 before the first
	received int64 // room messages recorded (duplicates included)
	dup      int64 // receipts of an index received before
	ooo      int64 // first receipts of an index below maxSeen
	wrong    int64 // receipts of another room, or with a body not ours
}

func newMember(room string, roomIdx int, sampled bool) *member {
	return &member{room: room, roomIdx: roomIdx, sampled: sampled, answers: make(chan *msgpb.RoomAnswer, 1), maxSeen: -1}
}

// receive records one room message and reports whether it was one of
// the room's; m.mu is held.
func (m *member) receive(room string, idx int, ok bool) bool {
	if !ok || room != m.room || idx < 0 || idx >= maxIndex {
		m.wrong++
		return false
	}
	m.received++
	if m.got.set(idx) {
		m.dup++
		return true
	}
	if idx < m.maxSeen {
		m.ooo++
		return true
	}
	m.maxSeen = idx
	return true
}

// roomLog is what one room's broadcaster sent: indices 0 to next-1, ok
// those in calls that succeeded (sentOK of them); and how many receipts
// its members have had, which the broadcaster's window waits on.
type roomLog struct {
	name   string
	next   int
	ok     bitset
	sentOK int64
	recv   atomic.Int64
	wake   chan struct{} // a receipt since the broadcaster last looked
}

func newRoomLog(name string) *roomLog { return &roomLog{name: name, wake: make(chan struct{}, 1)} }

// received counts n receipts by the room's members.
func (lg *roomLog) received(n int64) {
	lg.recv.Add(n)
	select {
	case lg.wake <- struct{}{}:
	default:
	}
}

// waitWindow waits until fewer than window messages the room's successful
// calls broadcast are on their way (on average over its members), or until
// no receipt came for stall (room messages are at most once: a lost one
// must not stop the room). It reports whether it gave up on a stall.
func (lg *roomLog) waitWindow(ctx context.Context, members, window int, stall time.Duration) (stalled bool, err error) {
	for float64(lg.sentOK)-float64(lg.recv.Load())/float64(members) >= float64(window) {
		t := time.NewTimer(stall)
		select {
		case <-lg.wake:
			t.Stop()
		case <-t.C:
			return true, nil
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		}
	}
	return false, nil
}

// fanoutCounts is the bookkeeping of a fanout run over every member.
type fanoutCounts struct {
	Delivered int64 // room messages received, duplicates included
	// Missing counts (message, member) pairs: a message a successful call
	// broadcast that a member of its room never received. MissingMessages
	// counts the messages at least one member missed; MembersMissing the
	// members that missed at least one.
	Missing         int64
	MissingMessages int64
	MembersMissing  int64
	Duplicates      int64
	OutOfOrder      int64
	// Unexpected: receipts of messages no successful call returned (a call
	// that failed may still have been broadcast).
	Unexpected int64
	WrongRoom  int64
}

// tally counts over members against what their rooms' broadcasters sent.
func tally(members []*member, rooms []*roomLog) fanoutCounts {
	var c fanoutCounts
	missed := make([]bitset, len(rooms))
	for _, m := range members {
		r := rooms[m.roomIdx]
		m.mu.Lock()
		c.Delivered += m.received
		c.Duplicates += m.dup
		c.OutOfOrder += m.ooo
		c.WrongRoom += m.wrong
		var miss int64
		for w, okw := range r.ok {
			if x := okw &^ m.got.word(w); x != 0 {
				miss += int64(bits.OnesCount64(x))
				mr := &missed[m.roomIdx]
				if w >= len(*mr) {
					*mr = append(*mr, make([]uint64, w+1-len(*mr))...)
				}
				(*mr)[w] |= x
			}
		}
		for w, g := range m.got {
			c.Unexpected += int64(bits.OnesCount64(g &^ r.ok.word(w)))
		}
		m.mu.Unlock()
		c.Missing += miss
		if miss > 0 {
			c.MembersMissing++
		}
	}
	for _, b := range missed {
		c.MissingMessages += b.count()
	}
	return c
}

// roomAnswer hands a RoomAnswer to the session's joiner; one nobody waits
// for is dropped.
func (s *session) roomAnswer(a *msgpb.RoomAnswer) {
	if s.member == nil {
		return
	}
	select {
	case s.member.answers <- a:
	default:
	}
}

// roomMessages records a frame of room messages (never ACKed).
func (s *session) roomMessages(p *sessions, rm *msgpb.RoomMessages) {
	m := s.member
	msgs := rm.GetMsgs()
	if m == nil || len(msgs) == 0 {
		return
	}
	now := time.Now().UnixNano()
	winStart := p.winStart.Load()
	var valid int64
	m.mu.Lock()
	for _, msg := range msgs {
		sent, idx, ok := decodeBody(msg.GetBody())
		if m.receive(rm.GetRoom(), idx, ok) {
			valid++
		}
		if ok && m.sampled && sent >= winStart {
			p.lat.add(s.idx, now-sent)
		}
	}
	m.mu.Unlock()
	if m.log != nil && valid > 0 {
		m.log.received(valid)
	}
	p.received.Add(int64(len(msgs)))
	if now >= winStart && now <= p.winEnd.Load() {
		p.inWindow.Add(int64(len(msgs)))
	}
}

// join sends JoinRoom for the session's room and waits for boat's answer.
func (s *session) join(ctx context.Context) error {
	m := s.member
	s.sendMu.Lock()
	err := s.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Room: m.room}}})
	s.sendMu.Unlock()
	if err != nil {
		return fmt.Errorf("send JoinRoom %q: %w", m.room, err)
	}
	select {
	case a := <-m.answers:
		return checkAnswer(a, m.room)
	case <-s.done:
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		return fmt.Errorf("stream ended before the RoomAnswer to JoinRoom %q: %w", m.room, err)
	case <-ctx.Done():
		return fmt.Errorf("no RoomAnswer to JoinRoom %q: %w", m.room, ctx.Err())
	}
}

// checkAnswer says what is wrong with a as the answer to joining room.
func checkAnswer(a *msgpb.RoomAnswer, room string) error {
	if a.GetRoom() != room || !a.GetJoin() {
		return fmt.Errorf("RoomAnswer for room %q (join %v), want the answer to JoinRoom %q", a.GetRoom(), a.GetJoin(), room)
	}
	if c := codes.Code(a.GetStatus()); c != codes.OK {
		return fmt.Errorf("JoinRoom %q refused: %s: %s", room, c, a.GetMessage())
	}
	return nil
}
