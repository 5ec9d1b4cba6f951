package boat

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/grpcerr"
)

func peerCtx(addr string) context.Context {
	ap, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		panic(err)
	}
	return peer.NewContext(context.Background(), &peer.Peer{Addr: ap})
}

// The per-address connect rate keys IPv4 addresses alone and IPv6 ones by
// their /64, so one subscriber's addresses share a bucket.
func TestConnectRatePerSource(t *testing.T) {
	t.Parallel()
	l := newConnectLimiter(1e6, 2)
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"192.0.2.1:1000", true}, {"192.0.2.1:1001", true}, {"192.0.2.1:1002", false},
		{"192.0.2.2:1000", true}, // another IPv4 address
		{"[2001:db8:1:2::1]:1000", true}, {"[2001:db8:1:2:ffff::9]:1000", true},
		{"[2001:db8:1:2::77]:1000", false}, // same /64
		{"[2001:db8:1:3::1]:1000", true},   // next /64
		{"[::ffff:192.0.2.2]:1000", true},  // IPv4-mapped: 192.0.2.2's bucket
		{"[::ffff:192.0.2.2]:1001", false},
	} {
		err := l.allow(peerCtx(tc.addr))
		if tc.ok != (err == nil) {
			t.Fatalf("%s: %v, want allowed %v", tc.addr, err, tc.ok)
		}
		if err != nil && (status.Code(grpcerr.Status(err)) != codes.ResourceExhausted || grpcerr.DetailCode(grpcerr.Status(err)) == 0) {
			t.Fatalf("%s: %v, want ResourceExhausted with a detail", tc.addr, grpcerr.Status(err))
		}
	}
	// Sources idle long enough to refill are forgotten.
	l.sweep(time.Now().Add(time.Minute))
	if n := len(l.ips); n != 0 {
		t.Fatalf("%d sources kept after a sweep of idle ones", n)
	}
}

// The total connect rate applies on top of the per-source one.
func TestConnectRateTotal(t *testing.T) {
	t.Parallel()
	l := newConnectLimiter(3, 1e6)
	for i := range 5 {
		err := l.allow(peerCtx("192.0.2." + string(rune('1'+i)) + ":1"))
		if (i < 3) != (err == nil) {
			t.Fatalf("connect %d: %v", i, err)
		}
		if err != nil && !containsFlag(err, "--connect-rate") {
			t.Fatalf("connect %d: %v, want it to name --connect-rate", i, err)
		}
	}
}

func containsFlag(err error, flag string) bool {
	var e *grpcerr.Error
	return errors.As(err, &e) && e.Field == flag
}

// The per-source connection count: a source at its cap is refused, a
// released place is taken again, a source with no connection left is
// forgotten (the map holds open sources only), and a gRPC connection whose
// pending count lapsed before its handshake finished is counted again.
func TestSourceConns(t *testing.T) {
	t.Parallel()
	s := newSourceConns(2, time.Hour)
	a := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1}
	b := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 2}
	k, ok := s.acquire(a)
	if _, ok2 := s.acquire(b); !ok || !ok2 {
		t.Fatal("two connections under a cap of 2 refused")
	}
	if _, ok := s.acquire(b); ok {
		t.Fatal("a third connection under a cap of 2 accepted")
	}
	s.release(k)
	if _, ok := s.acquire(b); !ok {
		t.Fatal("a released place not taken again")
	}
	s.release(k)
	s.release(k)
	if n := len(s.open); n != 0 {
		t.Fatalf("%d sources kept with no connection open", n)
	}
	// Established with no pending count (it lapsed): counted again.
	if k, ok := s.established(a); !ok || s.open[k] != 1 {
		t.Fatalf("established after a lapse: %v, count %d; want it counted", ok, s.open[k])
	}
	// Pending, then established: the count moves, not doubles.
	k2, _ := s.acquire(b)
	s.pend(b, k2)
	s.established(b)
	if s.open[k2] != 2 || len(s.pending) != 0 {
		t.Fatalf("count %d, %d pending after the handshake; want 2, 0", s.open[k2], len(s.pending))
	}
}
