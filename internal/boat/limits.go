package boat

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"

	"github.com/gomsg/gomsg/internal/grpcerr"
)

// connCounter counts the client connections grpc-go holds, from its stats
// events. Counting there leaves the accepted *net.TCPConn unwrapped, which
// grpc-go needs to use its pooled read buffers (a wrapped conn costs each
// idle session ~31 KB).
type connCounter struct {
	n atomic.Int64
	// sources, when set, counts connections per source: a connection takes
	// over the count its accept made (see limitListener).
	sources *sourceConns
}

// sourceCtxKey holds a connection's source key in its stats context.
type sourceCtxKey struct{}

func (c *connCounter) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if c.sources == nil {
		return ctx
	}
	if key, ok := c.sources.established(info.RemoteAddr); ok {
		return context.WithValue(ctx, sourceCtxKey{}, key)
	}
	return ctx
}

func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                       {}

func (c *connCounter) HandleConn(ctx context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		c.n.Add(1)
	case *stats.ConnEnd:
		c.n.Add(-1)
		if key, ok := ctx.Value(sourceCtxKey{}).(netip.Prefix); ok {
			c.sources.release(key)
		}
	}
}

// limitListener closes connections accepted while the boat holds
// --max-connections, or while their source holds --max-connections-per-ip.
// The gRPC listener's count moves when grpc-go has finished a connection's
// handshake, so a burst of simultaneous handshakes may pass
// --max-connections by the handshakes in flight; the per-source count moves
// at accept.
//
// gRPC connections are returned as they are (grpc-go needs the
// *net.TCPConn itself to use its pooled read buffers; a wrapped conn costs
// each idle session ~31 KB): their source count passes to the stats
// handler once the handshake is done (connCounter), or lapses after the
// handshake's deadline. The WebSocket listener (wrap) returns connections
// that give their source's place back when closed.
type limitListener struct {
	net.Listener
	b    *Boat
	wrap bool
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.b.conns.n.Load() >= int64(l.b.cfg.MaxConnections) {
			l.b.countLimit("--max-connections")
			_ = c.Close()
			continue
		}
		key, ok := l.b.sources.acquire(c.RemoteAddr())
		if !ok {
			l.b.countLimit("--max-connections-per-ip")
			_ = c.Close()
			continue
		}
		if l.wrap {
			return &sourceConn{Conn: c, release: func() { l.b.sources.release(key) }}, nil
		}
		l.b.sources.pend(c.RemoteAddr(), key)
		return c, nil
	}
}

// sourceConns counts the open client connections of each source (an IPv4
// address, or an IPv6 /64, as the connect rate keys them) and refuses one
// more past --max-connections-per-ip: connections that never send a
// request, or a body, must not let one source take every connection the
// boat may hold.
type sourceConns struct {
	max int
	// handshake is how long a gRPC connection's handshake may take
	// (--connect-timeout); a pending count lapses a second after it.
	handshake time.Duration

	mu   sync.Mutex
	open map[netip.Prefix]int
	// pending are the gRPC connections accepted whose handshake is not
	// done, by remote address: counted, not yet owned by a connection's
	// stats context.
	pending map[string]*time.Timer
}

func newSourceConns(max int, handshake time.Duration) *sourceConns {
	return &sourceConns{max: max, handshake: handshake, open: make(map[netip.Prefix]int), pending: make(map[string]*time.Timer)}
}

