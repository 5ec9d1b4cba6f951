package testutil

import (
	"net"
	"strconv"
	"testing"
)

// FreePort's ports lie below the ephemeral range, where no outgoing
// connection takes them, and can be bound.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 50 {
		p := FreePort(t)
		if p < minFreePort || p >= low {
			t.Fatalf("FreePort = %d, want in [%d, %d)", p, minFreePort, low)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("FreePort = %d, which cannot be bound: %v", p, err)
		}
		_ = l.Close()
	}
}
