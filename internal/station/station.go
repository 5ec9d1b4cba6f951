// Package station is gomsg's entry point: it records sessions that boats
// report (Connect / Disconnect) and serves the Push API, turning every
// request into per-user tasks on Kafka and answering only once Kafka has
// acknowledged all of them.
package station

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/dlq"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/idempotency"
	"github.com/gomsg/gomsg/internal/idgen"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/presence"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/tracing"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// KickPolicy decides what happens to older sessions of the same uid and
// platform when a new one connects.
type KickPolicy string

const (
	// KickOlder kicks every older session of the same uid + platform.
	KickOlder KickPolicy = "kick-older"
	// KeepAll lets sessions of one platform coexist (all get messages; the
	// newest decides delivery).
	KeepAll KickPolicy = "keep-all"
)

// DefaultDrainClearRate is --drain-clear-rate's default: 100,000 sessions
// in 4 s.
const DefaultDrainClearRate = 25000

// Config is station's configuration.
type Config struct {
	PushGRPCAddr string
	PushHTTPAddr string
	// ConsoleAddr is the admin console's listener (--console-addr); empty:
	// off. It is served with TLS when the Push API is.
	ConsoleAddr  string
	InternalAddr string
	EtcdPrefix   string
	LeaseTTL     time.Duration
	TaskTopic    string
	Platforms    platform.Set
	KickPolicy   KickPolicy
	// Limits of one Push request.
	MaxUIDs         int
	MaxBodies       int
	MaxBodyBytes    int
	MaxRequestBytes int
	// MaxReceiptsPerPush bounds the ACCEPTED receipts one push records:
	// its (uid, platform, message) triples that ask NEED_RECEIPTS
	// (--max-receipts-per-push).
	MaxReceiptsPerPush int
	// MaxPushBytes bounds the Kafka bytes one push may create: uids ×
	// (bodies + notification) (--max-push-bytes).
	MaxPushBytes int
	// MaxPushBytesInFlight bounds the fan-out bytes of the Push and
	// BroadcastRoom calls a station holds at once
	// (--max-push-bytes-in-flight); a call that does not fit is refused.
	MaxPushBytesInFlight int64
	// PushRatePerKey, ReceiptsRatePerKey and IdempotencyRatePerKey bound,
	// per API key and station, the Push calls, the targets they track with
	// NEED_RECEIPTS and the idempotency keys they use, per second
	// (--push-rate-per-key, --receipts-rate-per-key,
	// --idempotency-rate-per-key). Push calls alone cost Kafka, not Redis
	// beyond the per-user bounds, so their default (20,000/s) sits above what
	// one station serves: it only splits a station between keys, while the
	// receipts and idempotency budgets guard the Redis that sessions need.
	PushRatePerKey        float64
	ReceiptsRatePerKey    float64
	IdempotencyRatePerKey float64
	// MaxSessionsPerUID and MaxSessionsPerPlatform cap the sessions one
	// user may hold, in all and per platform.
	MaxSessionsPerUID      int
	MaxSessionsPerPlatform int
	// AuthTimeout bounds the authentication of one Connect.
	AuthTimeout time.Duration
	HTTP        HTTPLimits
	GRPC        grpcx.Limits
	// MaxDevicesPerUID is how many device tokens a uid keeps; registering
	// one more evicts the oldest.
	MaxDevicesPerUID int
	ShutdownGrace    time.Duration

	// TLS serves the Push API (gRPC and HTTP/JSON), InternalTLS the API
	// boats call; nil: plaintext.
	TLS         *tls.Config
	InternalTLS *tls.Config
	// APIKeys are the keys backends call the Push API with; nil refuses
	// every call.
	APIKeys *apikey.Store
	// InternalToken is what boats must send on the internal API; empty
	// accepts any caller (--insecure-internal).
	InternalToken string
	// IdempotencyWindow is how long a Push's idempotency key is remembered
	// (--idempotency-window); Idempotency is where (nil refuses keys).
	IdempotencyWindow time.Duration
	Idempotency       *idempotency.Store

	// BroadcastTopic is the Kafka topic of room and everyone broadcasts
	// (--broadcast-topic), apart from TaskTopic: carrier consumes it with
	// its own workers, keyed by room.
	BroadcastTopic string
	// MaxBroadcastRooms is how many rooms one BroadcastRoom may name
	// (--max-broadcast-rooms).
	MaxBroadcastRooms int
	// BroadcastRate caps BroadcastRoom and BroadcastAll calls per second
	// on this station, a second's worth at once (--broadcast-rate): every
	// broadcast reaches every boat.
	BroadcastRate float64
	// DrainClearRate is how many sessions per second a draining boat's
	// clear removes (--drain-clear-rate; 0: as fast as Redis answers). A
	// burst of 100,000 removals, and their presence events, takes the cores
	// the other users' deliveries need; paced, the same clear ends a few
	// seconds later while the boat is still kicking its sessions anyway.
	DrainClearRate float64
	// Boats is the cluster's boat directory RoomOnline asks; nil answers
	// RoomOnline Unavailable. *discovery.Boats implements it.
	Boats BoatDirectory

	// PresenceTopic is the Kafka topic of presence events (--presence-topic;
	// empty: none are published), keyed by uid. PresenceBuffer bounds the
	// events waiting for Kafka (--presence-buffer). See package presence.
	PresenceTopic  string
	PresenceBuffer int

	// Receipts records delivery steps (--receipts-topic); nil: off.
	Receipts *receipt.Recorder
	// Deliveries is where carrier keeps the receipts GetDelivery reads;
	// nil answers GetDelivery Unavailable.
	Deliveries *receipt.Store

	// Offline is the offline store PullOffline pages through; nil answers
	// PullOffline Unavailable.
	Offline *offline.Store
	// OnPullAck, when set, runs for a Pull's ACKed seqs the store holds,
	// before they are deleted (see PullAckHook).
	OnPullAck PullAckHook
	// DLQ serves the dead-letter methods; nil answers them Unavailable.
	DLQ *dlq.DLQ
	// CarrierLag reads the lag of CarrierGroups for the console's Cluster
	// page; nil: the page says lag is not available, and CarrierLagNote why.
	CarrierLag     GroupLagReader
	CarrierGroups  []GroupTopic
	CarrierLagNote string
	// ConsoleDeliveries: carrier runs in this process, on the same metrics,
	// so the console shows its delivery rates too.
	ConsoleDeliveries bool
}

