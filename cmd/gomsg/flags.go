package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/carrier"
	"github.com/gomsg/gomsg/internal/config"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/tlsx"
	"github.com/gomsg/gomsg/internal/tracing"
)

// opsAddrs are the default --ops-addr of each command: one port per service,
// so that all of them run side by side on one machine.
var opsAddrs = map[string]string{
	"station": "0.0.0.0:9090",
	"boat":    "0.0.0.0:9091",
	"carrier": "0.0.0.0:9094",
	"horn":    "0.0.0.0:9095",
	"dev":     "127.0.0.1:7290",
}

// common holds the settings every service shares.
type common struct {
	backends     app.Backends
	brokers      config.List
	natsURLs     config.List
	redisAddrs   config.List
	redisAddr    string
	etcd         config.List
	platforms    string
	logLevel     string
	logFormat    string
	opsAddr      string
	pprof        bool
	opsTLS       bool
	otlp         string
	otlpPlain    bool
	startTimeout time.Duration
	tls          tlsx.Settings
	gcPercent    int
}

// gcPercents are the default --gc-percent of each command. Station and
// carrier hold little live memory and allocate per message: collecting at
// 5× the live heap instead of 2× costs them tens of MB and saves ~10 % of
// their CPU (BENCHMARKS.md). Boat's memory is its sessions, so it keeps Go's
// default, as do horn and dev (which runs boat too).
var gcPercents = map[string]int{"station": 400, "carrier": 400}

