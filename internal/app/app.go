// Package app wires gomsg's services to their backends. The gomsg binary's
// subcommands, `gomsg dev` and the end-to-end tests all build services here,
// so they run the same code.
package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/carrier"
	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/dlq"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/idempotency"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/tlsx"
	"github.com/gomsg/gomsg/internal/tracing"
	"github.com/gomsg/gomsg/internal/unseen"
	"github.com/gomsg/gomsg/pb/receiptpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// DevJWTSecret is the JWT secret `gomsg dev` and gomsgctl default to. It is
// public: never use it outside a developer's machine.
const DevJWTSecret = auth.DevSecret

// DefaultPresenceTopic is --presence-topic's default.
const DefaultPresenceTopic = "gomsg.presence"

// DefaultReceiptsTopic is --receipts-topic's default.
const DefaultReceiptsTopic = "gomsg.receipts"

// Backends are the addresses of Kafka, Redis and etcd.
type Backends struct {
	// RedisAddrs is one Redis server, or with RedisCluster any nodes of a
	// Redis Cluster (the client learns the others from them).
	RedisAddrs []string
	// RedisCluster selects Redis Cluster and its key layout (package rkeys).
	RedisCluster bool
	// Queue is the broker of the topics: QueueKafka (the default) or
	// QueueNATS (JetStream at NATSURLs).
	Queue           string
	KafkaBrokers    []string
	NATSURLs        []string
	EtcdEndpoints   []string
	EtcdPrefix      string
	TaskTopic       string
	RetryTopic      string
	DeadLetterTopic string
	TaskPartitions  int
	// Horn's topics: notification tasks (from carrier), their retries and
	// dead letters. They get TaskPartitions partitions.
	NotifyTopic      string
	NotifyRetryTopic string
	NotifyDeadTopic  string
	// BroadcastTopic carries room broadcasts and broadcasts to everyone
	// (station → carrier), one record per room keyed by the room.
	BroadcastTopic string
	// PresenceTopic carries station's presence events (connects,
	// disconnects, kickouts), keyed by uid, for backends to consume;
	// empty: none are published. Not defaulted (empty is off): the flag's
	// default is DefaultPresenceTopic.
	PresenceTopic string
	// ReceiptsTopic carries delivery receipts (station, carrier, horn →
	// backends and carrier's delivery records), keyed by uid; empty: none
	// are recorded. Not defaulted (empty is off): the flag's default is
	// DefaultReceiptsTopic.
	ReceiptsTopic     string
	CreateTopics      bool
	ReplicationFactor int
	// KafkaWriteTimeout bounds one produce; past it a push is Unavailable.
	KafkaWriteTimeout time.Duration
	// StartTimeout is how long Dial waits for each backend to answer.
	StartTimeout time.Duration

	// Credentials and TLS towards each backend (secure.go). Dial reads the
	// password files; passwords never appear in logs or errors.
	RedisAuth          Credentials
	RedisTLS           tlsx.Client
	KafkaSASLMechanism string
	KafkaAuth          Credentials
	KafkaTLS           tlsx.Client
	EtcdAuth           Credentials
	EtcdTLS            tlsx.Client
	// NATS credentials: a user and password (file), a token (file or
	// GOMSG_NATS_TOKEN), an NKey seed file or a .creds file; TLS with a
	// CA. NATSReplicas and NATSMaxAge are the settings of the streams
	// --create-topics creates.
	NATSAuth         Credentials
	NATSToken        string
	NATSTokenFile    string
	NATSNKeySeedFile string
	NATSCredsFile    string
	NATSTLS          tlsx.Client
	NATSReplicas     int
	NATSMaxAge       time.Duration

	internalToken string // resolved from ClusterConfig.Internal by StartCluster
}

