// Package boat holds client connections: one gRPC bidirectional stream per
// device session. It reports sessions to station, delivers the messages
// carrier sends it (waiting for the client's ACK when asked, timed on one
// hashed timing wheel), kicks sessions out, and registers itself in etcd.
package boat

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/outage"
	"github.com/gomsg/gomsg/internal/timewheel"
	"github.com/gomsg/gomsg/internal/tracing"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// Config is boat's configuration.
type Config struct {
	// ID names the boat in etcd and in session values ("<platform>-<id>"; the
	// id may contain '-', since platform names never do).
	ID string
	// ClientAddr serves the client stream (msgpb.Msg).
	ClientAddr string
	// WSAddr serves the same sessions over WebSocket at WSPath (browsers);
	// empty: off.
	WSAddr string
	// WSOrigins are the host patterns (path.Match, against the Origin's
	// host[:port]) a browser's Origin must match; empty: the request's own
	// host only. Requests without an Origin (non-browsers) are allowed.
	WSOrigins []string
	// WSHandler, when set, serves every other path of the WebSocket
	// listener (gomsg dev's demo page).
	WSHandler http.Handler
	// MQTTAddr serves the same sessions over MQTT 5 and 3.1.1 (device
	// MQTT client libraries); empty: off. TLS when TLS is set.
	MQTTAddr string
	// InternalAddr serves carrier (boatpb.Boat).
	InternalAddr string
	// AdvertiseAddr is the InternalAddr others dial; empty: the bound address.
	AdvertiseAddr string
	EtcdPrefix    string
	LeaseTTL      time.Duration
	// SendQueue bounds each session's queue of payloads not yet sent.
	SendQueue int
	// SendQueueBytes bounds the same queue in bytes (encoded payloads):
	// a session whose queue would pass it is a slow consumer. An empty
	// queue takes one payload of any size.
	SendQueueBytes int
	// MaxAckWait caps the ack_wait carrier may ask for.
	MaxAckWait time.Duration
	// WheelTick is the ACK timing wheel's resolution.
	WheelTick time.Duration
	// WriteTimeout is how long one send to a client may block (a client
	// that stopped reading) before the session is kicked as a slow consumer.
	WriteTimeout time.Duration
	// DisconnectBatch and DisconnectFlush bound how disconnects are reported.
	DisconnectBatch int
	DisconnectFlush time.Duration
	// DisconnectBacklog caps the disconnect reports kept while station is
	// unreachable; beyond it the newest are dropped (and counted).
	DisconnectBacklog int
	// ShutdownGrace bounds the drain on stop.
	ShutdownGrace time.Duration

	// TLS serves the client stream and InternalTLS the internal API; nil:
	// plaintext.
	TLS         *tls.Config
	InternalTLS *tls.Config
	// InternalToken is what carrier must send on the internal API (and
	// what boat sends to station); empty accepts any caller.
	InternalToken string
	// GRPC are the message and header limits of both servers.
	GRPC grpcx.Limits
	// MaxConnections caps the client connections the boat holds; more are
	// closed as soon as they are accepted.
	MaxConnections int
	// MaxConnectionsPerIP caps the client connections (gRPC and WebSocket
	// together) open from one source address (an IPv6 /64 counts as one);
	// more are closed as soon as they are accepted.
	MaxConnectionsPerIP int
	// MaxStreamsPerConnection caps the streams (sessions) on one client
	// connection.
	MaxStreamsPerConnection int
	// ConnectRate and ConnectRatePerIP cap new sessions per second, in all
	// and per source address (an IPv6 /64 counts as one); a second's worth
	// may come at once.
	ConnectRate      float64
	ConnectRatePerIP float64
	// ConnectTimeout bounds a session's Connect (authentication and
	// station); a connection that opens no stream is closed after twice it.
	// A gRPC connection's handshake, and an HTTP request's header and body
	// on the WebSocket listener, must arrive within it.
	ConnectTimeout time.Duration
	// GhostSweep is how often the boat compares the sessions station
	// recorded for it with the ones it holds, and reports the others ended.
	GhostSweep time.Duration

	// SessionRequestRate and SessionRequestBurst bound the Pull,
	// RegisterDevice, JoinRoom and LeaveRoom requests of one session: a
	// token bucket of SessionRequestBurst refilled SessionRequestRate a
	// second; a request past it is answered RESOURCE_EXHAUSTED.
	SessionRequestRate  float64
	SessionRequestBurst int

	// MaxRoomsPerSession (--max-rooms-per-session) caps the rooms one
	// session is in.
	MaxRoomsPerSession int
	// MaxRooms (--max-rooms) caps the rooms with members the boat holds.
	MaxRooms int
	// RoomBatch (--room-batch) caps the messages of one room frame.
	RoomBatch int
	// RoomBatchWindow (--room-batch-window) is how long a room's batcher
	// gathers messages after the first before it sends the frame. Unset (0)
	// takes the default; NoBatchWindow (any negative value, what the flag's
	// 0 must be passed as) sends what is queued without waiting.
	RoomBatchWindow time.Duration
	// RoomQueue (--room-queue) caps the messages a room's batcher holds;
	// Broadcast waits for space (back-pressure to carrier).
	RoomQueue int
}

