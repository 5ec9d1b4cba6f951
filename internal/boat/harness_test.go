package boat

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/boatclient"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/presencepb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// station is a gRPC stand-in for station: a token "<uid>/<platform>"
// (or "<uid>/<platform>#<room patterns, comma-separated>")
// connects (uid "held" is answered once connectGate closes, uid "slow" only when the call's deadline passes, uid
// "limited" is refused as station refuses one its --auth-timeout cut short),
// every disconnect report is recorded, and down answers every call
// Unavailable.
type station struct {
	stationpb.UnimplementedStationServer
	addr string
	down atomic.Bool
	// connects counts the Connect calls received.
	connects atomic.Int32
	// removed is what ResetBoat answers.
	removed atomic.Int32

	mu          sync.Mutex
	disconnects map[string]int               // sid → times reported
	reasons     map[string]presencepb.Reason // sid → reason last reported
	calls       int                          // Disconnect calls answered
	entered     int                          // Disconnect calls received
	gate        chan struct{}                // when set, Disconnect waits for it to close
	resumes     [][]string                   // sids of each Resume call
	resets      []*stationpb.ResetBoatRequest
	sessions    []*stationpb.SessionRef
	connectGate chan struct{}   // uid "held" is answered once it closes
	heldSids    []string        // sids of the "held" connects received
	pullModes   map[string]bool // sid → ConnectRequest.pull_offline
	// pullFn answers PullOffline (nil: Unimplemented); pullReqs are the
	// requests received.
	pullFn   func(context.Context, *stationpb.PullOfflineRequest) (*stationpb.PullOfflineResponse, error)
	pullReqs []*stationpb.PullOfflineRequest
}

func startStation(t testing.TB) *station {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	st := &station{addr: ln.Addr().String(), disconnects: make(map[string]int), reasons: make(map[string]presencepb.Reason)}
	srv := grpc.NewServer()
	stationpb.RegisterStationServer(srv, st)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return st
}

var errStationDown = status.Error(codes.Unavailable, "station stand-in is down")

func (st *station) client(t testing.TB) stationpb.StationClient {
	t.Helper()
	cc, err := grpcx.Dial(st.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return stationpb.NewStationClient(cc)
}

func (st *station) Connect(ctx context.Context, r *stationpb.ConnectRequest) (*stationpb.ConnectResponse, error) {
	st.connects.Add(1)
	if st.down.Load() {
		return nil, errStationDown
	}
	uid, platform, ok := strings.Cut(r.GetToken(), "/")
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "bad token")
	}
	// "<uid>/<platform>#<room patterns, comma-separated>"
	var rooms []string
	if p, list, ok := strings.Cut(platform, "#"); ok {
		platform, rooms = p, strings.Split(list, ",")
	}
	st.mu.Lock()
	if st.pullModes == nil {
		st.pullModes = map[string]bool{}
	}
	st.pullModes[r.GetSid()] = r.GetPullOffline()
	st.mu.Unlock()
	switch uid {
	case "slow":
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	case "held":
		st.mu.Lock()
		st.heldSids = append(st.heldSids, r.GetSid())
		gate := st.connectGate
		st.mu.Unlock()
		<-gate
	case "limited":
		return nil, grpcerr.Status(&grpcerr.Error{Code: codes.DeadlineExceeded, Detail: errorpb.Code_LIMIT_EXCEEDED,
			Field: "--auth-timeout", Msg: "authentication did not answer in time"})
	}
	return &stationpb.ConnectResponse{Uid: uid, Platform: platform, Rooms: rooms}, nil
}