// Defaults fills unset fields.
func (b *Backends) Defaults() {
	if b.Queue == "" {
		b.Queue = QueueKafka
	}
	if b.NATSReplicas == 0 {
		b.NATSReplicas = 1
	}
	if b.NATSMaxAge == 0 {
		b.NATSMaxAge = 7 * 24 * time.Hour
	}
	if b.EtcdPrefix == "" {
		b.EtcdPrefix = "/gomsg"
	}
	if b.TaskTopic == "" {
		b.TaskTopic = "gomsg.tasks"
	}
	if b.RetryTopic == "" {
		b.RetryTopic = b.TaskTopic + ".retry"
	}
	if b.DeadLetterTopic == "" {
		b.DeadLetterTopic = b.TaskTopic + ".dlq"
	}
	if b.NotifyTopic == "" {
		b.NotifyTopic = "gomsg.notify"
	}
	if b.NotifyRetryTopic == "" {
		b.NotifyRetryTopic = "gomsg.notify.retry"
	}
	if b.NotifyDeadTopic == "" {
		b.NotifyDeadTopic = "gomsg.notify.dead"
	}
	if b.BroadcastTopic == "" {
		b.BroadcastTopic = "gomsg.broadcast"
	}
	if b.TaskPartitions == 0 {
		b.TaskPartitions = 16
	}
	if b.ReplicationFactor == 0 {
		b.ReplicationFactor = 1
	}
	if b.StartTimeout == 0 {
		b.StartTimeout = DefaultStartTimeout
	}
}

// Topics lists the topics gomsg uses.
func (b *Backends) Topics() []queue.TopicSpec {
	var out []queue.TopicSpec
	for _, name := range []string{b.TaskTopic, b.RetryTopic, b.DeadLetterTopic, b.NotifyTopic, b.NotifyRetryTopic, b.NotifyDeadTopic, b.BroadcastTopic, b.PresenceTopic, b.ReceiptsTopic} {
		if name != "" {
			out = append(out, queue.TopicSpec{Name: name, Partitions: b.TaskPartitions, ReplicationFactor: b.ReplicationFactor})
		}
	}
	return out
}

// The queues --queue selects.
const (
	QueueKafka = "kafka"
	QueueNATS  = "nats"
)

// Publisher is what the services publish to: the Kafka producer or the
// JetStream connection.
type Publisher interface {
	Publish(ctx context.Context, recs ...queue.Record) error
	Close() error
}

// Clients are open connections to the backends; Close releases them.
type Clients struct {
	// Redis is a *redis.Client, or a *redis.ClusterClient with
	// Backends.RedisCluster; the stores pick their key layout from it.
	Redis    redis.UniversalClient
	Etcd     *clientv3.Client
	Producer Publisher
	// NATS is the JetStream connection with --queue nats (it is also the
	// Producer), nil on Kafka.
	NATS    *queue.JetStream
	Metrics *metrics.Metrics
	// Kafka is SASL and TLS towards the brokers, for the consumers.
	Kafka queue.Security
	// TLS is the process's own TLS (listeners and internal calls); set by
	// StartCluster.
	TLS tlsx.Configs
}

// Dial connects to the backends in need and waits until each answers, at
// most b.StartTimeout each; a backend that does not is an error naming it,
// its address and --start-timeout. When ctx ends first, Dial returns ctx's
// error.
func Dial(ctx context.Context, b Backends, need Needs, log *zap.Logger) (*Clients, error) {
	b.Defaults()
	sec, err := b.resolveSecurity()
	if err != nil {
		return nil, err
	}
	c := &Clients{Metrics: metrics.New(), Kafka: sec.kafka}
	c.Metrics.Queue = b.Queue
	fail := func(err error) (*Clients, error) {
		c.Close()
		return nil, err
	}
	if need.Redis {
		r, err := b.redisClient(sec)
		if err != nil {
			return fail(err)
		}
		c.Redis = r
		if err := waitReachable(ctx, b.StartTimeout, "redis", strings.Join(b.RedisAddrs, ","),
			both(tcpProbe(b.RedisAddrs), redisProbe(c.Redis))); err != nil {
			return fail(err)
		}
	}
	if need.Etcd {
		if len(b.EtcdEndpoints) == 0 {
			return fail(errors.New("--etcd-endpoints: must be set"))
		}
		e, err := clientv3.New(clientv3.Config{Endpoints: b.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: log.Named("etcd").WithOptions(zap.IncreaseLevel(zap.ErrorLevel)), Context: ctx,
			Username: sec.etcd.Username, Password: sec.etcd.Password, TLS: sec.etcdTLS})
		if err != nil {
			return fail(fmt.Errorf("etcd %s: %w", strings.Join(b.EtcdEndpoints, ","), err))
		}
		c.Etcd = e
		if err := waitReachable(ctx, b.StartTimeout, "etcd", strings.Join(b.EtcdEndpoints, ","),
			both(tcpProbe(b.EtcdEndpoints), etcdProbe(e, b.EtcdPrefix))); err != nil {
			return fail(err)
		}
	}
	if need.Kafka && b.Queue == QueueNATS {
		if err := c.dialNATS(ctx, b, sec, log); err != nil {
			return fail(err)
		}
	} else if need.Kafka {
		if len(b.KafkaBrokers) == 0 {
			return fail(errors.New("--kafka-brokers: must be set"))
		}
		addr := strings.Join(b.KafkaBrokers, ",")
		if err := waitReachable(ctx, b.StartTimeout, "kafka", addr,
			both(tcpProbe(b.KafkaBrokers), kafkaProbe(sec.kafka, b.KafkaBrokers))); err != nil {
			return fail(err)
		}
		if b.CreateTopics {
			tctx, cancel := context.WithTimeout(ctx, b.StartTimeout)
			err := queue.EnsureTopicsWith(tctx, sec.kafka, b.KafkaBrokers, b.Topics())
			cancel()
			switch {
			case err != nil && ctx.Err() != nil:
				return fail(ctx.Err())
			case err != nil:
				return fail(fmt.Errorf("kafka %s: create topics (--create-topics): %w", addr, err))
			}
		}
		c.Producer = queue.NewProducer(queue.ProducerConfig{Brokers: b.KafkaBrokers, WriteTimeout: b.KafkaWriteTimeout, Security: sec.kafka}, log)
	}
	return c, nil
}

