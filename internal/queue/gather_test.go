package queue

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// While one caller looks a topic's layout up, the others go without it at
// once rather than wait behind a cluster that may not answer; a look-up that
// failed is not repeated by every call.
func TestLayoutsLookUpOneAtATime(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var lookups atomic.Int32
	fail := atomic.Bool{}
	ls := newLayouts(func(ctx context.Context, topic string) (topicLayout, error) {
		lookups.Add(1)
		<-release
		if fail.Load() {
			return topicLayout{}, errors.New("no answer")
		}
		return topicLayout{partitions: []int{0}, leader: map[int]int{0: 7}, at: time.Now()}, nil
	})

	first := make(chan bool)
	go func() {
		_, ok := ls.get(context.Background(), "tasks")
		first <- ok
	}()
	deadline := time.Now().Add(10 * time.Second)
	for lookups.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first get did not look the layout up")
		}
		time.Sleep(time.Millisecond)
	}
	done := make(chan bool)
	go func() {
		_, ok := ls.get(context.Background(), "tasks")
		done <- ok
	}()
	select {
	case ok := <-done:
		if ok {
			t.Error("a get during the look-up found a layout that is not known yet")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a get waited behind another caller's look-up")
	}
	close(release)
	if ok := <-first; !ok {
		t.Fatal("the look-up's own caller got no layout")
	}
	if l, ok := ls.get(context.Background(), "tasks"); !ok || l.leader[0] != 7 {
		t.Fatalf("layout after the look-up: %v, %v", l, ok)
	}
	if n := lookups.Load(); n != 1 {
		t.Errorf("%d look-ups, want 1 (the layout is kept for its TTL)", n)
	}

	// A failed look-up is not repeated within a second.
	fail.Store(true)
	ls.forget()
	for range 5 {
		if _, ok := ls.get(context.Background(), "tasks"); ok {
			t.Fatal("a layout found after a failed look-up")
		}
	}
	if n := lookups.Load(); n != 2 {
		t.Errorf("%d look-ups after a failure and 4 more calls, want 2", n)
	}
}