// defaultGCPercent is Go's GOGC when set ("off" is -1), else the command's
// default.
func defaultGCPercent(name string) int {
	switch v := os.Getenv("GOGC"); {
	case v == "off":
		return -1
	case v != "":
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	if n, ok := gcPercents[name]; ok {
		return n
	}
	return 100
}

// register defines the shared flags of command name ("dev" or a service).
// Their defaults come from app.Backends' Defaults, so that each is defined
// once.
func (c *common) register(fs *flag.FlagSet, name string) {
	devMode := name == "dev"
	var d app.Backends
	d.Defaults()
	b := &c.backends
	fs.Var(&c.redisAddrs, "redis-addrs", "Redis server (host:port), or with --redis-cluster nodes of a Redis Cluster, comma-separated (default "+app.DefaultRedisAddr+")")
	fs.StringVar(&c.redisAddr, "redis-addr", "", "deprecated: one Redis address, the same as --redis-addrs with one address")
	fs.BoolVar(&b.RedisCluster, "redis-cluster", false, "Redis is a Redis Cluster: keys of one user share a hash slot (docs/operations.md: Redis Cluster)")
	fs.Var(&c.brokers, "kafka-brokers", "Kafka bootstrap brokers, comma-separated (default "+app.DefaultKafkaBroker+")")
	fs.StringVar(&b.Queue, "queue", d.Queue, "queue the services share: kafka or nats (JetStream; docs/queue.md)")
	fs.Var(&c.natsURLs, "nats-url", "NATS servers with --queue nats, comma-separated nats://host:port (default "+app.DefaultNATSURL+")")
	fs.Var(&c.etcd, "etcd-endpoints", "etcd endpoints, comma-separated (default "+app.DefaultEtcdEndpoint+")")
	if devMode {
		fs.Lookup("redis-addrs").Usage = "Redis server (host:port), or with --redis-cluster nodes of a Redis Cluster, comma-separated (default: an embedded one)"
		fs.Lookup("kafka-brokers").Usage = "Kafka bootstrap brokers, comma-separated (default: an embedded broker)"
		fs.Lookup("etcd-endpoints").Usage = "etcd endpoints, comma-separated (default: an embedded etcd)"
		fs.Lookup("nats-url").Usage = "NATS servers with --queue nats, comma-separated nats://host:port (default: an embedded nats-server with JetStream, its store in --data-dir)"
	}
	fs.StringVar(&b.EtcdPrefix, "etcd-prefix", d.EtcdPrefix, "etcd key prefix of this cluster")
	fs.StringVar(&b.TaskTopic, "task-topic", d.TaskTopic, "Kafka topic of per-user tasks")
	fs.StringVar(&b.RetryTopic, "retry-topic", "", "Kafka topic of tasks to retry (default <task-topic>.retry)")
	fs.StringVar(&b.DeadLetterTopic, "dead-letter-topic", "", "Kafka topic of tasks that failed every retry (default <task-topic>.dlq)")
	fs.StringVar(&b.NotifyTopic, "notify-topic", d.NotifyTopic, "Kafka topic of notification tasks (carrier → horn)")
	fs.StringVar(&b.NotifyRetryTopic, "notify-retry-topic", d.NotifyRetryTopic, "Kafka topic of horn's retries")
	fs.StringVar(&b.NotifyDeadTopic, "notify-dead-topic", d.NotifyDeadTopic, "Kafka topic of notifications horn gave up on")
	fs.StringVar(&b.BroadcastTopic, "broadcast-topic", d.BroadcastTopic, "Kafka topic of room broadcasts and broadcasts to everyone (station → carrier)")
	fs.StringVar(&b.PresenceTopic, "presence-topic", app.DefaultPresenceTopic, "Kafka topic of presence events (connect, disconnect, kickout; station → backends), keyed by uid; empty: none published")
	fs.StringVar(&b.ReceiptsTopic, "receipts-topic", app.DefaultReceiptsTopic, "Kafka topic of delivery receipts (accepted, delivered, stored, replayed, notified, retried, dead-lettered, expired; station, carrier, horn → backends), keyed by uid, of the messages that ask NEED_RECEIPTS (EXPIRED and REPLAYED through Pull: of every message); carrier keeps them for GetDelivery; empty: none recorded, and NEED_RECEIPTS is refused")
	fs.IntVar(&b.TaskPartitions, "task-partitions", d.TaskPartitions, "partitions of the topics gomsg creates")
	fs.IntVar(&b.ReplicationFactor, "kafka-replication", d.ReplicationFactor, "replication factor of topics gomsg creates")
	fs.BoolVar(&b.CreateTopics, "create-topics", true, "create missing Kafka topics at start")
	fs.DurationVar(&c.startTimeout, "start-timeout", d.StartTimeout,
		"how long start-up waits for each backend (Redis, Kafka, etcd) to answer before it gives up")
	fs.StringVar(&c.platforms, "platforms", platform.DefaultSpec,
		"platforms: name[:offline=<expiry>/<max>|none][:notify=<provider>], comma-separated")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.opsAddr, "ops-addr", opsAddrs[name], "listen address of /metrics, /healthz and /readyz; empty: off")
	fs.BoolVar(&c.pprof, "pprof", false, "also serve /debug/pprof/ on ops-addr")
	fs.IntVar(&c.gcPercent, "gc-percent", defaultGCPercent(name),
		"Go's GC target percentage (GOGC): collect when the heap grew by this much over the live heap; -1 turns the GC off (default: $GOGC when set, else 400 for station and carrier, 100 otherwise; GOMEMLIMIT still applies)")
	fs.BoolVar(&c.opsTLS, "ops-tls", false, "serve ops-addr over TLS with --tls-cert-file (probes and Prometheus must then use https)")
	fs.StringVar(&c.otlp, "otlp-endpoint", "", "OTLP/gRPC collector (host:port) to export traces to; empty: no tracing")
	fs.BoolVar(&c.otlpPlain, "otlp-insecure", true, "talk to the OTLP collector without TLS")
	defFormat := "json"
	if devMode {
		defFormat = "console"
	}
	fs.StringVar(&c.logFormat, "log-format", defFormat, "log format: json or console")
	registerTLS(fs, &c.tls, &c.backends)
}