// dialNATS connects to JetStream, waits until it answers and, with
// CreateTopics, creates the streams (else checks they exist).
func (c *Clients) dialNATS(ctx context.Context, b Backends, sec security, log *zap.Logger) error {
	addr := strings.Join(b.NATSURLs, ",")
	j, err := queue.ConnectNATS(queue.NATSConfig{URLs: b.NATSURLs, User: sec.nats.Username, Password: sec.nats.Password,
		Token: sec.natsToken, NKeySeedFile: b.NATSNKeySeedFile, CredsFile: b.NATSCredsFile, TLS: sec.natsTLS,
		Replicas: b.NATSReplicas, MaxAge: b.NATSMaxAge, WriteTimeout: b.KafkaWriteTimeout}, log)
	if err != nil {
		return err
	}
	c.NATS, c.Producer = j, j
	if err := waitReachable(ctx, b.StartTimeout, "nats", addr, j.Ping); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, b.StartTimeout)
	defer cancel()
	err = j.EnsureStreams(tctx, b.Topics(), b.CreateTopics)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("nats %s: streams: %w", addr, err)
	}
	return nil
}

// newConsumer is the consumer factory of the queue c speaks to.
func (c *Clients) newConsumer() queue.NewConsumerFunc {
	if c.NATS != nil {
		return c.NATS.Consumer
	}
	return nil
}

// DefaultNATSURL is --nats-url's default.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// CheckQueue reports a --queue that names no queue.
func (b Backends) CheckQueue() error {
	switch b.Queue {
	case "", QueueKafka, QueueNATS:
		return nil
	}
	return fmt.Errorf("--queue: %q, want kafka or nats", b.Queue)
}

// CheckRedis reports Redis settings that name no deployment: no address,
// or several without RedisCluster (gomsg does not speak Sentinel).
func (b Backends) CheckRedis() error {
	switch {
	case len(b.RedisAddrs) == 0:
		return errors.New("--redis-addrs: must be set")
	case !b.RedisCluster && len(b.RedisAddrs) > 1:
		return fmt.Errorf("--redis-addrs: %d addresses (%s) without --redis-cluster: name one server, or add --redis-cluster for Redis Cluster",
			len(b.RedisAddrs), strings.Join(b.RedisAddrs, ","))
	}
	return nil
}

// RedisClusterSlotsMaxAge is how stale a Redis Cluster client's slot map may
// get before it reads CLUSTER SLOTS again (at most once per period, and
// only while commands are sent).
const RedisClusterSlotsMaxAge = time.Second

// RedisClusterOptions are the options of gomsg's Redis Cluster clients, on
// nodes addrs. A master that dies answers nothing, so no MOVED tells the
// client its slots went to a replica: with go-redis's default slot map age
// (60 s) writes to those slots kept failing for a minute after the replica
// took over in 4 s (internal/clusterchaos).
func RedisClusterOptions(addrs []string) *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: addrs, ClusterStateReloadInterval: RedisClusterSlotsMaxAge}
}

