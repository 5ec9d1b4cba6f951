package boat

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// rawConn opens a plain TCP connection and writes what it is given.
func rawConn(t *testing.T, addr, send string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if send != "" {
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// closedWithin reads c until the server closes it; an error when it is
// still open after d.
func closedWithin(c net.Conn, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errors.New("still open")
	}
	return nil // EOF or a reset: closed
}

// TestSlowRequestsAreCut: on the WebSocket listener a request whose header
// or announced body never arrives is cut once --connect-timeout has
// passed, so that such connections cannot pile up against
// --max-connections (which the gRPC listener shares); an upgraded session
// outlives that deadline.
func TestSlowRequestsAreCut(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	tb := wsBoat(t, func(c *Config) { c.ConnectTimeout = timeout })
	addr := tb.WSAddr()
	base := tb.conns.n.Load()

	for _, tc := range []struct{ name, req string }{
		{"body never sent", "POST /anything HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789"},
		{"connect with a body", "GET " + WSPath + " HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789"},
		{"upgrade with a body", "GET " + WSPath + " HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer u/web\r\n" +
			"Content-Length: 100000\r\n\r\n0123456789"},
		{"chunked body never ended", "POST /anything HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"},
		{"header never ended", "GET " + WSPath + " HTTP/1.1\r\nHost: x\r\n"},
		{"nothing sent", ""},
	} {
		c := rawConn(t, addr, tc.req)
		// The deadline is the connect timeout; the margin covers the
		// server's lingering close (half a second) and a busy machine.
		if err := closedWithin(c, 10*timeout+2*time.Second); err != nil {
			t.Fatalf("%s: %v after %s; want it cut after --connect-timeout %s", tc.name, err, 10*timeout+2*time.Second, timeout)
		}
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		// The harness's idle health connection may be closed meanwhile.
		if n := tb.conns.n.Load(); n > base {
			return testutil.Errorf("%d connections counted, want at most %d", n, base)
		}
		return nil
	})

	// A session lives on past the request's deadline: pinged and pushed to
	// well after it.
	w := wsConnect(t, tb, WSProto, "long/web")
	time.Sleep(4 * timeout) // the session must outlive the request deadline: time is what is tested
	w.send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ping{Ping: &msgpb.Ping{Id: 7}}})
	p, err := w.recv()
	if err != nil || p.GetPong().GetId() != 7 {
		t.Fatalf("after %s: %v %v, want Pong 7", 4*timeout, p, err)
	}
	if _, err := tb.internal.PushMessages(t.Context(), &boatpb.PushMessagesRequest{Sid: w.sid, Replay: true,
		Msgs: []*msgpb.Message{{Seq: 1}}}); err != nil {
		t.Fatalf("push after %s: %v", 4*timeout, err)
	}
	if p, err := w.recv(); err != nil || len(p.GetMessages().GetMsgs()) != 1 {
		t.Fatalf("after %s: %v %v, want the message", 4*timeout, p, err)
	}
}

// TestMaxConnectionsPerIP: one source holds at most --max-connections-per-ip
// client connections, gRPC and WebSocket together, counted from accept (a
// connection that never finishes its handshake counts); one more is closed
// at once and counted, and a place freed is taken again.
func TestMaxConnectionsPerIP(t *testing.T) {
	t.Parallel()
	// The harness's health connection (gRPC, 127.0.0.1) is one of the
	// three; idle, it is closed after twice the connect timeout, well after
	// the first part.
	const timeout = time.Second
	tb := wsBoat(t, func(c *Config) { c.MaxConnectionsPerIP = 3; c.ConnectTimeout = timeout })
	refused := func() float64 {
		return promtest.ToFloat64(tb.metrics.LimitRejections.WithLabelValues("max_connections_per_ip"))
	}
	grpcIdle := rawConn(t, tb.ClientAddr(), "") // no handshake
	w := wsConnect(t, tb, WSProto, "p1/web")
	held := func() int {
		tb.sources.mu.Lock()
		defer tb.sources.mu.Unlock()
		return tb.sources.open[netip.MustParsePrefix("127.0.0.1/32")]
	}
	if n := held(); n != 3 {
		t.Fatalf("%d connections counted for 127.0.0.1, want 3", n)
	}
	for _, addr := range []string{tb.ClientAddr(), tb.WSAddr()} {
		c := rawConn(t, addr, "")
		if err := closedWithin(c, timeout/3); err != nil {
			t.Fatalf("connection to %s beyond the cap: %v, want it closed at once", addr, err)
		}
	}
	// The refused client dials once: a client left to reconnect would take
	// the place freed below and be counted among those held.
	var dialed atomic.Bool
	if _, err := open(t, "passthrough:///boat", "p2", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		if dialed.Swap(true) {
			return nil, errors.New("one connection only")
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", tb.ClientAddr())
	})); err == nil {
		t.Fatal("a gRPC session beyond --max-connections-per-ip 3 connected")
	}
	if got := refused(); got < 3 {
		t.Fatalf("limit_rejections{max_connections_per_ip} %g, want at least 3", got)
	}

	// The WebSocket's place comes back when it closes, the idle gRPC
	// connection's once its handshake deadline has passed.
	_ = w.c.CloseNow()
	_ = grpcIdle.Close()
	// What is left is what the boat holds: at most the health connection.
	agree := func() error {
		if n, want := held(), int(tb.conns.n.Load()); n != want {
			return testutil.Errorf("%d connections counted for 127.0.0.1, want %d (those held)", n, want)
		}
		return nil
	}
	testutil.WaitFor(t, 10*time.Second, agree)
	if n := held(); n > 1 {
		t.Fatalf("%d connections counted for 127.0.0.1 after the others closed, want at most 1", n)
	}
	c3, err := net.Dial("tcp", tb.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	p3 := connectVia(t, c3, "p3")
	wsConnect(t, tb, WSProto, "p4/web")
	testutil.WaitFor(t, 5*time.Second, agree)
	if n := held(); n < 2 {
		t.Fatalf("%d connections counted for 127.0.0.1, want the two sessions'", n)
	}
	// An established gRPC connection gives its place back when it ends.
	p3.cancel()
	_ = c3.Close()
	testutil.WaitFor(t, 5*time.Second, agree)
}