// finish validates the shared settings after parsing.
func (c *common) finish() (platform.Set, error) {
	c.backends.KafkaBrokers = c.brokers
	c.backends.NATSURLs = c.natsURLs
	if err := c.backends.CheckQueue(); err != nil {
		return platform.Set{}, err
	}
	// NATS secrets only from the environment (or their files): a command
	// line is visible to every local user.
	for _, s := range []struct{ flag, env, val string }{
		{"--nats-password", natsPasswordEnv, c.backends.NATSAuth.Password},
		{"--nats-token", natsTokenEnv, c.backends.NATSToken},
	} {
		if s.val != "" && s.val != os.Getenv(s.env) {
			return platform.Set{}, fmt.Errorf("%s: refused on the command line, where every local user can read it; set %s or use the -file flag", s.flag, s.env)
		}
	}
	switch {
	case c.redisAddr != "" && len(c.redisAddrs) > 0:
		return platform.Set{}, fmt.Errorf("--redis-addr %s and --redis-addrs %s: set only --redis-addrs (--redis-addr is its deprecated one-address form)", c.redisAddr, c.redisAddrs.String())
	case c.redisAddr != "":
		c.backends.RedisAddrs = []string{c.redisAddr}
	default:
		c.backends.RedisAddrs = c.redisAddrs
	}
	if c.backends.RedisCluster && len(c.backends.RedisAddrs) == 0 {
		return platform.Set{}, errors.New("--redis-cluster: needs --redis-addrs, the nodes of the cluster (the embedded Redis is a single server)")
	}
	if len(c.backends.RedisAddrs) > 0 {
		if err := c.backends.CheckRedis(); err != nil {
			return platform.Set{}, err
		}
	}
	c.backends.EtcdEndpoints = c.etcd
	if c.backends.TaskPartitions < 1 {
		return platform.Set{}, fmt.Errorf("task-partitions: %d, must be at least 1", c.backends.TaskPartitions)
	}
	if c.startTimeout <= 0 {
		return platform.Set{}, fmt.Errorf("--start-timeout: %s, must be positive", c.startTimeout)
	}
	c.backends.StartTimeout = c.startTimeout
	if c.gcPercent < -1 {
		return platform.Set{}, fmt.Errorf("--gc-percent: %d, must be -1 (off) or at least 0", c.gcPercent)
	}
	return app.ParsePlatforms(c.platforms)
}

func (c *common) defaultBackends() {
	if len(c.backends.RedisAddrs) == 0 {
		c.backends.RedisAddrs = []string{app.DefaultRedisAddr}
	}
	if len(c.backends.KafkaBrokers) == 0 {
		c.backends.KafkaBrokers = []string{app.DefaultKafkaBroker}
	}
	if len(c.backends.EtcdEndpoints) == 0 {
		c.backends.EtcdEndpoints = []string{app.DefaultEtcdEndpoint}
	}
	if len(c.backends.NATSURLs) == 0 {
		c.backends.NATSURLs = []string{app.DefaultNATSURL}
	}
}

// tracing installs trace propagation and, with --otlp-endpoint, export.
func (c *common) tracing(ctx context.Context, service string) (func(), error) {
	shutdown, err := tracing.Setup(ctx, service, c.otlp, c.otlpPlain)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}, nil
}

func (c *common) logger() (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(c.logLevel)
	if err != nil {
		return nil, fmt.Errorf("log-level: %q: want debug, info, warn or error", c.logLevel)
	}
	var cfg zap.Config
	switch c.logFormat {
	case "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("log-format: %q: want json or console", c.logFormat)
	}
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	return cfg.Build()
}