// redisClient opens the client Backends ask for: a Redis Cluster client with
// RedisCluster, else a client of the one server.
func (b Backends) redisClient(sec security) (redis.UniversalClient, error) {
	if err := b.CheckRedis(); err != nil {
		return nil, err
	}
	if b.RedisCluster {
		opt := RedisClusterOptions(b.RedisAddrs)
		opt.Username, opt.Password, opt.TLSConfig = sec.redis.Username, sec.redis.Password, sec.redisTLS
		return redis.NewClusterClient(opt), nil
	}
	return redis.NewClient(&redis.Options{Addr: b.RedisAddrs[0],
		Username: sec.redis.Username, Password: sec.redis.Password, TLSConfig: sec.redisTLS}), nil
}

// Close closes every open client.
func (c *Clients) Close() {
	if c.Producer != nil {
		_ = c.Producer.Close()
	}
	if c.Redis != nil {
		_ = c.Redis.Close()
	}
	if c.Etcd != nil {
		_ = c.Etcd.Close()
	}
}

// StationOptions configure a station process.
type StationOptions struct {
	Station   station.Config
	JWTSecret string
	// AuthAddr, when set, is the business's authpb.Auth service, used
	// instead of the JWT verifier.
	AuthAddr string
	// AuthTLS dials AuthAddr over TLS, verified against AuthCAFile (empty:
	// the system roots). AuthInsecure accepts plaintext to a non-loopback
	// AuthAddr.
	AuthTLS      bool
	AuthCAFile   string
	AuthInsecure bool
	// JWTSecretFile holds the JWT secret (instead of JWTSecret).
	JWTSecretFile string
	// JWTAllowNoExp accepts tokens without an exp claim (--jwt-require-exp=false).
	JWTAllowNoExp bool
	// APIKeys (GOMSG_API_KEYS) and APIKeysFile (--api-keys-file) are the
	// Push API's keys: `<sha256-hex> <scope,scope> [name]` lines.
	APIKeys     string
	APIKeysFile string
	// APIKeysGrace is how long an unusable APIKeysFile's keys stay in force.
	APIKeysGrace time.Duration
	// PushClientCAFile (--push-client-ca-file) lets backends authenticate
	// to the Push API with a client certificate signed by one of its CAs,
	// named by a `cert:<name>` key line.
	PushClientCAFile string
	// DLQ configures the dead-letter tools (--dlq-max-redrives,
	// --dlq-refresh-interval); the topics come from Backends.
	DLQ dlq.Config
	// CarrierGroup is the carriers' consumer group (--console-carrier-group),
	// whose lag the console shows; empty: carrier's default, or its
	// --group-id when carrier runs in the same process.
	CarrierGroup string

	dev   bool // set from ClusterConfig.Dev
	authn auth.Authenticator
	keys  *apikey.Store
}

