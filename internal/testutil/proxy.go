package testutil

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target until Cut: then it closes every
// connection and refuses new ones until Restore. Tests use it to partition a
// service from a backend.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

// StartProxy listens on a free loopback port and forwards to target; it
// stops with the test.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	t.Cleanup(func() {
		_ = ln.Close()
		p.setCut(true)
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.mu.Unlock()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		_ = c.Close()
		_ = u.Close()
		return
	}
	p.conns = append(p.conns, c, u)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
	_, _ = io.Copy(c, u)
	_ = c.Close()
}

// Cut closes every forwarded connection and refuses new ones.
func (p *Proxy) Cut() { p.setCut(true) }

// Restore forwards new connections again.
func (p *Proxy) Restore() { p.setCut(false) }

func (p *Proxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}
