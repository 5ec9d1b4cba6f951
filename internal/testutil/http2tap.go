package testutil

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/http2"
)

// TappedConn is a connection that keeps a copy of what it read and wrote,
// for a test to look at the frames that crossed it.
type TappedConn struct {
	net.Conn
	mu          sync.Mutex
	read, wrote bytes.Buffer
}

func (c *TappedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.read.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *TappedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.wrote.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// Copies returns what the connection has read and written so far.
func (c *TappedConn) Copies() (read, wrote []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.read.Bytes()), bytes.Clone(c.wrote.Bytes())
}

// TapDialer returns a gRPC context dialer whose connections are tapped; the
// channel gets each connection it opens.
func TapDialer() (func(ctx context.Context, addr string) (net.Conn, error), <-chan *TappedConn) {
	conns := make(chan *TappedConn, 16)
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		tc := &TappedConn{Conn: c}
		select {
		case conns <- tc:
		default:
		}
		return tc, nil
	}, conns
}

// HTTP2Frames calls fn with each frame of a plaintext HTTP/2 byte stream
// of either direction (a frame is valid only during its call).
func HTTP2Frames(t testing.TB, b []byte, fn func(http2.Frame)) {
	t.Helper()
	b = bytes.TrimPrefix(b, []byte(http2.ClientPreface))
	fr := http2.NewFramer(nil, bytes.NewReader(b))
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return
		}
		if err != nil {
			t.Fatalf("read an HTTP/2 frame: %v", err)
		}
		fn(f)
	}
}

// HTTP2Pings counts the PING frames, not their answers, in a plaintext
// HTTP/2 byte stream.
func HTTP2Pings(t testing.TB, b []byte) int {
	t.Helper()
	n := 0
	HTTP2Frames(t, b, func(f http2.Frame) {
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			n++
		}
	})
	return n
}