// NewStation builds a station on open clients, with the boat directory its
// RoomOnline asks (run watches it; run also runs the station).
func NewStation(o StationOptions, b Backends, c *Clients, log *zap.Logger) (st *station.Station, run func(context.Context) error, err error) {
	authn, keys := o.authn, o.keys
	if authn == nil {
		var err error
		if authn, keys, err = stationAuth(o, c.TLS.Cert, log); err != nil {
			return nil, nil, err
		}
	}
	cfg := o.Station
	cfg.TLS, cfg.InternalTLS = c.TLS.Public, c.TLS.Internal
	if o.PushClientCAFile != "" {
		var err error
		if cfg.TLS, err = pushClientTLS(c.TLS.Public, o.PushClientCAFile); err != nil {
			return nil, nil, err
		}
	}
	cfg.EtcdPrefix = b.EtcdPrefix
	cfg.TaskTopic, cfg.BroadcastTopic, cfg.PresenceTopic = b.TaskTopic, b.BroadcastTopic, b.PresenceTopic
	cfg.Receipts = receipt.New(b.ReceiptsTopic, c.Producer)
	cfg.Deliveries = receipt.NewStore(c.Redis)
	timer, err := unseen.New(unseen.Config{Topic: b.NotifyTopic}, log, c.Metrics, unseen.NewStore(c.Redis), c.Producer, cfg.Receipts)
	if err != nil {
		return nil, nil, err
	}
	cfg.OnPullAck = pullAcked(cfg.Receipts, receipt.NewTracked(c.Redis), timer)
	if keys != nil {
		keys.Instrument(c.Metrics.APIKeysFileUnusable, c.Metrics.APIKeysDropped)
	}
	cfg.APIKeys, cfg.InternalToken = keys, b.internalToken
	cfg.Idempotency = idempotency.New(c.Redis)
	cfg.Offline = offline.New(c.Redis)
	boats := discovery.NewBoats(c.Etcd, log, b.EtcdPrefix, grpcx.WithTLS(c.TLS.InternalClient), tracing.DialOption(), auth.BearerDialOption(b.internalToken))
	cfg.Boats = boats
	// The dead-letter tools read the dead-letter topic by partition and
	// offset: Kafka's, or on NATS its stream by subject and sequence.
	var dead dlq.Source = queue.TopicReader{Brokers: b.KafkaBrokers, Security: c.Kafka, Topic: b.DeadLetterTopic}
	if b.Queue == QueueNATS {
		dead = queue.NATSTopicReader{J: c.NATS, Topic: b.DeadLetterTopic}
	}
	dcfg := o.DLQ
	dcfg.TaskTopic = b.TaskTopic
	if cfg.DLQ, err = dlq.New(dcfg, log, c.Metrics, dead, c.Producer, c.Redis); err != nil {
		return nil, nil, err
	}
	consoleLag(&cfg, o.CarrierGroup, b, c)
	if st, err = station.New(cfg, log, c.Metrics, c.Etcd, authn, session.New(c.Redis), device.New(c.Redis), c.Producer); err != nil {
		return nil, nil, err
	}
	return st, func(ctx context.Context) error {
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return boats.Run(gctx) })
		if cfg.DLQ != nil {
			g.Go(func() error { return cfg.DLQ.Run(gctx) })
		}
		g.Go(func() error { return st.Run(gctx) })
		return g.Wait()
	}, nil
}

// consoleLag lets the console read the carriers' consumer lag, for each
// group carrier consumes with: on Kafka from the brokers, on NATS from the
// streams and the groups' committed positions.
func consoleLag(cfg *station.Config, group string, b Backends, c *Clients) {
	if group == "" {
		var cc carrier.Config
		cc.Defaults()
		group = cc.GroupID
	}
	if b.Queue == QueueNATS {
		if c.NATS == nil {
			cfg.CarrierLagNote = "lag not available: no NATS connection"
			return
		}
		cfg.CarrierLag = c.NATS
	} else {
		cfg.CarrierLag = queue.LagReader{Brokers: b.KafkaBrokers, Security: c.Kafka, Timeout: 3 * time.Second}
	}
	// The groups carrier names after its own (see carrier.Run and NewCarrier).
	cfg.CarrierGroups = []station.GroupTopic{{Group: group, Topic: b.TaskTopic}, {Group: group + "-retry", Topic: b.RetryTopic},
		{Group: group + "-broadcast", Topic: b.BroadcastTopic}}
	if b.ReceiptsTopic != "" {
		cfg.CarrierGroups = append(cfg.CarrierGroups, station.GroupTopic{Group: group + "-receipts", Topic: b.ReceiptsTopic})
	}
}

// NewBoat builds a boat that reports to the station at stationAddr.
func NewBoat(cfg boat.Config, stationAddr string, b Backends, c *Clients, log *zap.Logger) (*boat.Boat, error) {
	if stationAddr == "" {
		return nil, fmt.Errorf("--station-addr: must be set")
	}
	conn, err := grpcx.Dial(stationAddr, grpcx.WithTLS(c.TLS.InternalClient))
	if err != nil {
		return nil, fmt.Errorf("--station-addr %q: %w", stationAddr, err)
	}
	cfg.TLS, cfg.InternalTLS = c.TLS.Public, c.TLS.Internal
	cfg.EtcdPrefix = b.EtcdPrefix
	cfg.InternalToken = b.internalToken
	return boat.New(cfg, log, c.Metrics, c.Etcd, stationpb.NewStationClient(auth.WithBearer(conn, b.internalToken)))
}

// Carrier is a carrier with the boat directory it watches and, when
// receipts are on, the consumer that keeps them for GetDelivery.
type Carrier struct {
	*carrier.Carrier
	boats    *discovery.Boats
	receipts *receipt.Materializer // nil: --receipts-topic is empty
}

