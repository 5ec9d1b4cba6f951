package carrier

import (
	"context"
	"sync"
)

// replayLocks lets one replay at a time read a user's store for one
// platform in this process. Replays of one store come from more than one
// place: the SendOfflineToSession tasks of the task topic and those of the
// retry topic (a replay queued during a partition fails and is retried)
// run on different consumers, and a session's connect queues one too. Two
// replays that read the same page before either deleted it would both push
// it: the device gets every stored message twice.
type replayLocks struct {
	mu sync.Mutex
	m  map[string]*replayLock
}

type replayLock struct {
	sem  chan struct{} // holds a token while a replay runs
	refs int           // holders and waiters; the entry goes at 0
}

// lock waits until no other replay of key runs, or ctx ends.
func (l *replayLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*replayLock)
	}
	e := l.m[key]
	if e == nil {
		e = &replayLock{sem: make(chan struct{}, 1)}
		l.m[key] = e
	}
	e.refs++
	l.mu.Unlock()
	select {
	case e.sem <- struct{}{}:
		return func() { <-e.sem; l.release(key, e) }, nil
	case <-ctx.Done():
		l.release(key, e)
		return nil, ctx.Err()
	}
}

func (l *replayLocks) release(key string, e *replayLock) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.refs--; e.refs == 0 {
		delete(l.m, key)
	}
}
