package testutil

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target until Cut: then it closes every
// connection and refuses new ones until Restore. Hold instead stalls every
// forwarded byte, connections staying open, until Release. Tests use it to
// partition a service from a backend or from another service.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
	// held is closed by Release; nil: bytes flow.
	held chan struct{}
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
	go p.pipe(u, c)
	p.pipe(c, u)
}

// pipe copies src to dst, waiting while the proxy is held, and closes dst
// when src ends.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			held := p.held
			p.mu.Unlock()
			if held != nil {
				<-held
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Hold stalls every forwarded connection (new ones too) until Release: the
// bytes wait, nothing is closed.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// Release lets the held bytes through.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
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
		if p.held != nil {
			close(p.held)
			p.held = nil
		}
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}