func (st *station) Disconnect(_ context.Context, r *stationpb.DisconnectRequest) (*stationpb.DisconnectResponse, error) {
	st.mu.Lock()
	st.entered++
	gate := st.gate
	st.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if st.down.Load() {
		return nil, errStationDown
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.calls++
	for _, s := range r.GetSessions() {
		st.disconnects[s.GetSid()]++
		st.reasons[s.GetSid()] = s.GetReason()
	}
	return &stationpb.DisconnectResponse{}, nil
}

func (st *station) reported() map[string]int {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make(map[string]int, len(st.disconnects))
	for k, v := range st.disconnects {
		out[k] = v
	}
	return out
}

// reason is why sid was last reported ended.
func (st *station) reason(sid string) presencepb.Reason {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.reasons[sid]
}

func (st *station) ResetBoat(_ context.Context, r *stationpb.ResetBoatRequest) (*stationpb.ResetBoatResponse, error) {
	if st.down.Load() {
		return nil, errStationDown
	}
	st.mu.Lock()
	st.resets = append(st.resets, r)
	st.mu.Unlock()
	return &stationpb.ResetBoatResponse{Removed: st.removed.Load()}, nil
}

func (st *station) Resume(_ context.Context, r *stationpb.ResumeRequest) (*stationpb.ResumeResponse, error) {
	if st.down.Load() {
		return nil, errStationDown
	}
	var sids []string
	for _, s := range r.GetSessions() {
		sids = append(sids, s.GetSid())
	}
	st.mu.Lock()
	st.resumes = append(st.resumes, sids)
	st.mu.Unlock()
	return &stationpb.ResumeResponse{}, nil
}

func (st *station) resumed() [][]string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return append([][]string(nil), st.resumes...)
}

// BoatSessions pages through the sessions set by setSessions, two a page.
func (st *station) BoatSessions(_ context.Context, r *stationpb.BoatSessionsRequest) (*stationpb.BoatSessionsResponse, error) {
	if st.down.Load() {
		return nil, errStationDown
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	from := min(int(r.GetCursor()), len(st.sessions))
	to := min(from+2, len(st.sessions))
	var next uint64
	if to < len(st.sessions) {
		next = uint64(to)
	}
	return &stationpb.BoatSessionsResponse{Sessions: st.sessions[from:to], Cursor: next}, nil
}

func (st *station) PullOffline(ctx context.Context, r *stationpb.PullOfflineRequest) (*stationpb.PullOfflineResponse, error) {
	st.mu.Lock()
	st.pullReqs = append(st.pullReqs, r)
	fn := st.pullFn
	st.mu.Unlock()
	if fn == nil {
		return nil, status.Error(codes.Unimplemented, "no PullOffline in this test")
	}
	return fn(ctx, r)
}

func (st *station) setSessions(refs ...*stationpb.SessionRef) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sessions = refs
}

// testBoat is a boat serving on 127.0.0.1:0 against an embedded etcd and the
// station stand-in.
type testBoat struct {
	*Boat
	station  *station
	internal boatpb.BoatClient // carrier's client: PushMessages on the Deliver stream
	unary    boatpb.BoatClient // plain unary calls
	healthc  healthpb.HealthClient
	done     chan error
	cancel   context.CancelFunc
}

// startBoat runs a boat; etcd is an etcd client (nil: a fresh embedded
// etcd); edit adjusts the config.
func startBoat(t *testing.T, etcd *clientv3.Client, edit func(*Config)) *testBoat {
	t.Helper()
	return startBoatWith(t, boatOpts{etcd: etcd, edit: edit})
}

// boatOpts are startBoatWith's: etcd and edit as startBoat's; log, when
// set, also gets the boat's logs; st, when set, is the station stand-in.
type boatOpts struct {
	etcd *clientv3.Client
	edit func(*Config)
	log  zapcore.Core
	// quiet drops the test log (benchmarks).
	quiet bool
	st    *station
	// hold, when set, runs in Loop between the lapsed check and holding
	// the new session; stream gets that session's stream context there.
	hold   func(*Boat)
	stream func(context.Context)
	// connected, when set, runs once a session's Connected payload is
	// queued.
	connected func(sid string)
	// wrapStation, when set, wraps the boat's client of the station
	// stand-in.
	wrapStation func(stationpb.StationClient) stationpb.StationClient
}

