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
type connCounter struct{ n atomic.Int64 }

func (c *connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                         {}

func (c *connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		c.n.Add(1)
	case *stats.ConnEnd:
		c.n.Add(-1)
	}
}

// limitListener closes connections accepted while the boat holds
// --max-connections. It returns accepted connections as they are. The count
// moves when grpc-go has finished a connection's handshake, so a burst of
// simultaneous handshakes may pass the limit by the handshakes in flight.
type limitListener struct {
	net.Listener
	b *Boat
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.b.conns.n.Load() < int64(l.b.cfg.MaxConnections) {
			return c, nil
		}
		l.b.metrics.LimitRejections.WithLabelValues("max_connections").Inc()
		_ = c.Close()
	}
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
	ap, err := netip.ParseAddrPort(p.Addr.String())
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