// acquire counts one more connection of addr's source; false (nothing
// counted) when the source holds max already. An address that is no IP
// (none in practice) is not limited.
func (s *sourceConns) acquire(addr net.Addr) (netip.Prefix, bool) {
	key, ok := addrKey(addr)
	if !ok {
		return key, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[key] >= s.max {
		return key, false
	}
	s.open[key]++
	return key, true
}

// release gives back one connection of the source.
func (s *sourceConns) release(key netip.Prefix) {
	if !key.IsValid() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(key)
}

func (s *sourceConns) releaseLocked(key netip.Prefix) {
	if s.open[key]--; s.open[key] <= 0 {
		delete(s.open, key)
	}
}

// pend holds an accepted gRPC connection's count until established takes
// it, or releases it once the handshake's deadline has passed (the
// handshake failed, or the server is stopping).
func (s *sourceConns) pend(addr net.Addr, key netip.Prefix) {
	if !key.IsValid() {
		return
	}
	id := addr.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.pending[id]; ok {
		// The address is in use again: the connection that had it is gone.
		// (A timer that fired meanwhile finds itself replaced and leaves
		// the count alone.)
		old.Stop()
		s.releaseLocked(key)
	}
	var t *time.Timer
	t = time.AfterFunc(s.handshake+time.Second, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.pending[id] == t {
			delete(s.pending, id)
			s.releaseLocked(key)
		}
	})
	s.pending[id] = t
}

// established takes over the count of a gRPC connection whose handshake is
// done; the caller releases it when the connection ends. A connection
// whose pending count lapsed already is counted again.
func (s *sourceConns) established(addr net.Addr) (netip.Prefix, bool) {
	key, ok := addrKey(addr)
	if !ok {
		return key, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.pending[addr.String()]; ok {
		t.Stop()
		delete(s.pending, addr.String())
		return key, true
	}
	s.open[key]++
	return key, true
}

// sourceConn is a WebSocket-listener connection that gives its source's
// place back once closed (http.Server and the WebSocket library may both
// close it).
type sourceConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *sourceConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// connectLimiter applies --connect-rate-per-ip, then --connect-rate (so one
// source refused by its own limit does not use up everyone's).
type connectLimiter struct {
	all   *rate.Limiter
	perIP float64

	mu  sync.Mutex
	ips map[netip.Prefix]*rate.Limiter
}

func newConnectLimiter(all, perIP float64) *connectLimiter {
	return &connectLimiter{
		all:   rate.NewLimiter(rate.Limit(all), max(1, int(all))),
		perIP: perIP,
		ips:   make(map[netip.Prefix]*rate.Limiter),
	}
}

// allow takes a connect token for the stream's peer; it returns the
// refusal, or nil.
func (l *connectLimiter) allow(ctx context.Context) error {
	if key, ok := sourceKey(ctx); ok {
		l.mu.Lock()
		lim := l.ips[key]
		if lim == nil {
			lim = rate.NewLimiter(rate.Limit(l.perIP), max(1, int(l.perIP)))
			l.ips[key] = lim
		}
		ok := lim.Allow()
		l.mu.Unlock()
		if !ok {
			return grpcerr.Limited("--connect-rate-per-ip", "more than %g connects per second from %s; retry later", l.perIP, key)
		}
	}
	if !l.all.Allow() {
		return grpcerr.Limited("--connect-rate", "more than %g connects per second; retry later", float64(l.all.Limit()))
	}
	return nil
}

// sweep forgets sources whose bucket is full again (idle for a second or
// more), so the map holds only recent sources.
func (l *connectLimiter) sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, lim := range l.ips {
		if lim.TokensAt(now) >= float64(lim.Burst()) {
			delete(l.ips, k)
		}
	}
}

// run sweeps every interval until ctx ends.
func (l *connectLimiter) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			l.sweep(now)
		}
	}
}

// countLimit counts a refusal by the limit's flag ("--connect-rate" is
// counted as limit="connect_rate").
func (b *Boat) countLimit(flag string) {
	b.metrics.LimitRejections.WithLabelValues(strings.ReplaceAll(strings.TrimPrefix(flag, "--"), "-", "_")).Inc()
}

// sourceKey is the rate-limit key of the stream's peer: its IPv4 address, or
// its IPv6 /64 (one subscriber's usual allocation).
func sourceKey(ctx context.Context) (netip.Prefix, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Prefix{}, false
	}
	return addrKey(p.Addr)
}

// addrKey is the limit key of a remote address: its IPv4 address, or its
// IPv6 /64.
func addrKey(a net.Addr) (netip.Prefix, bool) {
	if a == nil {
		return netip.Prefix{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Prefix{}, false
	}
	ip := ap.Addr().Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	pfx, err := ip.Prefix(bits)
	return pfx, err == nil
}