// NoBatchWindow is the RoomBatchWindow that sends what a room's batcher
// holds without waiting for more (--room-batch-window 0).
const NoBatchWindow time.Duration = -1

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.EtcdPrefix == "" {
		c.EtcdPrefix = "/gomsg"
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.SendQueue == 0 {
		c.SendQueue = 64
	}
	if c.SendQueueBytes == 0 {
		c.SendQueueBytes = 4 << 20
	}
	if c.MaxAckWait == 0 {
		c.MaxAckWait = time.Minute
	}
	if c.WheelTick == 0 {
		c.WheelTick = 50 * time.Millisecond
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.DisconnectBatch == 0 {
		c.DisconnectBatch = 500
	}
	if c.DisconnectBacklog == 0 {
		c.DisconnectBacklog = 100000
	}
	if c.DisconnectFlush == 0 {
		c.DisconnectFlush = 50 * time.Millisecond
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	c.GRPC.Defaults()
	if c.MaxConnections == 0 {
		c.MaxConnections = 100000
	}
	if c.MaxConnectionsPerIP == 0 {
		c.MaxConnectionsPerIP = 1000
	}
	if c.MaxStreamsPerConnection == 0 {
		c.MaxStreamsPerConnection = 16
	}
	if c.ConnectRate == 0 {
		c.ConnectRate = 2000
	}
	if c.ConnectRatePerIP == 0 {
		c.ConnectRatePerIP = 200
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.GhostSweep == 0 {
		c.GhostSweep = time.Minute
	}
	if c.SessionRequestRate == 0 {
		c.SessionRequestRate = 50
	}
	if c.SessionRequestBurst == 0 {
		c.SessionRequestBurst = 100
	}
	if c.MaxRoomsPerSession == 0 {
		c.MaxRoomsPerSession = 16
	}
	if c.MaxRooms == 0 {
		c.MaxRooms = 100000
	}
	if c.RoomBatch == 0 {
		c.RoomBatch = 32
	}
	if c.RoomBatchWindow == 0 {
		c.RoomBatchWindow = 10 * time.Millisecond
	}
	if c.RoomQueue == 0 {
		c.RoomQueue = 1024
	}
}

// Validate names the first bad setting.
func (c *Config) Validate() error {
	switch {
	case c.ID == "":
		return errors.New("--boat-id: must be set")
	case c.ClientAddr == "":
		return errors.New("--client-addr: must be set")
	case c.InternalAddr == "":
		return errors.New("--boat-internal-addr: must be set")
	case c.SendQueue < 1:
		return fmt.Errorf("--send-queue: %d, must be at least 1", c.SendQueue)
	case c.SendQueueBytes < 1024:
		return fmt.Errorf("--send-queue-bytes: %d, must be at least 1024", c.SendQueueBytes)
	case c.DisconnectBacklog < 1:
		return fmt.Errorf("--disconnect-backlog: %d, must be positive", c.DisconnectBacklog)
	case c.LeaseTTL < time.Second:
		return fmt.Errorf("--lease-ttl: %s, must be at least 1s", c.LeaseTTL)
	case c.MaxConnections < 1:
		return fmt.Errorf("--max-connections: %d, must be positive", c.MaxConnections)
	case c.MaxConnectionsPerIP < 1:
		return fmt.Errorf("--max-connections-per-ip: %d, must be positive", c.MaxConnectionsPerIP)
	case c.MaxStreamsPerConnection < 1:
		return fmt.Errorf("--max-streams-per-connection: %d, must be positive", c.MaxStreamsPerConnection)
	case c.ConnectRate < 1:
		return fmt.Errorf("--connect-rate: %g, must be at least 1", c.ConnectRate)
	case c.ConnectRatePerIP < 1:
		return fmt.Errorf("--connect-rate-per-ip: %g, must be at least 1", c.ConnectRatePerIP)
	case c.ConnectTimeout < 100*time.Millisecond:
		return fmt.Errorf("--connect-timeout: %s, must be at least 100ms", c.ConnectTimeout)
	case c.GhostSweep < 100*time.Millisecond:
		return fmt.Errorf("--ghost-sweep-interval: %s, must be at least 100ms", c.GhostSweep)
	case c.SessionRequestRate <= 0:
		return fmt.Errorf("--session-request-rate: %g, must be positive", c.SessionRequestRate)
	case c.SessionRequestBurst < 1:
		return fmt.Errorf("--session-request-burst: %d, must be positive", c.SessionRequestBurst)
	case c.MaxRoomsPerSession < 1:
		return fmt.Errorf("--max-rooms-per-session: %d, must be positive", c.MaxRoomsPerSession)
	case c.MaxRooms < 1:
		return fmt.Errorf("--max-rooms: %d, must be positive", c.MaxRooms)
	case c.RoomBatch < 1:
		return fmt.Errorf("--room-batch: %d, must be positive", c.RoomBatch)
	case c.RoomQueue < c.RoomBatch:
		return fmt.Errorf("--room-queue: %d, must be at least --room-batch (%d)", c.RoomQueue, c.RoomBatch)
	}
	for _, o := range c.WSOrigins {
		if _, err := path.Match(o, ""); err != nil || o == "" || strings.Contains(o, "://") {
			return fmt.Errorf("--ws-origins: %q: want a host pattern such as app.example.com or *.example.com:8443", o)
		}
	}
	return c.GRPC.Validate()
}

// Boat is the connection service.
type Boat struct {
	cfg     Config
	log     *zap.Logger
	metrics *metrics.Metrics
	etcd    *clientv3.Client
	station stationpb.StationClient
	online  prometheus.Gauge

	wheel       *timewheel.Wheel
	sessions    registry
	rooms       rooms
	allBatch    *batcher       // broadcasts to every session
	batchers    sync.WaitGroup // batcher goroutines running
	stopping    chan struct{}  // closed once the servers have stopped
	disconnects *reporter
	member      *discovery.Member
	// stationDown logs an outage of station once, not per failed call.
	stationDown *outage.Tracker
	// tokenRefusals logs devices refused for their token, rate-limited.
	tokenRefusals *outage.Refusals

	clientSrv   *grpc.Server
	internalSrv *grpc.Server
	health      []*health.Server
	registered  atomic.Bool // holds its id in etcd and cleared a previous run's sessions
	draining    atomic.Bool
	// lapsed is set while the boat's etcd registration may have lapsed:
	// another process may hold its id, so it serves no session.
	lapsed     atomic.Bool
	servingMu  sync.Mutex // orders health changes
	clientLn   net.Listener
	internalLn net.Listener
	ws         *wsServer   // nil when WSAddr is empty
	mqtt       *mqttServer // nil when MQTTAddr is empty

	streams sync.WaitGroup // receive goroutines of live streams

	conns    connCounter     // client connections held
	sources  *sourceConns    // client connections held per source
	connects *connectLimiter // connect rates

	// holdHook, set only by tests, runs in Loop between the lapsed check
	// and holding the new session, with the stream's context.
	holdHook func(context.Context)
	// connectedHook, set only by tests, runs once a session's Connected
	// payload is queued, with its sid.
	connectedHook func(sid string)
}

// New builds a boat; Listen then Run start it.
func New(cfg Config, log *zap.Logger, m *metrics.Metrics, etcd *clientv3.Client, station stationpb.StationClient) (*Boat, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = log.With(zap.String("component", "boat"), zap.String("boat", cfg.ID))
	b := &Boat{
		cfg:     cfg,
		log:     log,
		metrics: m,
		online:  m.SessionsOnline.WithLabelValues(cfg.ID),
		etcd:    etcd,
		station: station,
		wheel:   timewheel.New(cfg.WheelTick, 1024),

		stopping: make(chan struct{}),
	}
	b.sessions.init()
	b.rooms.init()
	b.rooms.maxRooms = cfg.MaxRooms
	b.rooms.gauge = m.BoatRooms.WithLabelValues(cfg.ID)
	b.rooms.members = m.BoatRoomMembers.WithLabelValues(cfg.ID)
	b.rooms.newBatcher = func(name string, r *roomState) *batcher { return b.newBatcher(name, r.snapshot) }
	b.allBatch = b.newBatcher("", b.heldSessions)
	b.stationDown = outage.New(log, "station")
	b.tokenRefusals = outage.NewRefusals(log, "device connect refused")
	b.disconnects = newReporter(cfg.ID, station, log, cfg.DisconnectBatch, cfg.DisconnectBacklog, cfg.DisconnectFlush)
	b.disconnects.stationDown = b.stationDown
	b.disconnects.dropped = func() { b.countLimit("--disconnect-backlog") }
	b.connects = newConnectLimiter(cfg.ConnectRate, cfg.ConnectRatePerIP)
	b.sources = newSourceConns(cfg.MaxConnectionsPerIP, cfg.ConnectTimeout)
	b.conns.sources = b.sources
	b.clientSrv = grpc.NewServer(grpcx.ServerOptions(cfg.GRPC, grpcx.ServerTLS(cfg.TLS),
		// A connection that opens no stream is closed after twice the
		// connect timeout; its handshake must finish within it.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second,
			MaxConnectionIdle: 2 * cfg.ConnectTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(cfg.ConnectTimeout),
		grpc.MaxConcurrentStreams(uint32(cfg.MaxStreamsPerConnection)),
		// Devices send ACKs and small requests: HTTP/2's initial 64 KiB
		// is room enough, and what a device may send unread stays there.
		grpc.StaticStreamWindowSize(deviceWindow), grpc.StaticConnWindowSize(deviceWindow),
		grpc.StatsHandler(&b.conns),
		// Room frames are marshalled once for all their members.
		grpc.ForceServerCodecV2(newFrameCodec()),
	)...)
	msgpb.RegisterMsgServer(b.clientSrv, &clientServer{b: b})
	if cfg.WSAddr != "" {
		b.ws = newWSServer(b)
	}
	if cfg.MQTTAddr != "" {
		b.mqtt = newMQTTServer(b)
	}
	b.internalSrv = grpc.NewServer(grpcx.ServerOptions(cfg.GRPC, grpcx.ServerTLS(cfg.InternalTLS), tracing.ServerOption(), b.internalAuth())...)
	boatpb.RegisterBoatServer(b.internalSrv, &internalServer{b: b})
	reflection.Register(b.internalSrv)
	b.health = []*health.Server{grpcx.NewHealth(b.clientSrv), grpcx.NewHealth(b.internalSrv)}
	return b, nil
}

// deviceWindow is how much a device may send on a connection, and on each
// of its streams, before boat has read it.
const deviceWindow = 64 << 10

// Listen binds both listeners, so the addresses are known before Run.
func (b *Boat) Listen() error {
	var err error
	if b.clientLn, err = net.Listen("tcp", b.cfg.ClientAddr); err != nil {
		return fmt.Errorf("boat client listener: %w", err)
	}
	if b.internalLn, err = net.Listen("tcp", b.cfg.InternalAddr); err != nil {
		_ = b.clientLn.Close()
		return fmt.Errorf("boat internal listener: %w", err)
	}
	if b.ws != nil {
		if err := b.ws.listen(b.cfg.WSAddr, b.cfg.TLS); err != nil {
			_ = b.clientLn.Close()
			_ = b.internalLn.Close()
			return err
		}
	}
	if b.mqtt != nil {
		if err := b.mqtt.listen(b.cfg.MQTTAddr, b.cfg.TLS); err != nil {
			_ = b.clientLn.Close()
			_ = b.internalLn.Close()
			if b.ws != nil {
				_ = b.ws.ln.Close()
			}
			return err
		}
	}
	return nil
}

// MQTTAddr is the bound MQTT address (after Listen); empty when the
// transport is off.
func (b *Boat) MQTTAddr() string {
	if b.mqtt == nil {
		return ""
	}
	return b.mqtt.ln.Addr().String()
}

// WSAddr is the bound WebSocket address (after Listen); empty when the
// transport is off.
func (b *Boat) WSAddr() string {
	if b.ws == nil {
		return ""
	}
	return b.ws.ln.Addr().String()
}

// WSURL is where WebSocket sessions connect (after Listen): ws:// or, with
// TLS, wss://; empty when the transport is off.
func (b *Boat) WSURL() string {
	if b.ws == nil {
		return ""
	}
	scheme := "ws"
	if b.cfg.TLS != nil {
		scheme = "wss"
	}
	return scheme + "://" + b.WSAddr() + WSPath
}

// listensOn says whether ln is bound to addr: addr's port, on addr's IP or
// on every address of a host that has addr's IP. No other process of this
// host can then be listening on addr.
func listensOn(ln net.Listener, addr string) bool {
	want, err := netip.ParseAddrPort(addr)
	if err != nil {
		return false
	}
	got, ok := ln.Addr().(*net.TCPAddr)
	if !ok || got.Port != int(want.Port()) {
		return false
	}
	ip, _ := netip.AddrFromSlice(got.IP)
	ip = ip.Unmap()
	if ip == want.Addr().Unmap() {
		return true
	}
	if !ip.IsUnspecified() {
		return false
	}
	ifaces, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range ifaces {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == want.Addr().Unmap() {
			return true
		}
	}
	return false
}

// ClientAddr is the bound client address (after Listen).
func (b *Boat) ClientAddr() string { return b.clientLn.Addr().String() }

// InternalAddr is the bound internal address (after Listen).
func (b *Boat) InternalAddr() string { return b.internalLn.Addr().String() }

// Run registers in etcd and serves until ctx ends, then drains: it leaves
// etcd first, tells clients to reconnect elsewhere, reports their disconnects
// in batches and stops the servers.
func (b *Boat) Run(ctx context.Context) error {
	if b.clientLn == nil {
		if err := b.Listen(); err != nil {
			return err
		}
	}
	adv := b.cfg.AdvertiseAddr
	if adv == "" {
		adv = b.InternalAddr()
	}
	// A previous run of this id registered under the address this run
	// now listens on has stopped listening there, so it is gone (a crash):
	// its lease is revoked rather than waited out, and the restarted boat
	// serves at once.
	gone := func(registered string) bool { return registered == adv && listensOn(b.internalLn, adv) }
	member, err := discovery.Join(ctx, b.etcd, b.log, b.cfg.EtcdPrefix, "boat:"+b.cfg.ID,
		discovery.BoatKey(b.cfg.EtcdPrefix, b.cfg.ID), adv, b.cfg.LeaseTTL, discovery.TakeOver(gone))
	if err != nil {
		return err
	}
	b.member = member
	member.OnReregister = b.resume
	// Registered under this id, so no other live boat has it: clear what a
	// previous run of this boat left in Redis.
	if err := b.resetPrevious(ctx); err != nil {
		_ = member.Leave(context.WithoutCancel(ctx))
		return err
	}
	b.registered.Store(true)
	b.setServing()
	member.Watch(b.lapse, b.hold)
	b.log.Info("boat serving", zap.String("client_addr", b.ClientAddr()), zap.String("websocket", b.WSURL()), zap.String("mqtt", b.MQTTAddr()), zap.String("internal_addr", adv))

	runCtx, stopBackground := context.WithCancel(context.Background())
	defer stopBackground()
	bg, bgCtx := errgroup.WithContext(runCtx)
	bg.Go(func() error { b.wheel.Run(bgCtx); return nil })
	bg.Go(func() error { return b.disconnects.Run(bgCtx) })
	bg.Go(func() error { return member.Run(bgCtx) })
	bg.Go(func() error { b.connects.run(bgCtx, 10*time.Second); return nil })
	bg.Go(func() error { b.runSweeps(bgCtx); return nil })

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return grpcx.Serve(gctx, b.internalSrv, b.internalLn, b.cfg.ShutdownGrace) })
	g.Go(func() error { return b.serveClients(gctx) })
	if b.ws != nil {
		g.Go(func() error { return b.ws.run(gctx, b.cfg.ShutdownGrace) })
	}
	if b.mqtt != nil {
		g.Go(func() error { return b.mqtt.run(gctx, b.cfg.ShutdownGrace) })
	}
	err = g.Wait()

	stopBackground()
	_ = bg.Wait()
	// The internal server has stopped: no broadcast comes any more, and
	// batchers only queue what they hold on sessions that have ended.
	close(b.stopping)
	b.batchers.Wait()
	b.disconnects.flushAll(context.Background())
	return err
}

// serveClients serves client streams; on ctx end it leaves etcd, kicks every
// session with SERVER_DRAINING and stops.
func (b *Boat) serveClients(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- b.clientSrv.Serve(&limitListener{Listener: b.clientLn, b: b}) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	b.log.Info("draining", zap.Int("sessions", b.sessions.len()))
	b.draining.Store(true)
	b.setServing()
	leaveCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := b.member.Leave(leaveCtx); err != nil {
		b.log.Warn("leave etcd", zap.Error(err))
	}
	cancel()
	// Clients reconnect elsewhere; messages they had not ACKed fail back to
	// carrier as undelivered and are stored offline.
	// Station clears the records while the sessions are kicked (kicking
	// 100,000 takes seconds by itself).
	cleared := make(chan struct{})
	go func() { defer close(cleared); b.clearSessions() }()
	for _, s := range b.sessions.all() {
		s.kick(msgpb.KickoutReason_SERVER_DRAINING)
	}
	grpcx.GracefulStop(b.clientSrv, b.cfg.ShutdownGrace)
	<-cleared
	<-errc
	// WebSocket sessions start senders (b.streams.Add) until their
	// handlers return: an Add from zero racing this Wait could let it
	// return with a sender just started (the race detector's report).
	if b.ws != nil {
		<-b.ws.done
	}
	if b.mqtt != nil {
		<-b.mqtt.done
	}
	b.streams.Wait()
	return nil
}

// clearSessions asks station to remove every session recorded for this
// boat at once, as it drains: it has left etcd and is kicking them all, and
// their streams end (and are reported) one by one, far slower than
// station removes them in pages (100,000: about half a second against
// 19 s). The reports that follow find them gone. A failure leaves the
// reports to do it.
func (b *Boat) clearSessions() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := b.station.ResetBoat(ctx, &stationpb.ResetBoatRequest{BoatId: b.cfg.ID, Draining: true})
	if err != nil {
		b.log.Warn("clear this boat's sessions at station; each is reported as it ends instead", zap.Error(err))
		return
	}
	b.log.Info("cleared this boat's sessions at station", zap.Int32("sessions", resp.GetRemoved()))
}