func startBoatWith(t testing.TB, o boatOpts) *testBoat {
	t.Helper()
	etcd := o.etcd
	if etcd == nil {
		etcd = testutil.EtcdClient(t, testutil.StartEtcd(t))
	}
	st := o.st
	if st == nil {
		st = startStation(t)
	}
	cfg := Config{ID: "b1", ClientAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0", EtcdPrefix: "/t",
		ShutdownGrace: 2 * time.Second}
	if o.edit != nil {
		o.edit(&cfg)
	}
	log := zaptest.NewLogger(t)
	if o.quiet {
		log = zap.NewNop()
	}
	if o.log != nil {
		log = zap.New(zapcore.NewTee(log.Core(), o.log))
	}
	sc := st.client(t)
	if o.wrapStation != nil {
		sc = o.wrapStation(sc)
	}
	b, err := New(cfg, log, metrics.New(), etcd, sc)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Listen(); err != nil {
		t.Fatal(err)
	}
	if o.hold != nil || o.stream != nil {
		b.holdHook = func(ctx context.Context) {
			if o.hold != nil {
				o.hold(b)
			}
			if o.stream != nil {
				o.stream(ctx)
			}
		}
	}
	if o.connected != nil {
		b.connectedHook = o.connected
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb := &testBoat{Boat: b, station: st, done: make(chan error, 1), cancel: cancel}
	go func() { tb.done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-tb.done:
		case <-time.After(30 * time.Second):
			t.Error("boat did not stop within 30s")
		}
	})
	cc, err := grpcx.Dial(b.InternalAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	tb.internal = boatclient.New(cc)
	tb.unary = boatpb.NewBoatClient(cc)
	hc, err := grpcx.Dial(b.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hc.Close() })
	tb.healthc = healthpb.NewHealthClient(hc)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if st := tb.health(); st != healthpb.HealthCheckResponse_SERVING {
			return testutil.Errorf("boat is %s", st)
		}
		return nil
	})
	return tb
}

// client is the internal API client of a transport: "unary" or "stream".
func (tb *testBoat) client(transport string) boatpb.BoatClient {
	if transport == "unary" {
		return tb.unary
	}
	return tb.internal
}

// health is the client listener's overall health status.
func (tb *testBoat) health() healthpb.HealthCheckResponse_ServingStatus {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := tb.healthc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return resp.GetStatus()
}

// client is one device session over its own connection.
type client struct {
	stream msgpb.Msg_LoopClient
	cancel context.CancelFunc
	sid    string
}

// connect opens a session for uid on platform "ios" and reads its
// Connected payload; opts may shrink the connection's flow-control window.
func (tb *testBoat) connect(t *testing.T, uid string, opts ...grpc.DialOption) *client {
	t.Helper()
	return connectTo(t, tb.ClientAddr(), uid, opts...)
}

func connectTo(t *testing.T, addr, uid string, opts ...grpc.DialOption) *client {
	t.Helper()
	c, err := open(t, addr, uid, opts...)
	if err != nil {
		t.Fatalf("connect %s: %v", uid, err)
	}
	return c
}

func open(t *testing.T, addr, uid string, opts ...grpc.DialOption) (*client, error) {
	t.Helper()
	return openToken(t, addr, uid+"/ios", opts...)
}

// openToken opens a session with the token (see station).
func openToken(t testing.TB, addr, token string, opts ...grpc.DialOption) (*client, error) {
	t.Helper()
	cc, err := grpcx.Dial(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token))
	t.Cleanup(cancel)
	stream, err := msgpb.NewMsgClient(cc).Loop(ctx)
	if err != nil {
		return nil, err
	}
	p, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if p.GetConnected() == nil {
		t.Fatalf("first payload %v, want Connected", p)
	}
	return &client{stream: stream, cancel: cancel, sid: p.GetConnected().GetSid()}, nil
}

// push delivers msgs (no ACK asked) to sid as a replay, as carrier would.
func (tb *testBoat) push(ctx context.Context, sid string, msgs ...*msgpb.Message) error {
	_, err := tb.internal.PushMessages(ctx, &boatpb.PushMessagesRequest{Sid: sid, Msgs: msgs, Replay: true})
	return err
}

// recvUntil reads payloads until one satisfies want; after 15s it ends the
// stream and fails.
func (c *client) recvUntil(t *testing.T, want func(*msgpb.ServerPayload) bool) *msgpb.ServerPayload {
	t.Helper()
	timer := time.AfterFunc(15*time.Second, c.cancel)
	defer timer.Stop()
	for {
		p, err := c.stream.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if want(p) {
			return p
		}
	}
}

// isNotHeld is carrier's test of a "session not held" answer
// (internal/carrier/deliver.go).
func isNotHeld(err error) bool {
	return status.Code(err) == codes.NotFound && grpcerr.DetailCode(err) == errorpb.Code_SESSION_NOT_FOUND
}
