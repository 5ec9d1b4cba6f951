// Package outage turns the failures of a retry loop into two log lines: one
// WARN when a dependency starts failing and one INFO when it works again,
// with the number of failures in between. The failures themselves go to
// debug level, so an outage does not flood the log.
package outage

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// Tracker follows the state of one dependency. It is safe for concurrent
// use.
type Tracker struct {
	log  *zap.Logger
	what string

	mu      sync.Mutex
	failing bool
	since   time.Time
	fails   int
}

// New returns a tracker of the dependency named what ("kafka", "station",
// "etcd lease"), logging to log.
func New(log *zap.Logger, what string) *Tracker {
	return &Tracker{log: log, what: what}
}

// Fail records a failed attempt. The first failure after a success is
// logged at WARN; later ones at debug.
func (t *Tracker) Fail(err error) {
	t.mu.Lock()
	first := !t.failing
	if first {
		t.failing, t.since, t.fails = true, time.Now(), 0
	}
	t.fails++
	t.mu.Unlock()
	if first {
		t.log.Warn("outage began; retrying", zap.String("dependency", t.what), zap.Error(err))
		return
	}
	t.log.Debug("still failing", zap.String("dependency", t.what), zap.Error(err))
}

// OK records a success. It ends an outage with an INFO line naming how long
// it lasted and how many attempts failed.
func (t *Tracker) OK() {
	t.mu.Lock()
	if !t.failing {
		t.mu.Unlock()
		return
	}
	t.failing = false
	fails, since := t.fails, t.since
	t.mu.Unlock()
	t.log.Info("outage ended", zap.String("dependency", t.what), zap.Int("failures", fails),
		zap.Duration("lasted", time.Since(since).Round(time.Millisecond)))
}

// Failing reports whether the dependency is failing now.
func (t *Tracker) Failing() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failing
}
