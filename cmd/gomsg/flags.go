package main

import (
	"context"
	"flag"
	"fmt"
	"os"
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
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/tracing"
)

// common holds the settings every service shares.
type common struct {
	backends  app.Backends
	brokers   config.List
	etcd      config.List
	platforms string
	logLevel  string
	logFormat string
	opsAddr   string
	pprof     bool
	otlp      string
	otlpPlain bool
}

func (c *common) register(fs *flag.FlagSet, devMode bool) {
	fs.StringVar(&c.backends.RedisAddr, "redis-addr", "127.0.0.1:6379", "Redis address (host:port)")
	fs.Var(&c.brokers, "kafka-brokers", "Kafka bootstrap brokers, comma-separated (default 127.0.0.1:9092)")
	fs.Var(&c.etcd, "etcd-endpoints", "etcd endpoints, comma-separated (default 127.0.0.1:2379)")
	fs.StringVar(&c.backends.EtcdPrefix, "etcd-prefix", "/gomsg", "etcd key prefix of this cluster")
	fs.StringVar(&c.backends.TaskTopic, "task-topic", "gomsg.tasks", "Kafka topic of per-user tasks")
	fs.StringVar(&c.backends.RetryTopic, "retry-topic", "", "Kafka topic of tasks to retry (default <task-topic>.retry)")
	fs.StringVar(&c.backends.DeadLetterTopic, "dead-letter-topic", "", "Kafka topic of tasks that failed every retry (default <task-topic>.dlq)")
	fs.StringVar(&c.backends.NotifyTopic, "notify-topic", "gomsg.notify", "Kafka topic of notification tasks (carrier → horn)")
	fs.StringVar(&c.backends.NotifyRetryTopic, "notify-retry-topic", "gomsg.notify.retry", "Kafka topic of horn's retries")
	fs.StringVar(&c.backends.NotifyDeadTopic, "notify-dead-topic", "gomsg.notify.dead", "Kafka topic of notifications horn gave up on")
	fs.IntVar(&c.backends.TaskPartitions, "task-partitions", 16, "partitions of the topics gomsg creates")
	fs.IntVar(&c.backends.ReplicationFactor, "kafka-replication", 1, "replication factor of topics gomsg creates")
	fs.BoolVar(&c.backends.CreateTopics, "create-topics", true, "create missing Kafka topics at start")
	fs.StringVar(&c.platforms, "platforms", platform.DefaultSpec,
		"platforms: name[:offline=<expiry>/<max>|none][:notify=<provider>], comma-separated")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	defOps := "0.0.0.0:9090"
	if devMode {
		defOps = "127.0.0.1:7290"
	}
	fs.StringVar(&c.opsAddr, "ops-addr", defOps, "listen address of /metrics, /healthz and /readyz; empty: off")
	fs.BoolVar(&c.pprof, "pprof", false, "also serve /debug/pprof/ on ops-addr")
	fs.StringVar(&c.otlp, "otlp-endpoint", "", "OTLP/gRPC collector (host:port) to export traces to; empty: no tracing")
	fs.BoolVar(&c.otlpPlain, "otlp-insecure", true, "talk to the OTLP collector without TLS")
	defFormat := "json"
	if devMode {
		defFormat = "console"
		c.backends.RedisAddr = ""
	}
	fs.StringVar(&c.logFormat, "log-format", defFormat, "log format: json or console")
}

// finish validates the shared settings after parsing.
func (c *common) finish() (platform.Set, error) {
	c.backends.KafkaBrokers = c.brokers
	c.backends.EtcdEndpoints = c.etcd
	if c.backends.TaskPartitions < 1 {
		return platform.Set{}, fmt.Errorf("task-partitions: %d, must be at least 1", c.backends.TaskPartitions)
	}
	return app.ParsePlatforms(c.platforms)
}

