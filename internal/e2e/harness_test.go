// Package e2e runs whole gomsg clusters in-process against a real
// redis-server, an embedded etcd and an in-process Kafka-protocol broker.
package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/carrier"
	"github.com/gomsg/gomsg/internal/client"
	"github.com/gomsg/gomsg/internal/embedded"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const (
	secret    = "e2e-test-secret-at-least-32-bytes-long"
	taskTopic = "gomsg.tasks"
	// apiKey has every scope; internalToken is the cluster's internal token.
	apiKey        = "e2e-test-api-key"
	internalToken = "e2e-internal-token-0123456789"
)

type env struct {
	t *testing.T
	// redis is the standalone server; nil on a Redis Cluster (cluster).
	redis   *testutil.Redis
	cluster *testutil.RedisCluster
	rdb     redis.UniversalClient
	// keys names gomsg's keys in the layout of the Redis in use.
	keys   rkeys.Layout
	etcd   string
	kafka  string
	broker *embedded.Kafka
	// nats is the nats-server with withNATS (the queue), else nil.
	nats  *testutil.NATS
	gomsg *app.Cluster
	cfg   app.ClusterConfig
	// boatAddr is where devices connect (boat-1's client address).
	boatAddr string
	push     pushpb.PushClient
	// deviceDial are the dial options of devices (TLS).
	deviceDial []grpc.DialOption
}

type option func(*app.ClusterConfig)

func withAckWait(d time.Duration) option {
	return func(c *app.ClusterConfig) { c.Carrier.AckWait = d }
}

// withServices picks the services of the main cluster (default boat,
// station, carrier).
func withServices(s ...string) option {
	return func(c *app.ClusterConfig) { c.Services = s }
}

// startExtra starts more services on the same backends, e.g. a carrier that
// starts late; it stops with the test.
func (e *env) startExtra(services ...string) *app.Cluster {
	e.t.Helper()
	return e.startExtraWith(func(*app.ClusterConfig) {}, services...)
}

// startExtraWith is startExtra with a change to the configuration.
func (e *env) startExtraWith(change func(*app.ClusterConfig), services ...string) *app.Cluster {
	e.t.Helper()
	cfg := e.cfg
	change(&cfg)
	cfg.Services = services
	if cfg.StationAddr == "" && e.gomsg.Station != nil {
		cfg.StationAddr = e.gomsg.Station.InternalAddr()
	}
	cfg.OpsAddr = ""
	c, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(e.t).Named(e.t.Name()+"/extra"))
	if err != nil {
		e.t.Fatalf("start %v: %v", services, err)
	}
	e.t.Cleanup(func() { _ = c.Stop() })
	return c
}

// withRedisCluster runs the cluster on a Redis Cluster of three masters
// instead of a redis-server.
func withRedisCluster() option {
	return func(c *app.ClusterConfig) { c.Backends.RedisCluster = true }
}

// eachRedis runs body three times, as subtests: on a standalone Redis
// (redisOpt changes nothing), on a Redis Cluster (redisOpt is
// withRedisCluster), so one end-to-end scenario checks both key layouts,
// and on a standalone Redis with NATS JetStream as the queue (withNATS), so
// it checks both queues too.
func eachRedis(t *testing.T, body func(t *testing.T, redisOpt option)) {
	t.Run("standalone", func(t *testing.T) { body(t, func(*app.ClusterConfig) {}) })
	t.Run("cluster", func(t *testing.T) { body(t, withRedisCluster()) })
	t.Run("nats", func(t *testing.T) { body(t, withNATS()) })
}

// withNATS runs the cluster on NATS JetStream (an in-process nats-server
// with its store in a temporary directory) instead of Kafka.
func withNATS() option {
	return func(c *app.ClusterConfig) { c.Backends.Queue = app.QueueNATS }
}

// eachQueue runs body twice, as subtests: on Kafka (queueOpt changes
// nothing) and on NATS JetStream (queueOpt is withNATS), so one end-to-end
// scenario checks both queues.
func eachQueue(t *testing.T, body func(t *testing.T, queueOpt option)) {
	t.Run("kafka", func(t *testing.T) { body(t, func(*app.ClusterConfig) {}) })
	t.Run("nats", func(t *testing.T) { body(t, withNATS()) })
}

func withPlatforms(spec string) option {
	return func(c *app.ClusterConfig) {
		p := platform.MustParse(spec)
		c.Station.Station.Platforms, c.Carrier.Platforms = p, p
	}
}