// errLapsed refuses a session while the boat's registration may have lapsed.
var errLapsed = status.Error(codes.Unavailable, "boat's node id claim lapsed (its etcd registration may be held by another); connect to another")

// lapse runs when the boat's claim on its id may have lapsed (etcd
// unreachable for TTL − TTL/3 since its last answered keepalive, or the
// lease lost): another process may take the id, and carrier may reach it
// instead of this boat, so the boat stops serving: health NOT_SERVING, every
// session kicked with SERVER_DRAINING (its client reconnects elsewhere), new
// streams refused with Unavailable until hold.
func (b *Boat) lapse() {
	if b.lapsed.Swap(true) {
		return
	}
	b.setServing()
	all := b.sessions.all()
	b.log.Warn("etcd registration may have lapsed; not serving, kicking every session", zap.Int("sessions", len(all)))
	for _, s := range all {
		s.kick(msgpb.KickoutReason_SERVER_DRAINING)
	}
}

// hold runs when the boat holds its registration again.
func (b *Boat) hold() {
	if !b.lapsed.Swap(false) {
		return
	}
	b.log.Info("etcd registration held again; serving")
	b.setServing()
}

// setServing reports SERVING unless the boat drains or its registration
// lapsed.
func (b *Boat) setServing() {
	b.servingMu.Lock()
	defer b.servingMu.Unlock()
	serving := b.Serving() == nil
	for _, h := range b.health {
		grpcx.SetServing(h, serving)
	}
}