func registerBoat(fs *flag.FlagSet, c *boat.Config, stationAddr *string, host string) {
	c.Defaults()
	hn, _ := os.Hostname()
	fs.StringVar(&c.ID, "boat-id", hn, "boat id in etcd and session records (unique per boat; default the hostname)")
	fs.StringVar(&c.ClientAddr, "client-addr", host+":7100", "listen address of the client stream")
	// The WebSocket listener is a public port: on in gomsg dev, and for a
	// service only when asked (the Helm chart and compose ask).
	wsDefault := ""
	if host == "127.0.0.1" {
		wsDefault = host + ":7180"
	}
	fs.StringVar(&c.WSAddr, "ws-addr", wsDefault, "listen address of the client sessions over WebSocket (path "+boat.WSPath+"; browsers), e.g. 0.0.0.0:7180; empty: off")
	// The MQTT listener is a public port too: on in gomsg dev only.
	mqttDefault := ""
	if host == "127.0.0.1" {
		mqttDefault = host + ":7183"
	}
	fs.StringVar(&c.MQTTAddr, "mqtt-addr", mqttDefault, "listen address of the client sessions over MQTT 5 and 3.1.1 (device MQTT client libraries; TLS with --tls-cert), e.g. 0.0.0.0:7183; empty: off")
	fs.Var((*config.List)(&c.WSOrigins), "ws-origins", "host patterns a browser's Origin must match on the WebSocket, comma-separated (e.g. app.example.com,*.example.com); default: the request's own host")
	fs.StringVar(&c.InternalAddr, "boat-internal-addr", host+":7110", "listen address of the API carrier calls")
	fs.StringVar(&c.AdvertiseAddr, "boat-advertise-addr", "", "address carrier dials for this boat (default: the bound boat-internal-addr)")
	fs.StringVar(stationAddr, "station-addr", "127.0.0.1:7210", "station's internal address")
	fs.IntVar(&c.SendQueue, "send-queue", c.SendQueue, "payloads queued per session before it counts as a slow consumer")
	fs.IntVar(&c.SendQueueBytes, "send-queue-bytes", c.SendQueueBytes, "bytes of payloads queued per session before it counts as a slow consumer (an empty queue takes one payload of any size)")
	fs.DurationVar(&c.MaxAckWait, "max-ack-wait", c.MaxAckWait, "longest ACK wait carrier may ask for")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "etcd lease TTL")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "how long a stop may drain")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", c.WriteTimeout, "how long a send to a client may block before it is kicked as a slow consumer")
	fs.IntVar(&c.MaxConnections, "max-connections", c.MaxConnections, "most client connections a boat holds; more are closed when accepted")
	fs.IntVar(&c.MaxConnectionsPerIP, "max-connections-per-ip", c.MaxConnectionsPerIP, "most client connections (gRPC and WebSocket) open from one source address (IPv6: per /64); more are closed when accepted")
	fs.IntVar(&c.MaxStreamsPerConnection, "max-streams-per-connection", c.MaxStreamsPerConnection, "most sessions (streams) on one client connection")
	fs.Float64Var(&c.ConnectRate, "connect-rate", c.ConnectRate, "new sessions per second a boat accepts in all (a second's worth at once)")
	fs.Float64Var(&c.ConnectRatePerIP, "connect-rate-per-ip", c.ConnectRatePerIP, "new sessions per second from one source address (IPv6: per /64)")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", c.ConnectTimeout, "time a session has to connect (auth + station), and a WebSocket-port request to send its header and body; connections without a stream close after twice it")
	fs.IntVar(&c.DisconnectBacklog, "disconnect-backlog", c.DisconnectBacklog, "disconnect reports a boat keeps while station is unreachable; beyond it the newest are dropped")
	fs.DurationVar(&c.GhostSweep, "ghost-sweep-interval", c.GhostSweep, "how often a boat reports sessions recorded for it that it does not hold as ended")
	fs.Float64Var(&c.SessionRequestRate, "session-request-rate", c.SessionRequestRate, "Pull, RegisterDevice, JoinRoom and LeaveRoom requests per second one session may send; more are answered RESOURCE_EXHAUSTED")
	fs.IntVar(&c.SessionRequestBurst, "session-request-burst", c.SessionRequestBurst, "such requests one session may send at once (the bucket of --session-request-rate)")
	fs.IntVar(&c.MaxRoomsPerSession, "max-rooms-per-session", c.MaxRoomsPerSession, "rooms one session may be in at once; more joins are refused")
	fs.IntVar(&c.MaxRooms, "max-rooms", c.MaxRooms, "rooms with members one boat holds; joins of new rooms beyond it are refused")
	fs.IntVar(&c.RoomBatch, "room-batch", c.RoomBatch, "most messages of one room sent to a member in one frame")
	fs.Var(batchWindow{&c.RoomBatchWindow}, "room-batch-window", "how long a room's batcher gathers messages after the first before it sends (0: what is queued, no wait)")
	fs.IntVar(&c.RoomQueue, "room-queue", c.RoomQueue, "messages one room's batcher holds; a fuller room holds back carrier")
}

