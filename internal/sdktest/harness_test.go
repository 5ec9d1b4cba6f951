package sdktest_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/client"
	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/carrier"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const (
	secret        = "client-test-secret-at-least-32-bytes-long"
	apiKey        = "client-test-api-key"
	internalToken = "client-internal-token-0123456789"
	taskTopic     = "gomsg.tasks"
	ackOffline    = uint32(msgpb.Option_NEED_ACK | msgpb.Option_NEED_OFFLINE)
)

// cluster is station and carrier on a real redis-server, an embedded etcd
// and the in-process Kafka broker, plus one boat of its own that a test may
// replace.
type cluster struct {
	t    *testing.T
	cfg  app.ClusterConfig
	main *app.Cluster
	boat *app.Cluster
	// addr is where devices connect; a replacing boat listens there too.
	addr string
	push pushpb.PushClient
	rdb  redis.UniversalClient
}

func startCluster(t *testing.T, change ...func(*app.ClusterConfig)) *cluster {
	t.Helper()
	plat := platform.MustParse("ios,android,web")
	r := testutil.StartRedis(t)
	cfg := app.ClusterConfig{
		Services: []string{"station", "carrier"},
		Backends: app.Backends{KafkaBrokers: []string{testutil.StartKafkaBroker(t, 2, taskTopic).Addr},
			EtcdEndpoints: []string{testutil.StartEtcd(t)}, RedisAddrs: []string{r.Addr},
			TaskTopic: taskTopic, TaskPartitions: 2, CreateTopics: true},
		Internal: app.InternalAuth{Token: internalToken},
		Station: app.StationOptions{JWTSecret: secret, APIKeys: apikey.Line(apiKey, []apikey.Scope{apikey.All}, "client"),
			Station: station.Config{PushGRPCAddr: "127.0.0.1:0", PushHTTPAddr: "127.0.0.1:0",
				InternalAddr: "127.0.0.1:0", Platforms: plat, BroadcastRate: 1e6}},
		Boat: boat.Config{ID: "boat-a", ClientAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0",
			ConnectRate: 1e6, ConnectRatePerIP: 1e6, MaxConnectionsPerIP: 1 << 20},
		Carrier: carrier.Config{Platforms: plat, AckWait: 5 * time.Second, Workers: 8},
	}
	for _, f := range change {
		f(&cfg)
	}
	main, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(t).Named("main"))
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() { _ = main.Stop() })
	cfg.StationAddr = main.Station.InternalAddr()
	c := &cluster{t: t, cfg: cfg, main: main, rdb: r.Client(t)}
	conn, err := grpcx.Dial(main.Station.PushAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c.push = pushpb.NewPushClient(auth.WithBearer(conn, apiKey))
	c.startBoat("boat-a")
	return c
}

// startBoat starts a boat with id on c.addr (a free port the first time).
func (c *cluster) startBoat(id string) {
	c.t.Helper()
	cfg := c.cfg
	cfg.Services = []string{"boat"}
	cfg.OpsAddr = ""
	cfg.Boat.ID = id
	if c.addr != "" {
		cfg.Boat.ClientAddr = c.addr
	}
	b, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(c.t).Named(id))
	if err != nil {
		c.t.Fatalf("start %s: %v", id, err)
	}
	c.t.Cleanup(func() { _ = b.Stop() })
	c.boat, c.addr = b, b.Boat.ClientAddr()
	// Carrier reaches the boat once it is registered in etcd.
	cli := testutil.EtcdClient(c.t, c.cfg.Backends.EtcdEndpoints[0])
	testutil.WaitFor(c.t, 10*time.Second, func() error {
		resp, err := cli.Get(context.Background(), "/gomsg/boats/"+id)
		if err != nil || len(resp.Kvs) == 0 {
			return fmt.Errorf("boat %s not registered yet: %v", id, err)
		}
		return nil
	})
}

// stopBoat drains the boat: its sessions are kicked with SERVER_DRAINING.
func (c *cluster) stopBoat() {
	c.t.Helper()
	if err := c.boat.Stop(); err != nil {
		c.t.Fatalf("stop boat: %v", err)
	}
}

