package testutil

import (
	"testing"

	"github.com/gomsg/gomsg/internal/embedded"
)

// StartNATS runs an in-process nats-server with JetStream on a free loopback
// port, its file store in a temporary directory, and returns it; the test's
// cleanup stops it (Close may be called earlier to stop it, then again).
func StartNATS(tb testing.TB) *NATS {
	tb.Helper()
	n, err := embedded.StartNATS("127.0.0.1:0", tb.TempDir())
	if err != nil {
		tb.Fatalf("start nats: %v", err)
	}
	s := &NATS{NATS: n}
	tb.Cleanup(s.Close)
	return s
}

// NATS is a nats-server a test runs.
type NATS struct {
	*embedded.NATS
	closed bool
}

// Close stops the server; calling it again does nothing.
func (n *NATS) Close() {
	if !n.closed {
		n.closed = true
		n.NATS.Close()
	}
}