func registerStation(fs *flag.FlagSet, o *app.StationOptions, host string, devMode bool) {
	c := &o.Station
	c.Defaults()
	fs.StringVar(&c.PushGRPCAddr, "push-grpc-addr", host+":7200", "listen address of the Push API (gRPC)")
	fs.StringVar(&c.PushHTTPAddr, "push-http-addr", host+":7280", "listen address of the Push API (HTTP/JSON); empty: off")
	fs.StringVar(&c.InternalAddr, "station-internal-addr", host+":7210", "listen address of the API boats call")
	console := ""
	if devMode {
		console = "127.0.0.1:7288"
	}
	fs.StringVar(&c.ConsoleAddr, "console-addr", console, "listen address of the admin web console (an API key with the console scope logs in); empty: off")
	fs.StringVar(&o.CarrierGroup, "console-carrier-group", "", "carriers' Kafka consumer group (their --group-id), whose lag the console shows; empty: carrier's default, or --group-id when carrier runs in this process")
	def := ""
	if devMode {
		def = app.DevJWTSecret
	}
	fs.StringVar(&o.JWTSecret, "jwt-secret", def, "HS256 secret of device tokens (claims uid and platform)")
	fs.StringVar(&o.AuthAddr, "auth-addr", "", "address of a gomsg.auth.Auth service to use instead of JWTs")
	registerAuthTLS(fs, o, devMode)
	fs.Var((*kickPolicy)(&c.KickPolicy), "kick-policy", "older sessions of the same uid+platform on connect: kick-older or keep-all")
	fs.IntVar(&c.MaxUIDs, "max-uids", c.MaxUIDs, "most uids in one push")
	fs.IntVar(&c.MaxBodies, "max-bodies", c.MaxBodies, "most message bodies in one push")
	fs.IntVar(&c.MaxReceiptsPerPush, "max-receipts-per-push", c.MaxReceiptsPerPush, "most (uid, platform, message) targets one push may track with NEED_RECEIPTS")
	fs.IntVar(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest message body: its bytes (the Any's value), without its type URL")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "largest sum of bodies' bytes in one push")
	fs.IntVar(&c.MaxDevicesPerUID, "max-devices-per-uid", c.MaxDevicesPerUID, "device tokens a uid keeps; registering one more evicts the oldest")
	registerStationSecurity(fs, o)
	fs.IntVar(&c.MaxPushBytes, "max-push-bytes", c.MaxPushBytes, "most Kafka bytes one push may create: uids × (bodies + notification)")
	fs.Float64Var(&c.PushRatePerKey, "push-rate-per-key", c.PushRatePerKey, "Push calls per second one API key may make on one station (a second's worth at once); more are refused RESOURCE_EXHAUSTED")
	fs.Float64Var(&c.ReceiptsRatePerKey, "receipts-rate-per-key", c.ReceiptsRatePerKey, "(uid, platform, message) targets per second one API key may track with NEED_RECEIPTS on one station (one push of --max-receipts-per-push at once)")
	fs.Float64Var(&c.IdempotencyRatePerKey, "idempotency-rate-per-key", c.IdempotencyRatePerKey, "Push calls with an idempotency key per second one API key may make on one station")
	fs.Int64Var(&c.MaxPushBytesInFlight, "max-push-bytes-in-flight", c.MaxPushBytesInFlight, "most fan-out bytes of Push and BroadcastRoom calls one station holds at once; a call that does not fit is refused RESOURCE_EXHAUSTED")
	fs.IntVar(&c.MaxSessionsPerUID, "max-sessions-per-uid", c.MaxSessionsPerUID, "most sessions one uid may hold; more connects are refused")
	fs.IntVar(&c.MaxSessionsPerPlatform, "max-sessions-per-platform", c.MaxSessionsPerPlatform, "most sessions one uid may hold on one platform")
	fs.DurationVar(&c.AuthTimeout, "auth-timeout", c.AuthTimeout, "how long authenticating one connect may take")
	fs.IntVar(&c.MaxBroadcastRooms, "max-broadcast-rooms", c.MaxBroadcastRooms, "most rooms in one BroadcastRoom")
	fs.Float64Var(&c.DrainClearRate, "drain-clear-rate", station.DefaultDrainClearRate, "sessions per second a draining boat's records are removed at, so that a boat of many sessions leaving does not take the cores other users' deliveries need (0: as fast as Redis answers)")
	fs.Float64Var(&c.BroadcastRate, "broadcast-rate", c.BroadcastRate, "BroadcastRoom and BroadcastAll calls per second one station accepts (a second's worth at once)")
	fs.IntVar(&c.PresenceBuffer, "presence-buffer", c.PresenceBuffer, "presence events a station holds while Kafka is slow or down; beyond it the newest are dropped (gomsg_presence_dropped_total)")
	fs.DurationVar(&c.IdempotencyWindow, "idempotency-window", c.IdempotencyWindow, "how long a Push's idempotency key is remembered: a retry within it returns the first seqs")
	o.DLQ.Defaults()
	fs.IntVar(&o.DLQ.MaxRedrives, "dlq-max-redrives", o.DLQ.MaxRedrives, "times one dead-lettered task may be redriven; a task that dies again after that many stays in the dead-letter list")
	fs.DurationVar(&o.DLQ.RefreshInterval, "dlq-refresh-interval", o.DLQ.RefreshInterval, "how often station reads new dead letters and sets gomsg_station_dlq_records and gomsg_station_dlq_oldest_age_seconds")
	h := &c.HTTP
	fs.Int64Var(&h.MaxBodyBytes, "http-max-body-bytes", h.MaxBodyBytes, "largest HTTP/JSON request body (413 beyond)")
	fs.DurationVar(&h.ReadTimeout, "http-read-timeout", h.ReadTimeout, "time to read a whole HTTP request, body included (408 beyond)")
	fs.DurationVar(&h.ReadHeaderTimeout, "http-read-header-timeout", h.ReadHeaderTimeout, "time to read an HTTP request's header")
	fs.DurationVar(&h.IdleTimeout, "http-idle-timeout", h.IdleTimeout, "idle HTTP keep-alive connections are closed after this")
	fs.IntVar(&h.MaxHeaderBytes, "http-max-header-bytes", h.MaxHeaderBytes, "largest HTTP request header (431 beyond)")
}

// registerGRPCLimits adds the limits every gRPC server of boat and station
// gets.
func registerGRPCLimits(fs *flag.FlagSet, l *grpcx.Limits) {
	fs.IntVar(&l.MaxRecvBytes, "grpc-max-recv-bytes", grpcx.DefaultMaxRecvBytes, "largest gRPC message a server accepts")
	fs.IntVar(&l.MaxHeaderBytes, "grpc-max-header-bytes", grpcx.DefaultMaxHeaderBytes, "largest gRPC header list (metadata) a server accepts")
	fs.DurationVar(&l.HandshakeTimeout, "grpc-handshake-timeout", grpcx.DefaultHandshakeTimeout, "time a new gRPC connection has to finish its TLS and HTTP/2 handshake (boat's client listener: --connect-timeout)")
	fs.DurationVar(&l.IdleTimeout, "grpc-idle-timeout", grpcx.DefaultIdleTimeout, "a gRPC connection without a stream this long is closed (boat's client listener: twice --connect-timeout)")
}

// batchWindow is the flag.Value of --room-batch-window: its 0 (send what
// is queued, no wait) is boat.NoBatchWindow, since boat's zero value means
// the default.
type batchWindow struct{ d *time.Duration }

func (w batchWindow) String() string {
	if w.d == nil || *w.d < 0 {
		return "0s"
	}
	return w.d.String()
}

// Set implements flag.Value.
func (w batchWindow) Set(v string) error {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return err
	case d < 0:
		return fmt.Errorf("%s: must not be negative", v)
	case d == 0:
		d = boat.NoBatchWindow
	}
	*w.d = d
	return nil
}

// kickPolicy is the flag.Value of --kick-policy; station validates it.
type kickPolicy station.KickPolicy

func (k *kickPolicy) String() string { return string(*k) }

// Set implements flag.Value.
func (k *kickPolicy) Set(v string) error { *k = kickPolicy(v); return nil }

// registerConsumer adds the consumer settings shared by carrier and horn;
// in one process (gomsg dev) one flag sets both.
func registerConsumer(fs *flag.FlagSet, dst ...*queue.ConsumerSettings) {
	var def queue.ConsumerSettings
	def.Defaults()
	for _, d := range dst {
		*d = def
	}
	fs.Var(fanOut[int64]{dst: dst, field: func(s *queue.ConsumerSettings) *int64 { return &s.PartitionBufferBytes },
		parse: func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) }},
		"partition-buffer-bytes", "`bytes` of records fetched and not yet finished per Kafka partition; at the bound that partition pauses")
	session := fanOut[time.Duration]{dst: dst, field: func(s *queue.ConsumerSettings) *time.Duration { return &s.SessionTimeout },
		parse: time.ParseDuration}
	fs.Var(session, "queue-session-timeout", "consumer group session timeout (`duration`), on Kafka and NATS alike: how long a crashed member's partitions wait before they move")
	// The name it had while Kafka was the only queue, kept so that
	// existing command lines and manifests go on working.
	fs.Var(session, "kafka-session-timeout", "the same as --queue-session-timeout (`duration`), its former name")
}

