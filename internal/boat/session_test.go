package boat

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gomsg/gomsg/pb/msgpb"
)

// TestEnqueueRacingFinishStrandsNothing: payloads queued while the session
// finishes are either refused or failed by finish — none is left in a
// drained queue, where its PushMessages would wait for its deadline.
func TestEnqueueRacingFinishStrandsNothing(t *testing.T) {
	t.Parallel()
	const sessions, senders = 2000, 4
	stranded := 0
	for range sessions {
		s := newSession("s", 1<<10)
		var mu sync.Mutex
		var queued []*delivery
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for {
					d := newDelivery(0)
					err := s.enqueue(outgoing{payload: &msgpb.ServerPayload{}, sent: d})
					if errors.Is(err, ErrSessionGone) {
						return
					}
					if errors.Is(err, ErrSlowConsumer) {
						continue
					}
					if err != nil {
						t.Errorf("enqueue: %v", err)
						return
					}
					mu.Lock()
					queued = append(queued, d)
					mu.Unlock()
				}
			}()
		}
		close(start)
		s.finish()
		wg.Wait()
		for _, d := range queued {
			select {
			case <-d.done:
			default:
				stranded++
			}
		}
	}
	if stranded > 0 {
		t.Fatalf("%d payloads queued to a finished session and never failed", stranded)
	}
}

// TestFinishBetweenCheckAndSend: a session that finishes after enqueue
// found it open but before the payload is queued cannot leave the payload
// in its drained queue: finish waits for the enqueue, then fails it.
func TestFinishBetweenCheckAndSend(t *testing.T) {
	t.Parallel()
	s := newSession("s", 4)
	finished := make(chan struct{})
	s.raceHook = func() {
		s.raceHook = nil
		go func() { s.finish(); close(finished) }()
		// Let finish run to its end if nothing holds it back.
		select {
		case <-finished:
		case <-time.After(200 * time.Millisecond):
		}
	}
	d := newDelivery(0)
	err := s.enqueue(outgoing{payload: &msgpb.ServerPayload{}, sent: d})
	<-finished
	if err == nil {
		select {
		case <-d.done:
		default:
			t.Fatal("payload queued to a finished session and never failed")
		}
	}
}

// TestKickRefusesAndFailsQueued: after a kick nothing more is queued or
// awaited, and what was queued fails at once.
func TestKickRefusesAndFailsQueued(t *testing.T) {
	t.Parallel()
	s := newSession("s", 4)
	d := newDelivery(0)
	if err := s.enqueue(outgoing{payload: &msgpb.ServerPayload{}, sent: d}); err != nil {
		t.Fatal(err)
	}
	s.kick(msgpb.KickoutReason_BY_REQUEST)
	select {
	case <-d.done:
	default:
		t.Fatal("payload queued before the kick still pending")
	}
	if _, err := d.result(); !errors.Is(err, ErrSessionGone) {
		t.Fatalf("queued payload: %v, want ErrSessionGone", err)
	}
	if err := s.enqueue(outgoing{payload: &msgpb.ServerPayload{}}); !errors.Is(err, ErrSessionGone) {
		t.Fatalf("enqueue after kick: %v, want ErrSessionGone", err)
	}
	if err := s.expect(newDelivery(1), []int64{1}); !errors.Is(err, ErrSessionGone) {
		t.Fatalf("expect after kick: %v, want ErrSessionGone", err)
	}
	if q := s.queuedPayloads(); !s.ended() || q != 0 {
		t.Fatalf("ended %v, %d queued after kick", s.ended(), q)
	}
}

