package grpcx

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// serveWithLimits runs a gRPC server built with ServerOptions(l).
func serveWithLimits(t *testing.T, l Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions(l)...)
	SetServing(NewHealth(srv), true)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// A socket that never sends the HTTP/2 preface is closed after
// HandshakeTimeout (grpc-go's default holds it 120 s).
func TestHandshakeTimeout(t *testing.T) {
	t.Parallel()
	addr := serveWithLimits(t, Limits{HandshakeTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("a connection that sent nothing is still open after 5s, want it closed after the 300ms handshake timeout")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("closed after %s, before the handshake timeout", d)
	}
}

// An HTTP/2 connection that finishes its handshake and opens no stream gets
// a GOAWAY after IdleTimeout and is closed (grpc-go's default keeps it for
// ever); one that makes calls is served.
func TestIdleConnectionClosed(t *testing.T) {
	t.Parallel()
	addr := serveWithLimits(t, Limits{IdleTimeout: 500 * time.Millisecond})

	cc, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call: %v", err)
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	goAway := false
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection without a stream is still open after 10s (GOAWAY seen: %v), want it closed after the 500ms idle timeout", goAway)
		}
		if err != nil {
			break // closed by the server
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			goAway = true
		}
	}
	if !goAway {
		t.Fatal("closed without a GOAWAY")
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("closed after %s, before the idle timeout", d)
	}
}

// The bounds have defaults and are checked.
func TestLimitsDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	var l Limits
	l.Defaults()
	if l.HandshakeTimeout != DefaultHandshakeTimeout || l.IdleTimeout != DefaultIdleTimeout || l.Validate() != nil {
		t.Fatalf("defaults %+v (%v)", l, l.Validate())
	}
	for flag, edit := range map[string]func(*Limits){
		"--grpc-handshake-timeout": func(l *Limits) { l.HandshakeTimeout = 99 * time.Millisecond },
		"--grpc-idle-timeout":      func(l *Limits) { l.IdleTimeout = 99 * time.Millisecond },
	} {
		bad := l
		edit(&bad)
		if err := bad.Validate(); err == nil || err.Error()[:len(flag)] != flag {
			t.Errorf("%s: %v, want an error naming it", flag, err)
		}
	}
}