// stored is how many messages uid's platform holds in the offline store.
func (c *cluster) stored(uid, platform string) int64 {
	c.t.Helper()
	n, err := c.rdb.ZCard(context.Background(), rkeys.Of(c.rdb).Offline(uid, platform)).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// storeOffline pushes n NEED_OFFLINE messages to uid's platform, which has
// no session, waits until all are stored and returns their seqs.
func (c *cluster) storeOffline(uid, platform string, n int) []int64 {
	c.t.Helper()
	var seqs []int64
	for i := range n {
		seqs = append(seqs, c.mustPush(uid, platform, fmt.Sprint("old-", i), uint32(msgpb.Option_NEED_OFFLINE)))
	}
	testutil.WaitFor(c.t, 20*time.Second, func() error {
		if got := c.stored(uid, platform); got != int64(n) {
			return fmt.Errorf("%d stored, want %d", got, n)
		}
		return nil
	})
	return seqs
}

func (c *cluster) token(uid, platform string, rooms ...string) string {
	c.t.Helper()
	tok, err := auth.Mint(secret, uid, platform, time.Hour, rooms...)
	if err != nil {
		c.t.Fatal(err)
	}
	return tok
}

// pushText pushes text to uid's platform with opts and returns the seq.
func (c *cluster) pushText(uid, platform, text string, opts uint32) (int64, error) {
	body, _ := anypb.New(wrapperspb.String(text))
	resp, err := c.push.Push(context.Background(), &pushpb.PushRequest{Uids: []string{uid},
		MsgBodies: []*anypb.Any{body}, MsgOptions: opts,
		PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{platform}}})
	if err != nil {
		return 0, err
	}
	return resp.GetSeqs()[0], nil
}

func (c *cluster) mustPush(uid, platform, text string, opts uint32) int64 {
	c.t.Helper()
	seq, err := c.pushText(uid, platform, text, opts)
	if err != nil {
		c.t.Fatalf("push %q: %v", text, err)
	}
	return seq
}

// recorder records what a client's handlers hear.
type recorder struct {
	mu      sync.Mutex
	seqs    []int64 // handled, in order
	states  []stamped
	room    map[string][]string
	tokens  int
	handler func(ctx context.Context, m *msgpb.Message) error
}

type stamped struct {
	client.StateChange
	at time.Time
}

func (r *recorder) handle(ctx context.Context, m *msgpb.Message) error {
	if r.handler != nil {
		if err := r.handler(ctx, m); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.seqs = append(r.seqs, m.GetSeq())
	r.mu.Unlock()
	return nil
}

func (r *recorder) state(sc client.StateChange) {
	r.mu.Lock()
	r.states = append(r.states, stamped{sc, time.Now()})
	r.mu.Unlock()
}

func (r *recorder) roomMsg(_ context.Context, room string, m *msgpb.Message) {
	var s wrapperspb.StringValue
	_ = m.GetBody().UnmarshalTo(&s)
	r.mu.Lock()
	if r.room == nil {
		r.room = map[string][]string{}
	}
	r.room[room] = append(r.room[room], s.GetValue())
	r.mu.Unlock()
}

func (r *recorder) handled() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs)
}

func (r *recorder) changes() []stamped {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.states)
}

// count is how many changes to state were heard.
func (r *recorder) count(state client.State) int {
	n := 0
	for _, s := range r.changes() {
		if s.State == state {
			n++
		}
	}
	return n
}

// waitState waits until state was heard n times.
func (r *recorder) waitState(t *testing.T, state client.State, n int) {
	t.Helper()
	testutil.WaitFor(t, 15*time.Second, func() error {
		if got := r.count(state); got < n {
			return fmt.Errorf("%d %s, want %d (changes %v)", got, state, n, r.changes())
		}
		return nil
	})
}

// runner is a client running in a goroutine of its own.
type runner struct {
	*client.Client
	done chan struct{}
	err  error // Run's result, once done is closed
}

// run starts a client with r's handlers and the options. The client is
// closed, and Run awaited, with the test.
func (c *cluster) run(r *recorder, tokens client.TokenSource, opts ...client.Option) *runner {
	c.t.Helper()
	all := append([]client.Option{client.WithInsecure(), client.WithHandler(r.handle),
		client.WithStateHandler(r.state), client.WithRoomHandler(r.roomMsg),
		client.WithBackoff(50*time.Millisecond, 500*time.Millisecond)}, opts...)
	counted := func(ctx context.Context) (string, error) {
		r.mu.Lock()
		r.tokens++
		r.mu.Unlock()
		return tokens(ctx)
	}
	cl, err := client.New(c.addr, counted, all...)
	if err != nil {
		c.t.Fatal(err)
	}
	rn := &runner{Client: cl, done: make(chan struct{})}
	go func() {
		defer close(rn.done)
		rn.err = cl.Run(context.Background())
	}()
	c.t.Cleanup(func() {
		_ = cl.Close()
		select {
		case <-rn.done:
		case <-time.After(10 * time.Second):
			c.t.Error("Run did not return within 10s of Close")
		}
	})
	return rn
}

// wait waits for Run to return and gives its error.
func (rn *runner) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-rn.done:
		return rn.err
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// tokenCalls is how often the TokenSource was called.
func (r *recorder) tokenCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tokens
}

func textBody(s string) []*anypb.Any {
	a, _ := anypb.New(wrapperspb.String(s))
	return []*anypb.Any{a}
}