// NewCarrier builds a carrier on open clients.
func NewCarrier(cfg carrier.Config, b Backends, c *Clients, log *zap.Logger) (*Carrier, error) {
	boats := discovery.NewBoats(c.Etcd, log, b.EtcdPrefix, grpcx.WithTLS(c.TLS.InternalClient), tracing.DialOption(), auth.BearerDialOption(b.internalToken))
	cfg.Brokers, cfg.KafkaSecurity, cfg.NewConsumer = b.KafkaBrokers, c.Kafka, c.newConsumer()
	cfg.TaskTopic, cfg.RetryTopic, cfg.DeadLetterTopic = b.TaskTopic, b.RetryTopic, b.DeadLetterTopic
	cfg.NotifyTopic, cfg.BroadcastTopic = b.NotifyTopic, b.BroadcastTopic
	cfg.Receipts = receipt.New(b.ReceiptsTopic, c.Producer)
	cfg.Tracked = receipt.NewTracked(c.Redis)
	cfg.Unseen = unseen.NewStore(c.Redis)
	cr, err := carrier.New(cfg, log, c.Metrics, session.New(c.Redis), offline.New(c.Redis), boats, c.Producer)
	if err != nil {
		return nil, err
	}
	out := &Carrier{Carrier: cr, boats: boats}
	if b.ReceiptsTopic != "" {
		cfg.Defaults()
		out.receipts, err = receipt.NewMaterializer(receipt.MaterializerConfig{
			Brokers: b.KafkaBrokers, Security: c.Kafka, Topic: b.ReceiptsTopic, GroupID: cfg.GroupID + "-receipts",
			Retention: cfg.DeliveryRetention, Consumer: cfg.Consumer, NewConsumer: c.newConsumer(),
		}, receipt.NewStore(c.Redis), log, c.Metrics)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Run runs the boat watch and the consumers.
func (c *Carrier) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.boats.Run(gctx) })
	g.Go(func() error { return c.Carrier.Run(gctx) })
	if c.receipts != nil {
		g.Go(func() error { return c.receipts.Run(gctx) })
	}
	return g.Wait()
}

// NewHorn builds horn on open clients.
func NewHorn(cfg horn.Config, b Backends, c *Clients, log *zap.Logger) (*horn.Horn, error) {
	cfg.Brokers, cfg.KafkaSecurity, cfg.NewConsumer = b.KafkaBrokers, c.Kafka, c.newConsumer()
	cfg.Topic, cfg.RetryTopic, cfg.DeadTopic = b.NotifyTopic, b.NotifyRetryTopic, b.NotifyDeadTopic
	cfg.Receipts = receipt.New(b.ReceiptsTopic, c.Producer)
	return horn.New(cfg, log, c.Metrics, device.New(c.Redis), c.Producer)
}

// ParsePlatforms reads the --platforms setting.
func ParsePlatforms(spec string) (platform.Set, error) {
	s, err := platform.Parse(spec)
	if err != nil {
		return platform.Set{}, fmt.Errorf("--platforms: %w", err)
	}
	return s, nil
}

// pullAcked is what a device's ACK through Pull triggers once station
// deleted the messages: their notify-if-unseen notifications are cancelled
// (with NOTIFY_CANCELLED receipts), and REPLAYED receipts are recorded for
// those that asked NEED_RECEIPTS. Station knows only the seqs, not the
// messages' options: tracked (which carrier fills as it stores messages)
// says which asked, and forgets them once their receipts are recorded. Both
// steps are idempotent: a failure answers the Pull Unavailable and the
// device's next Pull with the same ACK runs this again.
func pullAcked(rec *receipt.Recorder, tracked *receipt.Tracked, timer *unseen.Timer) station.PullAckHook {
	return func(ctx context.Context, uid, platform, sid, boatID string, seqs []int64) error {
		if err := timer.Cancel(ctx, uid, seqs); err != nil {
			return fmt.Errorf("cancel notify-if-unseen of %d pulled messages: %w", len(seqs), err)
		}
		if !rec.Enabled() {
			return nil
		}
		wanted, err := tracked.Filter(ctx, uid, platform, seqs)
		if err != nil {
			return err
		}
		rs := make([]*receiptpb.Receipt, len(wanted))
		for i, seq := range wanted {
			rs[i] = &receiptpb.Receipt{Seq: seq, Uid: uid, Platform: platform, State: receiptpb.State_REPLAYED,
				Sid: sid, BoatId: boatID, Acked: true, Detail: "pulled"}
		}
		if err := rec.Record(ctx, rs...); err != nil {
			return err
		}
		return tracked.Forget(ctx, uid, platform, wanted)
	}
}