// connectVia opens a session for uid over the connection c.
func connectVia(t *testing.T, c net.Conn, uid string) *client {
	t.Helper()
	used := false
	cl, err := openToken(t, "passthrough:///boat", uid+"/ios", grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
		if used {
			return nil, errors.New("one connection only")
		}
		used = true
		return c, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// The internal listener (carrier's) bounds pre-handshake sockets as the
// client listener does: one that sends nothing is closed after
// --grpc-handshake-timeout.
func TestInternalListenerHandshakeTimeout(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.GRPC.HandshakeTimeout = 300 * time.Millisecond })
	c := rawConn(t, tb.InternalAddr(), "")
	if err := closedWithin(c, 5*time.Second); err != nil {
		t.Fatalf("a socket that sent nothing to the internal listener: %v after 5s, want it closed after 300ms", err)
	}
}

// TestEstablishedSessionKeepsItsPlace: a gRPC session holds its source's
// place for as long as it lasts, not only while its handshake may take
// (were the count to lapse with the handshake's deadline, one source could
// open any number of connections, a few at a time): with two sessions open
// under --max-connections-per-ip 2, a third is refused and counted, and a
// closed session's place is taken again.
func TestEstablishedSessionKeepsItsPlace(t *testing.T) {
	t.Parallel()
	// A pending count lapses 1.3s after accept; the idle health connection
	// is closed after 600ms.
	const timeout = 300 * time.Millisecond
	tb := startBoat(t, nil, func(c *Config) { c.MaxConnectionsPerIP = 2; c.ConnectTimeout = timeout })
	held := func() int {
		tb.sources.mu.Lock()
		defer tb.sources.mu.Unlock()
		return tb.sources.open[netip.MustParsePrefix("127.0.0.1/32")]
	}
	holds := func(want int) func() error {
		return func() error {
			tb.sources.mu.Lock()
			pending := len(tb.sources.pending)
			tb.sources.mu.Unlock()
			if n, c := held(), tb.conns.n.Load(); pending > 0 || n != want || c != int64(want) {
				return testutil.Errorf("%d connections counted for 127.0.0.1, %d held, %d handshakes pending; want %d, %d, 0", n, c, pending, want, want)
			}
			return nil
		}
	}
	// The idle health connection is closed, and its place given back.
	testutil.WaitFor(t, 10*time.Second, holds(0))
	dial := func() net.Conn {
		c, err := net.Dial("tcp", tb.ClientAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c1 := dial()
	p1 := connectVia(t, c1, "p1")
	connectVia(t, dial(), "p2")
	// No handshake is left pending (none to lapse): the sessions' own
	// counts, which last as long as they do, hold both places.
	testutil.WaitFor(t, 10*time.Second, holds(2))
	var dialed atomic.Bool
	if _, err := open(t, "passthrough:///boat", "p3", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		if dialed.Swap(true) {
			return nil, errors.New("one connection only")
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", tb.ClientAddr())
	})); err == nil {
		t.Fatal("a third gRPC session connected under --max-connections-per-ip 2")
	}
	if got := promtest.ToFloat64(tb.metrics.LimitRejections.WithLabelValues("max_connections_per_ip")); got != 1 {
		t.Fatalf("limit_rejections{max_connections_per_ip} %g, want 1", got)
	}
	if err := holds(2)(); err != nil {
		t.Fatal(err)
	}
	// A session ending gives its place back.
	p1.cancel()
	_ = c1.Close()
	testutil.WaitFor(t, 10*time.Second, holds(1))
	connectVia(t, dial(), "p4")
	testutil.WaitFor(t, 10*time.Second, holds(2))
}