// Serving says whether the boat serves sessions, as its grpc.health.v1
// status does, and if not why: before it holds its id in etcd (a restarted
// boat waits for its previous run's lease to expire) and has cleared that
// run's sessions, while its claim on the id may have lapsed, and once it
// drains. The ops port's /readyz asks it too, so that a probe that cannot
// reach grpc.health.v1 (TLS) does not route devices to a boat that would
// refuse them.
func (b *Boat) Serving() error {
	switch {
	case b.draining.Load():
		return errors.New("draining")
	case b.lapsed.Load():
		return errors.New("its claim on its id in etcd may have lapsed")
	case !b.registered.Load():
		return errors.New("not registered in etcd yet (a previous run's lease may still hold its id)")
	}
	return nil
}

// resetPrevious asks station to remove the sessions a previous run of this
// boat id left, retrying until station answers or ctx ends.
func (b *Boat) resetPrevious(ctx context.Context) error {
	return backoff.Retry(ctx, backoff.Default, func() error {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := b.station.ResetBoat(callCtx, &stationpb.ResetBoatRequest{BoatId: b.cfg.ID})
		if err != nil {
			return fmt.Errorf("reset sessions of a previous run: %w", err)
		}
		b.stationDown.OK()
		if resp.GetRemoved() > 0 {
			b.log.Info("cleared sessions of a previous run", zap.Int32("sessions", resp.GetRemoved()))
		}
		return nil
	}, func(err error, _ time.Duration) { b.stationDown.Fail(err) })
}