// start runs boat, station and carrier on fresh backends.
func start(t *testing.T, opts ...option) *env {
	t.Helper()
	e := &env{t: t}
	e.etcd = testutil.StartEtcd(t)
	e.broker = testutil.StartKafkaBroker(t, 4, taskTopic)
	e.kafka = e.broker.Addr
	plat := platform.MustParse("ios,android,web")
	cfg := app.ClusterConfig{
		Services: []string{"boat", "station", "carrier"},
		Backends: app.Backends{KafkaBrokers: []string{e.kafka}, EtcdEndpoints: []string{e.etcd},
			TaskTopic: taskTopic, TaskPartitions: 4, CreateTopics: true},
		Internal: app.InternalAuth{Token: internalToken},
		Station: app.StationOptions{JWTSecret: secret, APIKeys: apikey.Line(apiKey, []apikey.Scope{apikey.All}, "e2e"), Station: station.Config{
			PushGRPCAddr: "127.0.0.1:0", PushHTTPAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0", Platforms: plat,
			// The room tests broadcast faster than the default rate.
			BroadcastRate: 1e6}},
		// Every test device connects from 127.0.0.1: the per-address
		// connect rate is raised (the limit tests set their own).
		Boat: boat.Config{ID: "boat-1", ClientAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0",
			ConnectRate: 1e6, ConnectRatePerIP: 1e6, MaxConnectionsPerIP: 1 << 20},
		Carrier: carrier.Config{Platforms: plat, AckWait: 5 * time.Second, Workers: 32},
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.Backends.Queue == app.QueueNATS && len(cfg.Backends.NATSURLs) == 0 {
		e.nats = testutil.StartNATS(t)
		cfg.Backends.NATSURLs = []string{e.nats.URL}
	}
	if cfg.Backends.RedisCluster {
		e.cluster = testutil.StartRedisCluster(t, 3, 0)
		e.rdb = e.cluster.Client(t)
		cfg.Backends.RedisAddrs = e.cluster.Addrs()
	} else {
		e.redis = testutil.StartRedis(t)
		e.rdb = e.redis.Client(t)
		cfg.Backends.RedisAddrs = []string{e.redis.Addr}
	}
	e.keys = rkeys.Of(e.rdb)
	c, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(t).Named(t.Name()))
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	e.gomsg = c
	e.cfg = cfg
	if c.Boat != nil {
		e.boatAddr = c.Boat.ClientAddr()
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	conn, err := grpcx.Dial(c.Station.PushAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.push = pushpb.NewPushClient(auth.WithBearer(conn, apiKey))
	if c.Boat != nil {
		e.waitBoat("boat-1")
	}
	return e
}

// waitBoat waits until a boat is registered in etcd (and so usable).
func (e *env) waitBoat(id string) {
	e.t.Helper()
	cli := testutil.EtcdClient(e.t, e.etcd)
	testutil.WaitFor(e.t, 15*time.Second, func() error {
		resp, err := cli.Get(context.Background(), "/gomsg/boats/"+id)
		if err != nil || len(resp.Kvs) == 0 {
			return fmt.Errorf("boat %s not registered yet: %v", id, err)
		}
		return nil
	})
}

// device is a connected client that records everything it receives.
type device struct {
	*client.Device
	autoAck bool

	mu       sync.Mutex
	msgs     []*msgpb.Message
	batches  []int // sizes of the Messages payloads, in order
	kickout  *msgpb.Kickout
	ready    bool
	ended    bool
	afterEnd []string
	// answers are the DeviceRegistered payloads, in order.
	answers []*msgpb.DeviceRegistered
	// roomAnswers are the RoomAnswer payloads, in order; roomMsgs the
	// broadcast messages by room ("" for broadcasts to everyone), in order.
	roomAnswers []*msgpb.RoomAnswer
	roomMsgs    map[string][]*msgpb.Message
	// pulls are the PullResult payloads, in order.
	pulls []*msgpb.PullResult
}

// connect opens a session for uid on platform and waits until it is ready
// (its offline replay is done, so live messages reach it).
func (e *env) connect(uid, platform string, autoAck bool) *device {
	e.t.Helper()
	d := e.dial(uid, platform, autoAck)
	d.waitReady(e.t)
	return d
}

// waitReady waits for the Ready payload.
func (d *device) waitReady(t *testing.T) {
	t.Helper()
	testutil.WaitFor(t, 15*time.Second, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if !d.ready {
			return fmt.Errorf("%s/%s not ready", d.UID, d.Platform)
		}
		return nil
	})
}

// dial opens a session without waiting for its offline replay.
func (e *env) dial(uid, platform string, autoAck bool) *device {
	e.t.Helper()
	d, err := e.tryDial(uid, platform, autoAck)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// tryDial is dial for use from other goroutines than the test's.
func (e *env) tryDial(uid, platform string, autoAck bool) (*device, error) {
	return e.tryDialAt(e.boatAddr, uid, platform, autoAck)
}

// tryDialAt is tryDial to the boat at addr, with a token that allows rooms.
func (e *env) tryDialAt(addr, uid, platform string, autoAck bool, rooms ...string) (*device, error) {
	token, err := auth.Mint(secret, uid, platform, time.Hour, rooms...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := client.Connect(ctx, addr, token, e.deviceDial...)
	if err != nil {
		return nil, fmt.Errorf("connect %s/%s: %w", uid, platform, err)
	}
	d := &device{Device: dc, autoAck: autoAck}
	e.t.Cleanup(dc.Close)
	go d.read()
	return d, nil
}

func (d *device) read() {
	for {
		p, err := d.Recv()
		d.mu.Lock()
		if err != nil {
			d.ended = true
			d.mu.Unlock()
			return
		}
		if d.ended || d.kickout != nil {
			d.afterEnd = append(d.afterEnd, fmt.Sprintf("%T", p.GetBody()))
		}
		switch b := p.GetBody().(type) {
		case *msgpb.ServerPayload_Ready:
			d.ready = true
		case *msgpb.ServerPayload_Kickout:
			d.kickout = b.Kickout
		case *msgpb.ServerPayload_DeviceRegistered:
			d.answers = append(d.answers, b.DeviceRegistered)
		case *msgpb.ServerPayload_RoomAnswer:
			d.roomAnswers = append(d.roomAnswers, b.RoomAnswer)
		case *msgpb.ServerPayload_PullResult:
			d.pulls = append(d.pulls, b.PullResult)
		case *msgpb.ServerPayload_RoomMessages:
			if d.roomMsgs == nil {
				d.roomMsgs = map[string][]*msgpb.Message{}
			}
			r := b.RoomMessages.GetRoom()
			d.roomMsgs[r] = append(d.roomMsgs[r], b.RoomMessages.GetMsgs()...)
		case *msgpb.ServerPayload_Messages:
			d.msgs = append(d.msgs, b.Messages.GetMsgs()...)
			d.batches = append(d.batches, len(b.Messages.GetMsgs()))
			if d.autoAck {
				var seqs []int64
				for _, m := range b.Messages.GetMsgs() {
					seqs = append(seqs, m.GetSeq())
				}
				_ = d.Ack(seqs...)
			}
		}
		d.mu.Unlock()
	}
}

func (d *device) received() []*msgpb.Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*msgpb.Message(nil), d.msgs...)
}

// waitCount waits until the device holds n messages.
func (d *device) waitCount(t *testing.T, n int) []*msgpb.Message {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if got := len(d.received()); got < n {
			return fmt.Errorf("%s/%s has %d messages, want %d", d.UID, d.Platform, got, n)
		}
		return nil
	})
	return d.received()
}