// fanOut is a flag.Value that sets one field of several settings.
type fanOut[T any] struct {
	dst   []*queue.ConsumerSettings
	field func(*queue.ConsumerSettings) *T
	parse func(string) (T, error)
}

func (f fanOut[T]) String() string {
	if len(f.dst) == 0 {
		return ""
	}
	return fmt.Sprint(*f.field(f.dst[0]))
}

// Set implements flag.Value.
func (f fanOut[T]) Set(v string) error {
	x, err := f.parse(v)
	if err != nil {
		return err
	}
	for _, d := range f.dst {
		*f.field(d) = x
	}
	return nil
}

func registerCarrier(fs *flag.FlagSet, c *carrier.Config) {
	c.Defaults()
	fs.StringVar(&c.GroupID, "group-id", c.GroupID, "Kafka consumer group")
	fs.IntVar(&c.Workers, "workers", c.Workers, "users served in parallel")
	fs.DurationVar(&c.AckWait, "ack-wait", c.AckWait, "how long a client has to ACK a NEED_ACK message")
	fs.DurationVar(&c.CallTimeout, "call-timeout", c.CallTimeout, "timeout of a boat call beyond ack-wait")
	fs.IntVar(&c.MaxRetries, "max-retries", c.MaxRetries, "retries of a task that failed in part before it is dead-lettered")
	fs.DurationVar(&c.RetryBackoffMin, "retry-backoff-min", c.RetryBackoffMin, "wait before the first retry (doubles per retry, jittered)")
	fs.DurationVar(&c.RetryBackoffMax, "retry-backoff-max", c.RetryBackoffMax, "longest wait before a retry")
	fs.IntVar(&c.BroadcastWorkers, "broadcast-workers", c.BroadcastWorkers, "rooms whose broadcasts are handed to boats in parallel")
	fs.IntVar(&c.BroadcastAttempts, "broadcast-attempts", c.BroadcastAttempts, "tries of one broadcast on one boat before that boat's members miss it")
	fs.DurationVar(&c.UnseenPollInterval, "unseen-poll-interval", c.UnseenPollInterval, "how often due notify-if-unseen notifications are looked for (they go out up to this late)")
	fs.Var(positiveDuration{&c.DeliveryRetention}, "delivery-retention",
		"how long carrier keeps a message's receipts for GetDelivery (gomsgctl status) after its last one, a positive `duration` (with --receipts-topic)")
}