// resume runs after the boat lost its etcd lease and registered again.
// Meanwhile carrier may have removed its sessions from Redis and stored their
// messages offline: every session goes back to not ready, is recorded again,
// and gets its offline replay, so that nothing stored while the boat was
// cut off from etcd waits for a reconnect.
func (b *Boat) resume(ctx context.Context) {
	all := b.sessions.all()
	var refs []*stationpb.ResumedSession
	for _, s := range all {
		select {
		case <-s.connected:
		default:
			continue // still connecting: station's Connect covers it
		}
		if s.ended() {
			continue // kicked when the registration lapsed: its end is reported
		}
		s.ready.Store(false)
		refs = append(refs, &stationpb.ResumedSession{Uid: s.uid, Sid: s.sid, Platform: s.platform})
	}
	b.log.Warn("re-registered after losing the etcd lease; resuming sessions", zap.Int("sessions", len(refs)))
	for start := 0; start < len(refs); start += b.cfg.DisconnectBatch {
		batch := refs[start:min(start+b.cfg.DisconnectBatch, len(refs))]
		err := backoff.Retry(ctx, backoff.Default, func() error {
			callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := b.station.Resume(callCtx, &stationpb.ResumeRequest{BoatId: b.cfg.ID, Sessions: batch})
			if err != nil {
				return fmt.Errorf("resume sessions: %w", err)
			}
			b.stationDown.OK()
			return nil
		}, func(err error, _ time.Duration) { b.stationDown.Fail(err) })
		if err != nil {
			return // ctx ended: the boat is stopping
		}
	}
}