func text(s string) *anypb.Any {
	a, _ := anypb.New(wrapperspb.String(s))
	return a
}

func bodyText(t *testing.T, m *msgpb.Message) string {
	t.Helper()
	var s wrapperspb.StringValue
	if err := m.GetBody().UnmarshalTo(&s); err != nil {
		t.Fatalf("body of %d: %v", m.GetSeq(), err)
	}
	return s.GetValue()
}

// pushText pushes one text message and returns its seq.
func (e *env) pushText(req *pushpb.PushRequest, s string) int64 {
	e.t.Helper()
	req.MsgBodies = []*anypb.Any{text(s)}
	resp, err := e.push.Push(context.Background(), req)
	if err != nil {
		e.t.Fatalf("push %q: %v", s, err)
	}
	if len(resp.GetSeqs()) != 1 {
		e.t.Fatalf("push returned %d seqs, want 1", len(resp.GetSeqs()))
	}
	return resp.GetSeqs()[0]
}

// topicRecords counts the records on the task topic (sum of end offsets).
func (e *env) topicRecords() int64 {
	e.t.Helper()
	return e.topicRecordsOf(taskTopic)
}

// topicRecordsOf counts the records on topic (sum of end offsets).
func (e *env) topicRecordsOf(topic string) int64 {
	e.t.Helper()
	if e.nats != nil {
		return int64(len(e.natsRecords(topic)))
	}
	conn, err := kafka.Dial("tcp", e.kafka)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		e.t.Fatal(err)
	}
	var total int64
	for _, p := range parts {
		pc, err := kafka.DialLeader(context.Background(), "tcp", e.kafka, topic, p.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		last, err := pc.ReadLastOffset()
		_ = pc.Close()
		if err != nil {
			e.t.Fatal(err)
		}
		total += last
	}
	return total
}
