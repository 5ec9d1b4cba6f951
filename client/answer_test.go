package client

import (
	"testing"
)

// Answers go to the request with their id, whatever their order; an answer
// without id (a boat that echoes none) goes to the oldest request; an
// answer for a request whose caller left is dropped.
func TestAnswersMatchedByID(t *testing.T) {
	t.Parallel()
	s := &session{}
	chans := map[int64]chan answer{}
	for range 3 {
		ch := make(chan answer, 1)
		id := s.queue(&s.regs, waiter{ch: ch})
		chans[id] = ch
	}
	s.abandon(&s.regs, 1)
	s.answered(&s.regs, 3, answer{provider: "three"})
	s.answered(&s.regs, 1, answer{provider: "one"})
	s.answered(&s.regs, 0, answer{provider: "oldest"})
	for id, want := range map[int64]string{2: "oldest", 3: "three"} {
		select {
		case a := <-chans[id]:
			if a.provider != want {
				t.Fatalf("request %d got %q, want %q", id, a.provider, want)
			}
		default:
			t.Fatalf("request %d got no answer", id)
		}
	}
	if len(chans[1]) != 0 {
		t.Fatal("the abandoned request got an answer")
	}
	if len(s.regs) != 0 {
		t.Fatalf("%d waiters left", len(s.regs))
	}
}