// newSid returns a new time-sortable session id. While the boat's claim on
// its node id may have lapsed (etcd unreachable or the lease lost) it mints
// none and answers Unavailable: the client connects again, here or elsewhere.
func (b *Boat) newSid() (string, error) {
	id, err := b.member.IDs().Next()
	if err != nil {
		b.log.Warn("no sid minted; refusing a new session", zap.Error(err))
		return "", status.Error(codes.Unavailable, "boat's node id claim lapsed; connect again")
	}
	return strconv.FormatInt(id, 10), nil
}

// Sessions reports how many sessions the boat holds.
func (b *Boat) Sessions() int { return b.sessions.len() }

// PushMessages delivers msgs to the session and, for messages with NEED_ACK,
// waits for the client's ACK up to ackWait. A client that does not ACK in time
// is kicked out.
//
// Live messages (replay false) are refused with ErrNotReady until the
// session's offline replay is done, so that carrier stores them and the replay
// delivers everything in seq order. A session in pull mode has no replay to
// wait for: it takes them at once (were they refused, carrier would store
// them and queue a replay of the store, pushing the backlog the device
// means to pull).
func (b *Boat) PushMessages(ctx context.Context, sid string, ackWait time.Duration, msgs []*msgpb.Message, replay bool) ([]int64, error) {
	s, needAck, ackWait, err := b.checkPush(sid, ackWait, msgs, replay)
	if err != nil {
		return nil, err
	}
	// Messages go after the Connected payload.
	select {
	case <-s.connected:
	case <-s.done:
		return nil, errSessionNotFound(sid)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	p, err := b.beginPush(s, ackWait, msgs, needAck)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.d.done:
	case <-ctx.Done():
		p.abandon()
		return nil, ctx.Err()
	}
	return p.end()
}