// BoatDirectory finds the cluster's boats and a client for each.
type BoatDirectory interface {
	// IDs lists the boats currently registered.
	IDs() []string
	// Client returns a client for boatID; found is false for a boat that
	// is not (or no longer) registered.
	Client(ctx context.Context, boatID string) (client boatpb.BoatClient, found bool, err error)
}

// Defaults fills unset fields.
func (c *Config) Defaults() {
	if c.EtcdPrefix == "" {
		c.EtcdPrefix = "/gomsg"
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.TaskTopic == "" {
		c.TaskTopic = "gomsg.tasks"
	}
	if len(c.Platforms.Names()) == 0 {
		c.Platforms = platform.MustParse(platform.DefaultSpec)
	}
	if c.KickPolicy == "" {
		c.KickPolicy = KickOlder
	}
	if c.MaxUIDs == 0 {
		c.MaxUIDs = 10000
	}
	if c.MaxBodies == 0 {
		c.MaxBodies = 100
	}
	if c.MaxReceiptsPerPush == 0 {
		c.MaxReceiptsPerPush = 100_000
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 64 << 10
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = 256 << 10
	}
	if c.MaxPushBytes == 0 {
		c.MaxPushBytes = 64 << 20
	}
	if c.MaxPushBytesInFlight == 0 {
		c.MaxPushBytesInFlight = 256 << 20
	}
	if c.PushRatePerKey == 0 {
		c.PushRatePerKey = 20000
	}
	if c.ReceiptsRatePerKey == 0 {
		c.ReceiptsRatePerKey = 2000
	}
	if c.IdempotencyRatePerKey == 0 {
		c.IdempotencyRatePerKey = 500
	}
	if c.MaxSessionsPerUID == 0 {
		c.MaxSessionsPerUID = 100
	}
	if c.MaxSessionsPerPlatform == 0 {
		c.MaxSessionsPerPlatform = 10
	}
	if c.AuthTimeout == 0 {
		c.AuthTimeout = 5 * time.Second
	}
	c.HTTP.Defaults()
	c.GRPC.Defaults()
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.MaxDevicesPerUID == 0 {
		c.MaxDevicesPerUID = DefaultMaxDevicesPerUID
	}
	if c.IdempotencyWindow == 0 {
		c.IdempotencyWindow = 24 * time.Hour
	}
	if c.BroadcastTopic == "" {
		c.BroadcastTopic = "gomsg.broadcast"
	}
	if c.MaxBroadcastRooms == 0 {
		c.MaxBroadcastRooms = 100
	}
	if c.BroadcastRate == 0 {
		c.BroadcastRate = 50
	}
	if c.PresenceBuffer == 0 {
		c.PresenceBuffer = DefaultPresenceBuffer
	}
}

// DefaultPresenceBuffer is --presence-buffer's default.
const DefaultPresenceBuffer = 100000

// DefaultMaxDevicesPerUID is --max-devices-per-uid's default.
const DefaultMaxDevicesPerUID = 10

// Validate names the first bad setting.
func (c *Config) Validate() error {
	switch {
	case c.PushGRPCAddr == "":
		return errors.New("--push-grpc-addr: must be set")
	case c.InternalAddr == "":
		return errors.New("--station-internal-addr: must be set")
	case c.KickPolicy != KickOlder && c.KickPolicy != KeepAll:
		return fmt.Errorf("--kick-policy: %q, want %q or %q", c.KickPolicy, KickOlder, KeepAll)
	case c.MaxUIDs < 1 || c.MaxBodies < 1 || c.MaxBodyBytes < 1 || c.MaxRequestBytes < c.MaxBodyBytes:
		return errors.New("--max-uids, --max-bodies, --max-body-bytes: must be positive, and --max-request-bytes at least --max-body-bytes")
	case c.MaxReceiptsPerPush < 1:
		return fmt.Errorf("--max-receipts-per-push: %d, must be positive", c.MaxReceiptsPerPush)
	case c.MaxPushBytes < c.MaxRequestBytes:
		return fmt.Errorf("--max-push-bytes: %d, must be at least --max-request-bytes (%d)", c.MaxPushBytes, c.MaxRequestBytes)
	case c.MaxPushBytesInFlight < int64(c.MaxPushBytes):
		return fmt.Errorf("--max-push-bytes-in-flight: %d, must be at least --max-push-bytes (%d)", c.MaxPushBytesInFlight, c.MaxPushBytes)
	case c.PushRatePerKey < 0:
		return fmt.Errorf("--push-rate-per-key: %g, must be positive", c.PushRatePerKey)
	case c.ReceiptsRatePerKey < 0:
		return fmt.Errorf("--receipts-rate-per-key: %g, must be positive", c.ReceiptsRatePerKey)
	case c.IdempotencyRatePerKey < 0:
		return fmt.Errorf("--idempotency-rate-per-key: %g, must be positive", c.IdempotencyRatePerKey)
	case c.MaxSessionsPerUID < 1:
		return fmt.Errorf("--max-sessions-per-uid: %d, must be positive", c.MaxSessionsPerUID)
	case c.MaxSessionsPerPlatform < 1 || c.MaxSessionsPerPlatform > c.MaxSessionsPerUID:
		return fmt.Errorf("--max-sessions-per-platform: %d, must be 1 to --max-sessions-per-uid (%d)", c.MaxSessionsPerPlatform, c.MaxSessionsPerUID)
	case c.AuthTimeout < 0:
		return fmt.Errorf("--auth-timeout: %s, must be positive", c.AuthTimeout)
	case c.MaxDevicesPerUID < 1:
		return fmt.Errorf("--max-devices-per-uid: %d, must be at least 1", c.MaxDevicesPerUID)
	case c.IdempotencyWindow < time.Second:
		return fmt.Errorf("--idempotency-window: %s, must be at least 1s", c.IdempotencyWindow)
	case c.MaxBroadcastRooms < 1:
		return fmt.Errorf("--max-broadcast-rooms: %d, must be positive", c.MaxBroadcastRooms)
	case c.DrainClearRate < 0:
		return fmt.Errorf("--drain-clear-rate: %g, must not be negative", c.DrainClearRate)
	case c.BroadcastRate < 1:
		return fmt.Errorf("--broadcast-rate: %g, must be at least 1", c.BroadcastRate)
	case c.BroadcastTopic == c.TaskTopic:
		return fmt.Errorf("--broadcast-topic: %q, must differ from --task-topic", c.BroadcastTopic)
	case c.PresenceTopic != "" && (c.PresenceTopic == c.TaskTopic || c.PresenceTopic == c.BroadcastTopic):
		return fmt.Errorf("--presence-topic: %q, must differ from --task-topic and --broadcast-topic", c.PresenceTopic)
	case c.PresenceBuffer < 1:
		return fmt.Errorf("--presence-buffer: %d, must be positive", c.PresenceBuffer)
	}
	if err := c.HTTP.Validate(); err != nil {
		return err
	}
	return c.GRPC.Validate()
}

// Publisher is what station needs of the queue.
type Publisher interface {
	Publish(ctx context.Context, recs ...queue.Record) error
}

// Station is the entry service.
type Station struct {
	cfg      Config
	log      *zap.Logger
	metrics  *metrics.Metrics
	etcd     *clientv3.Client
	auth     auth.Authenticator
	sessions *session.Store
	devices  *device.Store
	queue    Publisher
	// presence publishes presence events; nil when --presence-topic is
	// empty.
	presence *presence.Emitter
	ids      *idgen.Generator
	// broadcasts is --broadcast-rate's limiter.
	broadcasts *rate.Limiter
	// inFlight is --max-push-bytes-in-flight's budget.
	inFlight *inFlight
	// Per-API-key quotas.
	pushQuota, receiptsQuota, idempotencyQuota *keyQuota

	pushSrv     *grpc.Server
	internalSrv *grpc.Server
	health      []*health.Server
	pushLn      net.Listener
	internalLn  net.Listener
	httpLn      net.Listener
	consoleLn   net.Listener
	// consoleRates holds readings of the counters the console's rates are
	// computed from.
	consoleRates consoleRates
}

// New builds a station; Listen then Run start it.
func New(cfg Config, log *zap.Logger, m *metrics.Metrics, etcd *clientv3.Client, authn auth.Authenticator, sessions *session.Store, devices *device.Store, q Publisher) (*Station, error) {
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Station{
		cfg:      cfg,
		log:      log.With(zap.String("component", "station")),
		metrics:  m,
		etcd:     etcd,
		auth:     authn,
		sessions: sessions,
		devices:  devices,
		queue:    q,
		presence: presence.New(presence.Config{Topic: cfg.PresenceTopic, Buffer: cfg.PresenceBuffer}, q, log, m),
		// A second's worth at once, as boat's --connect-rate.
		broadcasts: rate.NewLimiter(rate.Limit(cfg.BroadcastRate), max(1, int(cfg.BroadcastRate))),
		inFlight:   newInFlight(cfg.MaxPushBytesInFlight),
		pushQuota:  newKeyQuota("--push-rate-per-key", "push_rate_per_key", "pushes", cfg.PushRatePerKey, 1),
		receiptsQuota: newKeyQuota("--receipts-rate-per-key", "receipts_rate_per_key", "receipts-tracked targets",
			cfg.ReceiptsRatePerKey, cfg.MaxReceiptsPerPush),
		idempotencyQuota: newKeyQuota("--idempotency-rate-per-key", "idempotency_rate_per_key", "idempotency keys",
			cfg.IdempotencyRatePerKey, 1),
	}
	codec := newPushCodec()
	s.pushSrv = grpc.NewServer(grpcx.ServerOptions(cfg.GRPC, grpcx.ServerTLS(cfg.TLS), tracing.ServerOption(), s.pushAuth(),
		grpc.ForceServerCodecV2(codec), grpc.ChainUnaryInterceptor(codec.refuseBadUTF8),
		// Each Push is a stream of its own, by default served by a new
		// goroutine whose stack grows (copied) while the call decodes and
		// publishes: 14 % of station's CPU at saturation. Workers keep
		// their grown stacks from call to call; calls beyond them still
		// get a goroutine each.
		grpc.NumStreamWorkers(pushWorkers))...)
	pushpb.RegisterPushServer(s.pushSrv, &pushServer{s: s})
	reflection.Register(s.pushSrv)
	s.internalSrv = grpc.NewServer(grpcx.ServerOptions(cfg.GRPC, grpcx.ServerTLS(cfg.InternalTLS), s.internalAuth())...)
	stationpb.RegisterStationServer(s.internalSrv, &internalServer{s: s})
	s.health = []*health.Server{grpcx.NewHealth(s.pushSrv), grpcx.NewHealth(s.internalSrv)}
	return s, nil
}

// pushWorkers is how many goroutines serve Push API calls from call to call:
// more than the concurrent callers of a busy backend.
const pushWorkers = 128

// Listen binds the listeners so their addresses are known before Run.
func (s *Station) Listen() error {
	var err error
	if s.pushLn, err = net.Listen("tcp", s.cfg.PushGRPCAddr); err != nil {
		return fmt.Errorf("station push listener: %w", err)
	}
	if s.internalLn, err = net.Listen("tcp", s.cfg.InternalAddr); err != nil {
		return fmt.Errorf("station internal listener: %w", err)
	}
	if s.cfg.PushHTTPAddr != "" {
		if s.httpLn, err = net.Listen("tcp", s.cfg.PushHTTPAddr); err != nil {
			return fmt.Errorf("station push http listener: %w", err)
		}
		s.httpLn = s.httpTLS(s.httpLn)
	}
	if s.cfg.ConsoleAddr != "" {
		if s.consoleLn, err = net.Listen("tcp", s.cfg.ConsoleAddr); err != nil {
			return fmt.Errorf("station console listener: %w", err)
		}
		s.consoleLn = s.httpTLS(s.consoleLn)
	}
	return nil
}

// httpTLS serves ln with the Push API's TLS, when it has one.
func (s *Station) httpTLS(ln net.Listener) net.Listener {
	if s.cfg.TLS == nil {
		return ln
	}
	c := s.cfg.TLS.Clone()
	c.NextProtos = []string{"h2", "http/1.1"}
	return tls.NewListener(ln, c)
}

// ConsoleAddr is the admin console's bound address, "" when it is off.
func (s *Station) ConsoleAddr() string {
	if s.consoleLn == nil {
		return ""
	}
	return s.consoleLn.Addr().String()
}

// PushAddr, PushHTTPAddr and InternalAddr are the bound addresses.
func (s *Station) PushAddr() string     { return s.pushLn.Addr().String() }
func (s *Station) InternalAddr() string { return s.internalLn.Addr().String() }
func (s *Station) PushHTTPAddr() string {
	if s.httpLn == nil {
		return ""
	}
	return s.httpLn.Addr().String()
}

// Run leases a node id for seqs and serves until ctx ends.
func (s *Station) Run(ctx context.Context) error {
	if s.pushLn == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	member, err := discovery.Join(ctx, s.etcd, s.log, s.cfg.EtcdPrefix, "station", "", "", s.cfg.LeaseTTL)
	if err != nil {
		return err
	}
	defer func() {
		leaveCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = member.Leave(leaveCtx)
	}()
	s.ids = member.IDs()

	if s.consoleLn != nil {
		// The first reading the Cluster page's rates are measured from,
		// taken before the Push API serves so that it counts no call.
		if r, err := s.readRates(); err == nil {
			s.consoleRates.observe(r)
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return member.Run(gctx) })
	g.Go(func() error { return s.cfg.APIKeys.Run(gctx) })
	g.Go(func() error { return grpcx.Serve(gctx, s.pushSrv, s.pushLn, s.cfg.ShutdownGrace) })
	g.Go(func() error { return grpcx.Serve(gctx, s.internalSrv, s.internalLn, s.cfg.ShutdownGrace) })
	if s.httpLn != nil {
		g.Go(func() error { return s.serveHTTP(gctx) })
	}
	if s.consoleLn != nil {
		g.Go(func() error { return s.serveConsole(gctx) })
	}
	for _, h := range s.health {
		grpcx.SetServing(h, true)
	}
	s.log.Info("station serving", zap.String("push_grpc", s.PushAddr()), zap.String("push_http", s.PushHTTPAddr()),
		zap.String("console", s.ConsoleAddr()),
		zap.String("internal", s.InternalAddr()), zap.Strings("platforms", s.cfg.Platforms.Names()))
	// Presence events are written until the servers stopped (a boat's last
	// Disconnect reports come in during their graceful stop), then flushed
	// within the emitter's grace.
	presenceCtx, stopPresence := context.WithCancel(context.WithoutCancel(ctx))
	presenceDone := make(chan struct{})
	go func() {
		defer close(presenceDone)
		if s.presence != nil {
			_ = s.presence.Run(presenceCtx)
		}
	}()
	<-gctx.Done()
	for _, h := range s.health {
		grpcx.SetServing(h, false)
	}
	err = g.Wait()
	stopPresence()
	<-presenceDone
	return err
}

// publish marshals tasks, all keyed by uid, and returns once Kafka has
// acknowledged every one. Each record carries the trace context.
func (s *Station) publish(ctx context.Context, uids []string, payloads []*mqpb.Payload, extra ...queue.Record) error {
	return s.publishTo(ctx, s.cfg.TaskTopic, uids, payloads, extra...)
}

// publishTo is publish on topic: payloads[i] keyed by keys[i], in one
// Publish call with the extra records (receipts) after them.
func (s *Station) publishTo(ctx context.Context, topic string, keys []string, payloads []*mqpb.Payload, extra ...queue.Record) error {
	ctx, span := tracing.Start(ctx, "station.publish", trace.SpanKindProducer)
	defer span.End()
	if span.IsRecording() { // attributes cost allocations on every push; without a tracer nothing keeps them
		span.SetAttributes(attribute.String("messaging.destination.name", topic),
			attribute.Int("messaging.batch.message_count", len(payloads)))
	}
	// Without tracing, a Push call brings no trace context (its gRPC handler
	// is not installed): the records go without headers, as boatclient's
	// deliveries do.
	var headers map[string]string
	if tracing.Enabled() {
		headers = map[string]string{}
		tracing.Inject(ctx, headers)
	}
	recs := make([]queue.Record, len(payloads), len(payloads)+len(extra))
	for i, p := range payloads {
		v, err := proto.Marshal(p)
		if err != nil {
			return fmt.Errorf("marshal task: %w", err)
		}
		recs[i] = queue.Record{Topic: topic, Key: keys[i], Value: v, Headers: headers}
	}
	err := s.queue.Publish(ctx, append(recs, extra...)...)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// newPayload stamps a task.
func (s *Station) newPayload(now time.Time) (*mqpb.Payload, error) {
	seq, err := s.nextID()
	if err != nil {
		return nil, err
	}
	return &mqpb.Payload{Seq: seq, Timestamp: now.UnixMilli()}, nil
}