// Calls to one leader within the window go in one send; calls to another
// leader go in their own; a call whose caller left is not sent.
func TestGathererPerLeader(t *testing.T) {
	t.Parallel()
	type call struct {
		leader, id int
		gone       bool
	}
	sent := make(chan []call, 8)
	g := newGatherer(200*time.Millisecond, func(c call) bool { return !c.gone }, func(cs []call) { sent <- cs })
	g.add(1, call{1, 1, false})
	g.add(2, call{2, 2, false})
	g.add(1, call{1, 3, true})
	g.add(1, call{1, 4, false})
	got := map[int][]int{}
	for range 2 {
		select {
		case cs := <-sent:
			for _, c := range cs {
				got[cs[0].leader] = append(got[cs[0].leader], c.id)
				if c.leader != cs[0].leader {
					t.Errorf("one send mixed leaders %d and %d", cs[0].leader, c.leader)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a window never closed")
		}
	}
	if len(got[1]) != 2 || got[1][0] != 1 || got[1][1] != 4 || len(got[2]) != 1 || got[2][0] != 2 {
		t.Errorf("sends carried %v, want leader 1: [1 4], leader 2: [2]", got)
	}
	if n := g.waiting(); n != 0 {
		t.Errorf("%d calls still waiting", n)
	}
}

// sentCall is a call of the gatherer tests below, with when it was sent.
type sentCall struct {
	leader, id int
	at         time.Time
}

// newRecordingGatherer returns a gatherer whose sends go to the channel,
// each call stamped with the moment of its send.
func newRecordingGatherer(window time.Duration, eager bool) (*gatherer[sentCall], chan []sentCall) {
	sent := make(chan []sentCall, 8)
	g := newGatherer(window, func(sentCall) bool { return true }, func(cs []sentCall) {
		now := time.Now()
		for i := range cs {
			cs[i].at = now
		}
		sent <- cs
	})
	g.eager = eager
	return g, sent
}

// nextSend waits for the gatherer's next send.
func nextSend(t *testing.T, sent chan []sentCall, what string) []sentCall {
	t.Helper()
	select {
	case cs := <-sent:
		return cs
	case <-time.After(10 * time.Second):
		t.Fatalf("%s was never sent", what)
		return nil
	}
}

// sendFirst adds leader 1's first call to an eager gatherer and checks
// that it went at once, alone.
func sendFirst(t *testing.T, g *gatherer[sentCall], sent chan []sentCall) {
	t.Helper()
	g.add(1, sentCall{leader: 1, id: 1})
	if cs := nextSend(t, sent, "the first call"); len(cs) != 1 || cs[0].id != 1 {
		t.Fatalf("first send carried %v, want call 1 alone", cs)
	}
}

// Under light traffic an eager gatherer sends a call at once, although its
// window is an hour: the leader's last request went more than a window ago
// (never, here). The next call within the window waits for it, and another
// leader's first call goes at once too.
func TestEagerGathererSendsALoneCallAtOnce(t *testing.T) {
	t.Parallel()
	g, sent := newRecordingGatherer(time.Hour, true)
	sendFirst(t, g, sent) // under an hour's window
	g.add(1, sentCall{leader: 1, id: 2})
	g.add(2, sentCall{leader: 2, id: 3})
	if cs := nextSend(t, sent, "another leader's first call"); len(cs) != 1 || cs[0].id != 3 {
		t.Fatalf("second send carried %v, want leader 2's call 3 alone (call 2 waits for leader 1's window)", cs)
	}
	noSend(t, sent, "within its leader's window of an hour")
	if n := g.waiting(); n != 1 {
		t.Errorf("%d calls waiting, want 1 (call 2)", n)
	}
}

// Calls that come within a window of an eager gatherer's last request wait
// for a window, and then go together.
func TestEagerGathererKeepsOneRequestPerWindow(t *testing.T) {
	t.Parallel()
	const window = 300 * time.Millisecond
	g, sent := newRecordingGatherer(window, true)
	start := time.Now()
	sendFirst(t, g, sent)
	g.add(1, sentCall{leader: 1, id: 2})
	g.add(1, sentCall{leader: 1, id: 3})
	cs := nextSend(t, sent, "the calls after the first")
	if len(cs) != 2 || cs[0].id != 2 || cs[1].id != 3 {
		t.Fatalf("second send carried %v, want calls 2 and 3 together", cs)
	}
	if d := cs[0].at.Sub(start); d < window {
		t.Errorf("calls 2 and 3 went %v after the first call, within its window of %v", d, window)
	}
}

// A gatherer that is not eager (the consumer's fetches) waits out its
// window even for a lone call.
func TestGathererNotEagerWaitsItsWindow(t *testing.T) {
	t.Parallel()
	const window = 300 * time.Millisecond
	g, sent := newRecordingGatherer(window, false)
	start := time.Now()
	g.add(1, sentCall{leader: 1, id: 1})
	cs := nextSend(t, sent, "a lone call")
	if d := cs[0].at.Sub(start); d < window {
		t.Errorf("a lone call went after %v, within the window of %v", d, window)
	}
}

// blockedGatherer returns an eager gatherer with an hour's window whose
// first call has been sent and whose send of it blocks until release is
// closed; q is leader 1's queue.
func blockedGatherer(t *testing.T) (g *gatherer[sentCall], sent chan []sentCall, release chan struct{}, q *gatherQueue[sentCall]) {
	t.Helper()
	release = make(chan struct{})
	sent = make(chan []sentCall, 8)
	g = newGatherer(time.Hour, func(sentCall) bool { return true }, func(cs []sentCall) {
		sent <- cs
		if cs[0].id == 1 {
			<-release
		}
	})
	g.eager = true
	g.add(1, sentCall{leader: 1, id: 1})
	nextSend(t, sent, "the first call")
	g.mu.Lock()
	defer g.mu.Unlock()
	return g, sent, release, g.queues[1]
}

// noSend fails when the gatherer sends anything within 200ms.
func noSend(t *testing.T, sent chan []sentCall, why string) {
	t.Helper()
	select {
	case cs := <-sent:
		t.Fatalf("%v went %s", cs, why)
	case <-time.After(200 * time.Millisecond):
	}
}

// While a leader's request is in flight, an eager gatherer's next call waits
// for its window, however long ago that request went: traffic that keeps a
// request in flight is not light.
func TestEagerGathererWaitsWhileARequestIsInFlight(t *testing.T) {
	t.Parallel()
	g, sent, release, q := blockedGatherer(t)
	defer close(release)
	q.mu.Lock()
	q.last = time.Now().Add(-2 * time.Hour) // the request in flight went long ago
	q.gap = 10 * time.Hour                  // and calls have come far apart
	q.mu.Unlock()
	g.add(1, sentCall{leader: 1, id: 2})
	noSend(t, sent, "at once while its leader's request was in flight")
}

// A call that comes within a window of the answer to its leader's last
// request waits for its window, however long ago that request went: the
// leader was busy until then.
func TestEagerGathererWaitsAfterARecentAnswer(t *testing.T) {
	t.Parallel()
	g, sent, release, q := blockedGatherer(t)
	q.mu.Lock()
	q.last = time.Now().Add(-2 * time.Hour) // the request went long ago
	q.gap = 10 * time.Hour                  // and calls have come far apart
	q.mu.Unlock()
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		inflight := q.inflight
		q.mu.Unlock()
		if inflight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first request was never answered")
		}
		time.Sleep(time.Millisecond)
	}
	g.add(1, sentCall{leader: 1, id: 2})
	noSend(t, sent, "at once, right after its leader's last answer")
}

// setIdle makes leader 1's queue look as if its last call and its last
// request went ago.
func setIdle(g *gatherer[sentCall], ago time.Duration) {
	g.mu.Lock()
	q := g.queues[1]
	g.mu.Unlock()
	q.mu.Lock()
	q.lastCall, q.last = time.Now().Add(-ago), time.Now().Add(-ago)
	q.mu.Unlock()
}

// Calls that come five windows apart each go at once, every time.
func TestEagerGathererSendsSpacedCallsAtOnce(t *testing.T) {
	t.Parallel()
	g, sent := newRecordingGatherer(time.Hour, true)
	for id := 1; id <= 4; id++ {
		g.add(1, sentCall{leader: 1, id: id})
		if cs := nextSend(t, sent, fmt.Sprintf("call %d, five windows after the one before", id)); len(cs) != 1 || cs[0].id != id {
			t.Fatalf("send carried %v, want call %d alone", cs, id)
		}
		setIdle(g, 5*time.Hour)
	}
}

// Calls that have come fast wait for a window even when the leader is idle
// at the moment: publishers that wait for their last call come back
// together after a pause, and the first of them must not go alone.
func TestEagerGathererGathersSteadyTrafficAfterAPause(t *testing.T) {
	t.Parallel()
	g, sent := newRecordingGatherer(time.Hour, true)
	sendFirst(t, g, sent)
	g.mu.Lock()
	q := g.queues[1]
	g.mu.Unlock()
	q.mu.Lock()
	q.gap = time.Hour / 10 // calls have come ten to a window
	q.mu.Unlock()
	setIdle(g, 2*time.Hour) // but the last one, and the last answer, were a while ago
	g.add(1, sentCall{leader: 1, id: 2})
	noSend(t, sent, "at once, although calls had come ten to a window")
}