func (c *common) defaultBackends() {
	if len(c.backends.KafkaBrokers) == 0 {
		c.backends.KafkaBrokers = []string{"127.0.0.1:9092"}
	}
	if len(c.backends.EtcdEndpoints) == 0 {
		c.backends.EtcdEndpoints = []string{"127.0.0.1:2379"}
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
	hn, _ := os.Hostname()
	fs.StringVar(&c.ID, "boat-id", hn, "boat id in etcd and session records (unique per boat; default the hostname)")
	fs.StringVar(&c.ClientAddr, "client-addr", host+":7100", "listen address of the client stream")
	fs.StringVar(&c.InternalAddr, "boat-internal-addr", host+":7110", "listen address of the API carrier calls")
	fs.StringVar(&c.AdvertiseAddr, "boat-advertise-addr", "", "address carrier dials for this boat (default: the bound boat-internal-addr)")
	fs.StringVar(stationAddr, "station-addr", "127.0.0.1:7210", "station's internal address")
	fs.IntVar(&c.SendQueue, "send-queue", 64, "payloads queued per session before it counts as a slow consumer")
	fs.DurationVar(&c.MaxAckWait, "max-ack-wait", time.Minute, "longest ACK wait carrier may ask for")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", 10*time.Second, "etcd lease TTL")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long a stop may drain")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", 10*time.Second, "how long a send to a client may block before it is kicked as a slow consumer")
	fs.IntVar(&c.MaxConnections, "max-connections", 100000, "most client connections a boat holds; more are closed when accepted")
	fs.IntVar(&c.MaxStreamsPerConnection, "max-streams-per-connection", 16, "most sessions (streams) on one client connection")
	fs.Float64Var(&c.ConnectRate, "connect-rate", 2000, "new sessions per second a boat accepts in all (a second's worth at once)")
	fs.Float64Var(&c.ConnectRatePerIP, "connect-rate-per-ip", 200, "new sessions per second from one source address (IPv6: per /64)")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", 10*time.Second, "time a session has to connect (auth + station); connections without a stream close after twice it")
	fs.DurationVar(&c.GhostSweep, "ghost-sweep-interval", time.Minute, "how often a boat reports sessions recorded for it that it does not hold as ended")
}

func registerStation(fs *flag.FlagSet, o *app.StationOptions, host string, devMode bool) {
	c := &o.Station
	fs.StringVar(&c.PushGRPCAddr, "push-grpc-addr", host+":7200", "listen address of the Push API (gRPC)")
	fs.StringVar(&c.PushHTTPAddr, "push-http-addr", host+":7280", "listen address of the Push API (HTTP/JSON); empty: off")
	fs.StringVar(&c.InternalAddr, "station-internal-addr", host+":7210", "listen address of the API boats call")
	def := ""
	if devMode {
		def = app.DevJWTSecret
	}
	fs.StringVar(&o.JWTSecret, "jwt-secret", def, "HS256 secret of device tokens (claims uid and platform)")
	fs.StringVar(&o.AuthAddr, "auth-addr", "", "address of a gomsg.auth.Auth service to use instead of JWTs")
	fs.Func("kick-policy", "older sessions of the same uid+platform on connect: kick-older or keep-all (default kick-older)", func(v string) error {
		c.KickPolicy = station.KickPolicy(v)
		return nil
	})
	fs.IntVar(&c.MaxUIDs, "max-uids", 10000, "most uids in one push")
	fs.IntVar(&c.MaxBodies, "max-bodies", 100, "most message bodies in one push")
	fs.IntVar(&c.MaxBodyBytes, "max-body-bytes", 64<<10, "largest message body")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", 256<<10, "largest sum of bodies in one push")
	fs.IntVar(&c.MaxPushBytes, "max-push-bytes", 64<<20, "most Kafka bytes one push may create: uids × (bodies + notification)")
	fs.IntVar(&c.MaxSessionsPerUID, "max-sessions-per-uid", 100, "most sessions one uid may hold; more connects are refused")
	fs.IntVar(&c.MaxSessionsPerPlatform, "max-sessions-per-platform", 10, "most sessions one uid may hold on one platform")
	fs.DurationVar(&c.AuthTimeout, "auth-timeout", 5*time.Second, "how long authenticating one connect may take")
	h := &c.HTTP
	fs.Int64Var(&h.MaxBodyBytes, "http-max-body-bytes", 2<<20, "largest HTTP/JSON request body (413 beyond)")
	fs.DurationVar(&h.ReadTimeout, "http-read-timeout", 30*time.Second, "time to read a whole HTTP request, body included (408 beyond)")
	fs.DurationVar(&h.ReadHeaderTimeout, "http-read-header-timeout", 10*time.Second, "time to read an HTTP request's header")
	fs.DurationVar(&h.IdleTimeout, "http-idle-timeout", 2*time.Minute, "idle HTTP keep-alive connections are closed after this")
	fs.IntVar(&h.MaxHeaderBytes, "http-max-header-bytes", 64<<10, "largest HTTP request header (431 beyond)")
}