// pushAsync is PushMessages for a caller that does not wait for it: done
// gets its result once (and p, nil when it failed before it began), on
// whichever goroutine finishes the push (the session's sender, its
// receiver, the ACK wheel, or the caller's failing of p.d). timeout, if
// positive, bounds the whole push as ctx's deadline bounds PushMessages.
// started is false, and done never called, when the session has not sent
// its Connected payload yet: the caller then calls PushMessages, which
// waits for it.
func (b *Boat) pushAsync(sid string, ackWait, timeout time.Duration, msgs []*msgpb.Message, replay bool, done func(p *pendingPush, acked []int64, err error)) (p *pendingPush, started bool) {
	s, needAck, ackWait, err := b.checkPush(sid, ackWait, msgs, replay)
	if err != nil {
		done(nil, nil, err)
		return nil, true
	}
	select {
	case <-s.connected:
	case <-s.done:
		done(nil, nil, errSessionNotFound(sid))
		return nil, true
	default:
		return nil, false
	}
	p = b.newPendingPush(s, ackWait, needAck)
	p.d.then = func() {
		acked, err := p.end()
		done(p, acked, err)
	}
	if err := p.begin(msgs, timeout); err != nil {
		p.d.fail(err) // done hears it through end, as from PushMessages
	}
	select {
	case <-p.d.done: // finished while begin ran (its deadline, the session ending): drop waits end missed
		p.s.forget(p.d, p.needAck)
	default:
	}
	return p, true
}

// checkPush validates a push to sid and finds its session.
func (b *Boat) checkPush(sid string, ackWait time.Duration, msgs []*msgpb.Message, replay bool) (*session, []int64, time.Duration, error) {
	s := b.sessions.get(sid)
	if s == nil || s.ended() {
		// A kicked or ended session takes nothing more: carrier learns at
		// once that it is not held instead of waiting for its deadline.
		return nil, nil, 0, errSessionNotFound(sid)
	}
	if !replay && !s.ready.Load() && !s.pullOffline {
		return nil, nil, 0, sessionErr(sid, ErrNotReady)
	}
	var needAck []int64
	for _, m := range msgs {
		if m.GetOptions()&uint32(msgpb.Option_NEED_ACK) != 0 {
			needAck = append(needAck, m.GetSeq())
		}
	}
	if len(needAck) > 0 && ackWait <= 0 {
		return nil, nil, 0, grpcerr.Invalid("ack_wait", "must be positive when a message needs an ACK")
	}
	return s, needAck, min(ackWait, b.cfg.MaxAckWait), nil
}

// pendingPush is a push whose messages are queued to its session and
// which waits for them to be sent and, for NEED_ACK, acknowledged.
type pendingPush struct {
	b       *Boat
	s       *session
	d       *delivery
	needAck []int64
	ackWait time.Duration

	// mu guards what begin sets, which goroutines that finish the push
	// read: they may come before begin has returned.
	mu       sync.Mutex
	start    time.Time
	timer    *timewheel.Timer // the ACK wait
	deadline *timewheel.Timer // pushAsync's timeout
}

func (b *Boat) newPendingPush(s *session, ackWait time.Duration, needAck []int64) *pendingPush {
	return &pendingPush{b: b, s: s, needAck: needAck, ackWait: ackWait, d: newDelivery(len(needAck))}
}

// beginPush queues msgs to s, which has sent its Connected payload.
func (b *Boat) beginPush(s *session, ackWait time.Duration, msgs []*msgpb.Message, needAck []int64) (*pendingPush, error) {
	p := b.newPendingPush(s, ackWait, needAck)
	if err := p.begin(msgs, 0); err != nil {
		p.abandon()
		return nil, sessionErr(s.sid, err)
	}
	return p, nil
}