// TestDeliveryLateEventsChangeNothing: once a delivery is done, a late ACK
// (a duplicate) or a late failure (the ACK timer firing after the last ACK)
// leaves its result as it was.
func TestDeliveryLateEventsChangeNothing(t *testing.T) {
	t.Parallel()
	d := newDelivery(1)
	d.acked(7)
	d.wasSent()
	select {
	case <-d.done:
	default:
		t.Fatal("delivery sent and ACKed is not done")
	}
	d.acked(7)
	d.wasSent()
	d.fail(ErrAckTimeout)
	if acked, err := d.result(); err != nil || len(acked) != 1 || acked[0] != 7 {
		t.Fatalf("result after late events: %v %v, want [7] and no error", acked, err)
	}
	// A failed one stays failed.
	d = newDelivery(1)
	d.fail(ErrSessionGone)
	d.acked(7)
	d.wasSent()
	if acked, err := d.result(); !errors.Is(err, ErrSessionGone) || len(acked) != 0 {
		t.Fatalf("failed delivery after late events: %v %v", acked, err)
	}
}

// TestFinishFailsQueuedAndWaits: when the stream ends, what was queued and
// every wait for an ACK fail at once, and nothing more is queued.
func TestFinishFailsQueuedAndWaits(t *testing.T) {
	t.Parallel()
	s := newSession("s", 4)
	queued, waiting := newDelivery(0), newDelivery(1)
	if err := s.enqueue(outgoing{payload: &msgpb.ServerPayload{}, sent: queued}); err != nil {
		t.Fatal(err)
	}
	if err := s.expect(waiting, []int64{9}); err != nil {
		t.Fatal(err)
	}
	s.finish()
	for what, d := range map[string]*delivery{"queued payload": queued, "ACK wait": waiting} {
		select {
		case <-d.done:
		default:
			t.Fatalf("%s still pending after the stream ended", what)
		}
		if _, err := d.result(); !errors.Is(err, ErrSessionGone) {
			t.Fatalf("%s: %v, want ErrSessionGone", what, err)
		}
	}
	if err := s.enqueue(outgoing{payload: &msgpb.ServerPayload{}}); !errors.Is(err, ErrSessionGone) {
		t.Fatalf("enqueue after the end: %v, want ErrSessionGone", err)
	}
	if q := s.queuedPayloads(); q != 0 || len(s.pending) != 0 {
		t.Fatalf("%d queued, %d waits left after the end", q, len(s.pending))
	}
}

// TestForgetKeepsOtherWaits: two pushes wait for the ACK of the same seq;
// the one that gives up first leaves the other's wait in place, and once
// both are forgotten no wait is left.
func TestForgetKeepsOtherWaits(t *testing.T) {
	t.Parallel()
	s := newSession("s", 4)
	d1, d2 := newDelivery(1), newDelivery(1)
	for _, d := range []*delivery{d1, d2} {
		if err := s.expect(d, []int64{5}); err != nil {
			t.Fatal(err)
		}
	}
	s.forget(d1, []int64{5})
	s.ack([]int64{5})
	if acked, err := d2.result(); err != nil || len(acked) != 1 || acked[0] != 5 {
		t.Fatalf("other push's wait after the first gave up: %v %v, want seq 5 ACKed", acked, err)
	}
	d3 := newDelivery(1)
	if err := s.expect(d3, []int64{6}); err != nil {
		t.Fatal(err)
	}
	s.forget(d3, []int64{6})
	if n := len(s.pending); n != 0 {
		t.Fatalf("%d seqs still awaited after every wait was forgotten", n)
	}
}

// TestWaitersKeepOrder: removing any one of three waits of a seq leaves the
// other two in the order they began to wait, and removing all leaves none.
func TestWaitersKeepOrder(t *testing.T) {
	t.Parallel()
	ds := []*delivery{newDelivery(1), newDelivery(1), newDelivery(1)}
	for gone := range ds {
		var w waiters
		for _, d := range ds {
			w = w.add(d)
		}
		w = w.remove(ds[gone])
		var got []*delivery
		for d := range w.all {
			got = append(got, d)
		}
		want := slices.Delete(slices.Clone(ds), gone, gone+1)
		if !slices.Equal(got, want) {
			t.Fatalf("removing wait %d: %d waits left in another order than the others'", gone, len(got))
		}
		for _, d := range want {
			w = w.remove(d)
		}
		if !w.empty() {
			t.Fatalf("removing wait %d then the others: waits left", gone)
		}
	}
}