// registerGRPCLimits adds the limits every gRPC server of boat and station
// gets.
func registerGRPCLimits(fs *flag.FlagSet, l *grpcx.Limits) {
	fs.IntVar(&l.MaxRecvBytes, "grpc-max-recv-bytes", grpcx.DefaultMaxRecvBytes, "largest gRPC message a server accepts")
	fs.IntVar(&l.MaxHeaderBytes, "grpc-max-header-bytes", grpcx.DefaultMaxHeaderBytes, "largest gRPC header list (metadata) a server accepts")
}

func registerCarrier(fs *flag.FlagSet, c *carrier.Config) {
	fs.StringVar(&c.GroupID, "group-id", "gomsg-carrier", "Kafka consumer group")
	fs.IntVar(&c.Workers, "workers", 256, "users served in parallel")
	fs.DurationVar(&c.AckWait, "ack-wait", 10*time.Second, "how long a client has to ACK a NEED_ACK message")
	fs.DurationVar(&c.CallTimeout, "call-timeout", 5*time.Second, "timeout of a boat call beyond ack-wait")
	fs.IntVar(&c.MaxRetries, "max-retries", 5, "retries of a task that failed in part before it is dead-lettered")
	fs.DurationVar(&c.RetryBackoffMin, "retry-backoff-min", time.Second, "wait before the first retry (doubles per retry, jittered)")
	fs.DurationVar(&c.RetryBackoffMax, "retry-backoff-max", 30*time.Second, "longest wait before a retry")
}

func registerHorn(fs *flag.FlagSet, c *horn.Config, devMode bool) {
	fs.StringVar(&c.GroupID, "horn-group-id", "gomsg-horn", "Kafka consumer group of horn (its retry consumer adds .retry)")
	fs.IntVar(&c.Workers, "horn-workers", 64, "users (retries: devices) horn serves in parallel")
	fs.IntVar(&c.Concurrency, "notify-concurrency", 64, "provider requests in flight per provider")
	fs.IntVar(&c.MaxRetries, "notify-max-retries", 5, "retries of a throttled or failed notification before it is dead-lettered")
	fs.DurationVar(&c.RetryBackoff, "notify-retry-backoff", time.Second, "wait before the first retry, doubled per retry")
	fs.DurationVar(&c.RetryBackoffMax, "notify-retry-backoff-max", 5*time.Minute, "longest wait between retries")
	fs.DurationVar(&c.RetryAfterMax, "notify-retry-after-max", 10*time.Minute, "cap on a provider's Retry-After")
	fs.DurationVar(&c.SendTimeout, "notify-send-timeout", 10*time.Second, "timeout of one provider request")
	a := &c.APNs
	fs.StringVar(&a.KeyFile, "apns-key-file", "", "APNs token auth: the .p8 signing key")
	fs.StringVar(&a.KeyID, "apns-key-id", "", "APNs token auth: key id")
	fs.StringVar(&a.TeamID, "apns-team-id", "", "APNs token auth: team id")
	fs.StringVar(&a.CertFile, "apns-cert-file", "", "APNs certificate auth: .p12 or PEM client certificate with key")
	fs.StringVar(&a.CertPassword, "apns-cert-password", "", "password of apns-cert-file")
	fs.StringVar(&a.Topic, "apns-topic", "", "APNs topic: the app's bundle id (a device's app_id overrides it)")
	fs.StringVar(&a.Environment, "apns-environment", "production", "APNs host: production or sandbox")
	fs.StringVar(&a.Host, "apns-host", "", "APNs host URL overriding apns-environment (proxies, tests)")
	fs.StringVar(&a.CAFile, "apns-ca-file", "", "PEM bundle of extra roots to trust for the APNs host")
	fs.StringVar(&a.PushType, "apns-push-type", "alert", "apns-push-type of notifications with a title or body")
	fs.StringVar(&c.FCM.CredentialsFile, "fcm-credentials-file", "", "FCM HTTP v1: Google service-account JSON")
	fs.StringVar(&c.FCM.Endpoint, "fcm-endpoint", "https://fcm.googleapis.com", "FCM API base URL (proxies, tests)")
	c.LogUnconfigured = devMode
}

func parse(fs *flag.FlagSet, args []string) error {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage of gomsg %s (flags; each also as GOMSG_<FLAG> in the environment):\n", fs.Name())
		fs.PrintDefaults()
	}
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return nil
}
