package queue

import (
	"context"
	"errors"
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