// positiveDuration is the flag.Value of a duration that must be positive:
// the config's zero value means its default, so 0 is refused here.
type positiveDuration struct{ d *time.Duration }

func (p positiveDuration) String() string {
	if p.d == nil {
		return ""
	}
	return p.d.String()
}

// Set implements flag.Value.
func (p positiveDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return err
	case d <= 0:
		return errors.New("must be positive")
	}
	*p.d = d
	return nil
}

func registerHorn(fs *flag.FlagSet, c *horn.Config, devMode bool) {
	c.Defaults()
	fs.StringVar(&c.GroupID, "horn-group-id", c.GroupID, "Kafka consumer group of horn (its retry consumer adds .retry)")
	fs.IntVar(&c.Workers, "horn-workers", c.Workers, "users (retries: devices) horn serves in parallel")
	fs.IntVar(&c.Concurrency, "notify-concurrency", c.Concurrency, "provider requests in flight per provider")
	fs.IntVar(&c.MaxRetries, "notify-max-retries", c.MaxRetries, "retries of a throttled or failed notification before it is dead-lettered")
	fs.DurationVar(&c.RetryBackoff, "notify-retry-backoff", c.RetryBackoff, "wait before the first retry, doubled per retry")
	fs.DurationVar(&c.RetryBackoffMax, "notify-retry-backoff-max", c.RetryBackoffMax, "longest wait between retries")
	fs.DurationVar(&c.RetryAfterMax, "notify-retry-after-max", c.RetryAfterMax, "cap on a provider's Retry-After")
	fs.DurationVar(&c.SendTimeout, "notify-send-timeout", c.SendTimeout, "timeout of one provider request")
	a := &c.APNs
	fs.StringVar(&a.KeyFile, "apns-key-file", "", "APNs token auth: the .p8 signing key")
	fs.StringVar(&a.KeyID, "apns-key-id", "", "APNs token auth: key id")
	fs.StringVar(&a.TeamID, "apns-team-id", "", "APNs token auth: team id")
	fs.StringVar(&a.CertFile, "apns-cert-file", "", "APNs certificate auth: .p12 or PEM client certificate with key")
	fs.StringVar(&a.CertPassword, "apns-cert-password", "", "password of apns-cert-file")
	fs.StringVar(&a.Topic, "apns-topic", "", "APNs topic: the app's bundle id (a device's app_id overrides it)")
	fs.StringVar(&a.Environment, "apns-environment", a.Environment, "APNs host: production or sandbox")
	fs.StringVar(&a.Host, "apns-host", "", "APNs host URL overriding apns-environment (proxies, tests)")
	fs.StringVar(&a.CAFile, "apns-ca-file", "", "PEM bundle of extra roots to trust for the APNs host")
	fs.StringVar(&a.PushType, "apns-push-type", a.PushType, "apns-push-type of notifications with a title or body")
	fs.StringVar(&c.FCM.CredentialsFile, "fcm-credentials-file", "", "FCM HTTP v1: Google service-account JSON")
	fs.StringVar(&c.FCM.Endpoint, "fcm-endpoint", c.FCM.Endpoint, "FCM API base URL (proxies, tests)")
	c.LogUnconfigured = devMode
}

func parse(fs *flag.FlagSet, args []string) error {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of gomsg %s (flags; each also as GOMSG_<FLAG> in the environment):\n", fs.Name())
		fs.PrintDefaults()
	}
	if err := config.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w (run \"gomsg %s -h\" for every flag)", err, fs.Name())
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return config.CheckEnv(knownFlagSets())
}

// knownFlagSets are the flags of every gomsg command. A GOMSG_* variable
// named after any of them is accepted by all: one environment (a .env file,
// a ConfigMap) is often shared by several services.
func knownFlagSets() []*flag.FlagSet {
	dev, _ := devFlags()
	hc, _ := healthcheckFlags()
	return []*flag.FlagSet{dev, hc}
}