// begin starts the ACK timer (and, when timeout is positive, the push's
// deadline), registers the ACK waits and queues msgs. Its error is one of
// the session's (ErrSessionGone, ErrSlowConsumer), for sessionErr.
func (p *pendingPush) begin(msgs []*msgpb.Message, timeout time.Duration) error {
	p.mu.Lock()
	p.start = time.Now()
	if len(p.needAck) > 0 {
		p.timer = p.b.wheel.Add(p.ackWait, func() { p.d.fail(ErrAckTimeout) })
	}
	if timeout > 0 {
		p.deadline = p.b.wheel.Add(timeout, func() { p.d.fail(context.DeadlineExceeded) })
	}
	p.mu.Unlock()
	if err := p.s.expect(p.d, p.needAck); err != nil {
		return err
	}
	payload := &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Messages{Messages: &msgpb.Messages{Msgs: msgs}}}
	if err := p.s.enqueue(outgoing{payload: payload, sent: p.d}); err != nil {
		if errors.Is(err, ErrSlowConsumer) {
			p.b.log.Warn("session send queue full; kicking it out", zap.String("sid", p.s.sid))
			p.s.kick(msgpb.KickoutReason_SLOW_CONSUMER)
		}
		return err
	}
	return nil
}

// abandon gives the push up: its waits and timers go. It returns when the
// push began.
func (p *pendingPush) abandon() (start time.Time) {
	p.mu.Lock()
	timer, deadline, start := p.timer, p.deadline, p.start
	p.mu.Unlock()
	timer.Stop()
	deadline.Stop()
	p.s.forget(p.d, p.needAck)
	return start
}

// end is the push's answer once its delivery is done. A client that did not
// ACK in time is kicked out.
func (p *pendingPush) end() ([]int64, error) {
	start := p.abandon()
	acked, err := p.d.result()
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return nil, err // pushAsync's timeout or abandonment, as PushMessages's ctx
	case err == nil && len(p.needAck) > 0:
		p.b.metrics.AckLatency.Observe(time.Since(start).Seconds())
	case errors.Is(err, ErrAckTimeout):
		p.b.log.Info("client did not ack in time; kicking it out", zap.String("sid", p.s.sid), zap.Duration("ack_wait", p.ackWait))
		p.s.kick(msgpb.KickoutReason_ACK_TIMEOUT)
	}
	if err != nil {
		return acked, sessionErr(p.s.sid, err)
	}
	return acked, nil
}

// FinishReplay marks the session ready and sends it the Ready payload.
func (b *Boat) FinishReplay(ctx context.Context, sid string) error {
	s := b.sessions.get(sid)
	if s == nil {
		return errSessionNotFound(sid)
	}
	select {
	case <-s.connected:
	case <-s.done:
		return errSessionNotFound(sid)
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.ready.Swap(true) {
		return nil
	}
	err := s.enqueue(outgoing{payload: &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Ready{Ready: &msgpb.Ready{}}}})
	if errors.Is(err, ErrSlowConsumer) {
		s.kick(msgpb.KickoutReason_SLOW_CONSUMER)
	}
	return sessionErr(sid, err)
}

// Kickout sends the notice to the session and ends its stream; it returns once
// the stream has ended (or ctx ends).
func (b *Boat) Kickout(ctx context.Context, sid string, reason msgpb.KickoutReason) error {
	s := b.sessions.get(sid)
	if s == nil {
		return errSessionNotFound(sid)
	}
	s.kick(reason)
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// registry is the boat's sessions by sid, sharded to keep lock contention low
// with many thousands of streams.
type registry struct {
	shards [64]struct {
		mu sync.RWMutex
		m  map[string]*session
	}
}

func (r *registry) init() {
	for i := range r.shards {
		r.shards[i].m = make(map[string]*session)
	}
}

func (r *registry) shard(sid string) int { return shardOf(sid, len(r.shards)) }

// shardOf picks one of n shards for key (32-bit FNV-1a): the sessions'
// registry and the rooms use it.
func shardOf(key string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return int(h % uint32(n))
}

func (r *registry) put(s *session) {
	sh := &r.shards[r.shard(s.sid)]
	sh.mu.Lock()
	sh.m[s.sid] = s
	sh.mu.Unlock()
}

func (r *registry) get(sid string) *session {
	sh := &r.shards[r.shard(sid)]
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[sid]
}

func (r *registry) remove(sid string) {
	sh := &r.shards[r.shard(sid)]
	sh.mu.Lock()
	delete(sh.m, sid)
	sh.mu.Unlock()
}

func (r *registry) all() []*session {
	var out []*session
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.RLock()
		for _, s := range sh.m {
			out = append(out, s)
		}
		sh.mu.RUnlock()
	}
	return out
}

func (r *registry) len() int {
	n := 0
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}
