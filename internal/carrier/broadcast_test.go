package carrier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// bcastBoat is a small real gRPC Boat server implementing Broadcast: it
// answers each call as answer says (nil: queued) and records the requests
// it took, in the order it took them.
type bcastBoat struct {
	boatpb.UnimplementedBoatServer
	addr string

	mu sync.Mutex
	// answer gets the boat's call number (1-based); nil answers OK.
	answer func(ctx context.Context, n int, req *boatpb.BroadcastRequest) error
	calls  int
	took   []*boatpb.BroadcastRequest
}

func (b *bcastBoat) Broadcast(ctx context.Context, req *boatpb.BroadcastRequest) (*boatpb.BroadcastResponse, error) {
	b.mu.Lock()
	b.calls++
	n, answer := b.calls, b.answer
	b.mu.Unlock()
	if answer != nil {
		if err := answer(ctx, n, req); err != nil {
			return nil, err
		}
	}
	b.mu.Lock()
	b.took = append(b.took, req)
	b.mu.Unlock()
	return &boatpb.BroadcastResponse{Members: 1}, nil
}

func (b *bcastBoat) setAnswer(f func(ctx context.Context, n int, req *boatpb.BroadcastRequest) error) {
	b.mu.Lock()
	b.answer = f
	b.mu.Unlock()
}

// seqs returns, per request taken for room, its first message's seq.
func (b *bcastBoat) seqs(room string) []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int64
	for _, r := range b.took {
		if r.GetRoom() == room {
			out = append(out, r.GetMsgs()[0].GetSeq())
		}
	}
	return out
}

func (b *bcastBoat) taken() []*boatpb.BroadcastRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.took)
}

func (b *bcastBoat) callCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

// bcastHarness is a running carrier on the in-process Kafka broker, finding
// its boats through an embedded etcd (discovery.Boats, as in production),
// with test boats registered there.
type bcastHarness struct {
	t      *testing.T
	c      *Carrier
	m      *metrics.Metrics
	logs   *observer.ObservedLogs
	prod   *queue.Producer
	etcd   *clientv3.Client
	dir    *discovery.Boats
	boats  map[string]*bcastBoat
	prefix string
}

func newBcastHarness(t *testing.T, mod func(*Config), boatIDs ...string) *bcastHarness {
	t.Helper()
	brokers := []string{testutil.StartKafka(t, 1, taskTopic, retryTopic, dlqTopic, notifTopic, bcastTopic)}
	prod := queue.NewProducer(queue.ProducerConfig{Brokers: brokers}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = prod.Close() })
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	h := &bcastHarness{t: t, m: metrics.New(), prod: prod, etcd: cli, boats: map[string]*bcastBoat{}, prefix: "/t"}
	h.dir = discovery.NewBoats(cli, zaptest.NewLogger(t), h.prefix)
	dctx, dstop := context.WithCancel(context.Background())
	ddone := make(chan error, 1)
	go func() { ddone <- h.dir.Run(dctx) }()
	t.Cleanup(func() { dstop(); <-ddone })
	for _, id := range boatIDs {
		h.addBoat(id)
	}

	obs, logs := observer.New(zapcore.DebugLevel)
	h.logs = logs
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), obs))
	cfg := Config{Brokers: brokers, TaskTopic: taskTopic, RetryTopic: retryTopic, DeadLetterTopic: dlqTopic,
		NotifyTopic: notifTopic, BroadcastTopic: bcastTopic, GroupID: "t-carrier", Workers: 2,
		BroadcastWorkers: 8, BroadcastAttempts: 3, CallTimeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg, log, h.m, nil, nil, h.dir, prod)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

// addBoat serves a test boat, registers it in etcd and waits until the
// carrier's directory lists it.
func (h *bcastHarness) addBoat(id string) *bcastBoat {
	h.t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	b := &bcastBoat{addr: l.Addr().String()}
	srv := grpc.NewServer()
	boatpb.RegisterBoatServer(srv, b)
	go func() { _ = srv.Serve(l) }()
	h.t.Cleanup(srv.Stop)
	h.boats[id] = b
	if _, err := h.etcd.Put(h.t.Context(), discovery.BoatKey(h.prefix, id), b.addr); err != nil {
		h.t.Fatal(err)
	}
	h.waitListed(id, true)
	return b
}

// deregister removes a boat from etcd, as its lease ending does.
func (h *bcastHarness) deregister(id string) {
	h.t.Helper()
	if _, err := h.etcd.Delete(context.Background(), discovery.BoatKey(h.prefix, id)); err != nil {
		h.t.Error(err)
	}
}

func (h *bcastHarness) waitListed(id string, listed bool) {
	h.t.Helper()
	testutil.WaitFor(h.t, 10*time.Second, func() error {
		if slices.Contains(h.dir.IDs(), id) != listed {
			return testutil.Errorf("boat %s listed: %v, want %v", id, !listed, listed)
		}
		return nil
	})
}

// publish writes broadcast records keyed by key, in order.
func (h *bcastHarness) publish(key string, values ...[]byte) {
	h.t.Helper()
	recs := make([]queue.Record, len(values))
	for i, v := range values {
		recs[i] = queue.Record{Topic: bcastTopic, Key: key, Value: v}
	}
	if err := h.prod.Publish(h.t.Context(), recs...); err != nil {
		h.t.Fatal(err)
	}
}

// waitTaken waits until every boat named took n requests for room.
func (h *bcastHarness) waitTaken(room string, n int, ids ...string) {
	h.t.Helper()
	testutil.WaitFor(h.t, 20*time.Second, func() error {
		for _, id := range ids {
			if got := h.boats[id].seqs(room); len(got) < n {
				return testutil.Errorf("boat %s took %v of room %s, want %d", id, got, room, n)
			}
		}
		return nil
	})
}

func (h *bcastHarness) boatsCounted(result string) int {
	return int(promtest.ToFloat64(h.m.BroadcastBoats.WithLabelValues(result)))
}

// waitTasks waits until n broadcast tasks were processed with result.
func (h *bcastHarness) waitTasks(result string, n int) {
	h.t.Helper()
	testutil.WaitFor(h.t, 20*time.Second, func() error {
		if got := h.tasks(result); got != n {
			return testutil.Errorf("broadcast tasks %s %d, want %d", result, got, n)
		}
		return nil
	})
}

func (h *bcastHarness) tasks(result string) int {
	return int(promtest.ToFloat64(h.m.TasksProcessed.WithLabelValues("broadcast", result)))
}

func bcast(room string, all bool, platforms []string, msgs ...*msgpb.Message) []byte {
	v, err := proto.Marshal(&mqpb.Payload{Seq: msgs[0].GetSeq(), Timestamp: time.Now().UnixMilli(),
		Body: &mqpb.Payload_Broadcast{Broadcast: &mqpb.Broadcast{Room: room, All: all, Platforms: platforms, Msgs: msgs}}})
	if err != nil {
		panic(err)
	}
	return v
}

func roomMsg(room string, seq int64) []byte { return bcast(room, false, nil, msg(seq)) }

// A broadcast record reaches every registered boat once, with its room,
// platforms and messages; a broadcast to everyone too. The record after
// them shows nothing more came.
func TestBroadcastReachesEveryBoatOnce(t *testing.T) {
	t.Parallel()
	ids := []string{"b1", "b2", "b3"}
	h := newBcastHarness(t, nil, ids...)
	h.publish("r1", bcast("r1", false, nil, msg(1), msg(2)))
	h.publish("*", bcast("", true, []string{"ios"}, msg(3)))
	h.waitTaken("r1", 1, ids...)
	h.waitTaken("", 1, ids...)
	h.publish("r1", roomMsg("r1", 9))
	h.waitTaken("r1", 2, ids...)
	// A boat records a call before carrier counts its answer and the task:
	// wait for the tasks' count, which comes after their boats'.
	h.waitTasks("ok", 3)

	for _, id := range ids {
		var got []string
		for _, r := range h.boats[id].taken() {
			var seqs []int64
			for _, m := range r.GetMsgs() {
				seqs = append(seqs, m.GetSeq())
			}
			got = append(got, fmt.Sprintf("%s/%v/%v/%v/task %d", r.GetRoom(), r.GetAll(), r.GetPlatforms(), seqs, r.GetTaskSeq()))
		}
		slices.Sort(got)
		// The task seq is the record's payload seq (here its first message's):
		// boats drop a call whose task they took already.
		want := []string{"/true/[ios]/[3]/task 3", "r1/false/[]/[1 2]/task 1", "r1/false/[]/[9]/task 9"}
		if !slices.Equal(got, want) {
			t.Errorf("boat %s took %q, want %q", id, got, want)
		}
		if n := h.boats[id].callCount(); n != 3 {
			t.Errorf("boat %s called %d times, want 3", id, n)
		}
	}
	if ok, bad := h.boatsCounted("ok"), h.boatsCounted("error"); ok != 9 || bad != 0 {
		t.Errorf("broadcast boats ok %d error %d, want 9 and 0", ok, bad)
	}
}

// Many broadcasts of one room reach each boat in record order, although the
// boats answer after random delays and other rooms run beside them: a
// room's next broadcast waits until every boat took the one before.
func TestBroadcastsOfOneRoomKeepTheirOrderOnEachBoat(t *testing.T) {
	t.Parallel()
	ids := []string{"b1", "b2", "b3"}
	h := newBcastHarness(t, nil, ids...)
	for _, id := range ids {
		h.boats[id].setAnswer(func(ctx context.Context, _ int, _ *boatpb.BroadcastRequest) error {
			// A boat's latency varies from call to call.
			backoff.Sleep(ctx, time.Duration(rand.IntN(4000))*time.Microsecond)
			return nil
		})
	}
	const n = 40
	var r1, r2 [][]byte
	want := make([]int64, n)
	for i := range n {
		want[i] = int64(i + 1)
		r1 = append(r1, roomMsg("r1", int64(i+1)))
		r2 = append(r2, roomMsg("r2", int64(i+1)))
	}
	h.publish("r1", r1...)
	h.publish("r2", r2...)
	h.waitTaken("r1", n, ids...)
	h.waitTaken("r2", n, ids...)
	for _, id := range ids {
		for _, room := range []string{"r1", "r2"} {
			if got := h.boats[id].seqs(room); !slices.Equal(got, want) {
				t.Errorf("boat %s took room %s's broadcasts as %v, want %v", id, room, got, want)
			}
		}
	}
}

// A boat that fails twice then takes the broadcast gets it on the third
// call, once.
func TestBroadcastRetriesAFailingBoat(t *testing.T) {
	t.Parallel()
	h := newBcastHarness(t, nil, "b1", "b2")
	h.boats["b2"].setAnswer(func(_ context.Context, n int, _ *boatpb.BroadcastRequest) error {
		if n <= 2 {
			return status.Error(codes.Unavailable, "boat unavailable")
		}
		return nil
	})
	h.publish("r1", roomMsg("r1", 1))
	h.waitTaken("r1", 1, "b1", "b2")
	if n := h.boats["b2"].callCount(); n != 3 {
		t.Errorf("b2 called %d times, want 3 (two failures, then taken)", n)
	}
	if got := h.boats["b2"].seqs("r1"); !slices.Equal(got, []int64{1}) {
		t.Errorf("b2 took %v, want [1]", got)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if ok := h.tasks("ok"); ok != 1 {
			return testutil.Errorf("broadcast tasks ok %d, want 1", ok)
		}
		return nil
	})
	if ok, bad := h.boatsCounted("ok"), h.boatsCounted("error"); ok != 2 || bad != 0 {
		t.Errorf("broadcast boats ok %d error %d, want 2 and 0", ok, bad)
	}
}

// A boat that always fails is given up on after BroadcastAttempts calls, a
// boat that answers Unimplemented (no Broadcast) after one; the other boats
// get the broadcast, and the room's next broadcast is handled: the
// partition moves on. A boat given up on gets one call per broadcast, no
// retries, until it answers again; then it is retried as before.
func TestBroadcastGivesUpOnABoatThatKeepsFailing(t *testing.T) {
	t.Parallel()
	h := newBcastHarness(t, nil, "b1", "b2", "old")
	h.boats["b2"].setAnswer(func(context.Context, int, *boatpb.BroadcastRequest) error {
		return status.Error(codes.Unavailable, "boat unavailable")
	})
	h.boats["old"].setAnswer(func(context.Context, int, *boatpb.BroadcastRequest) error {
		return status.Error(codes.Unimplemented, "unknown method Broadcast")
	})
	h.publish("r1", roomMsg("r1", 1), roomMsg("r1", 2))
	h.waitTaken("r1", 2, "b1")
	h.waitTasks("partial", 2)
	if got := h.boats["b1"].seqs("r1"); !slices.Equal(got, []int64{1, 2}) {
		t.Errorf("b1 took %v, want [1 2]", got)
	}
	if n := h.boats["b2"].callCount(); n != 3+1 {
		t.Errorf("b2 called %d times, want 4 (3 tries, then 1 while given up on)", n)
	}
	if n := h.boats["old"].callCount(); n != 2 {
		t.Errorf("old called %d times, want 2 (1 per broadcast)", n)
	}
	if ok, bad := h.boatsCounted("ok"), h.boatsCounted("error"); ok != 2 || bad != 4 {
		t.Errorf("broadcast boats ok %d error %d, want 2 and 4", ok, bad)
	}
	if l := h.logs.FilterMessage("broadcast given up on a boat: its members miss it").Len(); l != 4 {
		t.Errorf("logged %d give-ups, want 4", l)
	}

	// b2 answers again, then fails once: it is retried, as a boat never
	// given up on is.
	h.boats["b2"].setAnswer(func(_ context.Context, n int, _ *boatpb.BroadcastRequest) error {
		if n == 6 {
			return status.Error(codes.Unavailable, "boat unavailable")
		}
		return nil
	})
	h.publish("r1", roomMsg("r1", 3), roomMsg("r1", 4))
	h.waitTaken("r1", 2, "b2")
	if n := h.boats["b2"].callCount(); n != 4+1+2 {
		t.Errorf("b2 called %d times, want 7 (then 1 for 3, 2 for 4)", n)
	}
	if got := h.boats["b2"].seqs("r1"); !slices.Equal(got, []int64{3, 4}) {
		t.Errorf("b2 took %v, want [3 4]", got)
	}
}

// A boat that gives no answer at all is bounded by the call timeout on each
// try and given up on after BroadcastAttempts of them (one on the next
// broadcast); the other boat gets both broadcasts and the partition moves
// on.
func TestBroadcastGivesUpOnABoatThatHangs(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	h := newBcastHarness(t, func(c *Config) { c.BroadcastAttempts, c.CallTimeout = 2, timeout }, "b1", "stuck")
	var mu sync.Mutex
	var left []time.Duration
	h.boats["stuck"].setAnswer(func(ctx context.Context, _ int, _ *boatpb.BroadcastRequest) error {
		d, ok := ctx.Deadline()
		mu.Lock()
		left = append(left, time.Until(d))
		mu.Unlock()
		if !ok {
			return status.Error(codes.Internal, "no deadline")
		}
		<-ctx.Done()
		return ctx.Err()
	})
	h.publish("r1", roomMsg("r1", 1), roomMsg("r1", 2))
	h.waitTaken("r1", 2, "b1")
	testutil.WaitFor(t, 10*time.Second, func() error {
		if p := h.tasks("partial"); p != 2 {
			return testutil.Errorf("broadcast tasks partial %d, want 2", p)
		}
		return nil
	})
	if n := h.boats["stuck"].callCount(); n != 2+1 {
		t.Errorf("stuck boat called %d times, want 3 (2 tries, then 1 while given up on)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range left {
		if d <= 0 || d > timeout {
			t.Errorf("stuck boat saw %s left before the deadline, want (0, %s]", d, timeout)
		}
	}
}

// The boats are called at once, not one after another: each boat holds its
// call until every boat is in one, which calls made in turn never reach
// (each would time out and fail).
func TestBroadcastCallsTheBoatsInParallel(t *testing.T) {
	t.Parallel()
	ids := []string{"b1", "b2", "b3", "b4"}
	h := newBcastHarness(t, func(c *Config) { c.BroadcastAttempts = 1 }, ids...)
	var mu sync.Mutex
	in := 0
	all := make(chan struct{})
	for _, id := range ids {
		h.boats[id].setAnswer(func(ctx context.Context, _ int, _ *boatpb.BroadcastRequest) error {
			mu.Lock()
			if in++; in == len(ids) {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}
	h.publish("r1", roomMsg("r1", 1))
	testutil.WaitFor(t, 20*time.Second, func() error {
		if n := h.tasks("ok") + h.tasks("partial"); n != 1 {
			return testutil.Errorf("broadcast tasks done %d, want 1", n)
		}
		return nil
	})
	for _, id := range ids {
		if got := h.boats[id].seqs("r1"); !slices.Equal(got, []int64{1}) {
			t.Errorf("boat %s took %v, want [1]", id, got)
		}
	}
	if ok := h.tasks("ok"); ok != 1 {
		t.Errorf("broadcast tasks ok %d, want 1", ok)
	}
}

// A boat deregistered before a broadcast is not called; one that leaves
// etcd while its call keeps failing is skipped, not given up on: its
// members are gone with it, nothing is counted as missed.
func TestBroadcastSkipsABoatGoneFromEtcd(t *testing.T) {
	t.Parallel()
	h := newBcastHarness(t, nil, "b1", "gone", "leaving")
	h.deregister("gone")
	h.waitListed("gone", false)
	h.boats["leaving"].setAnswer(func(context.Context, int, *boatpb.BroadcastRequest) error {
		h.deregister("leaving") // its lease ends as it fails
		return status.Error(codes.Unavailable, "boat shutting down")
	})
	h.publish("r1", roomMsg("r1", 1))
	h.waitTaken("r1", 1, "b1")
	testutil.WaitFor(t, 10*time.Second, func() error {
		if ok := h.tasks("ok"); ok != 1 {
			return testutil.Errorf("broadcast tasks ok %d (partial %d), want 1 ok", ok, h.tasks("partial"))
		}
		return nil
	})
	if n := h.boats["gone"].callCount(); n != 0 {
		t.Errorf("deregistered boat called %d times, want 0", n)
	}
	if n := h.boats["leaving"].callCount(); n != 1 {
		t.Errorf("leaving boat called %d times, want 1 (skipped once gone)", n)
	}
	if ok, bad := h.boatsCounted("ok"), h.boatsCounted("error"); ok != 1 || bad != 0 {
		t.Errorf("broadcast boats ok %d error %d, want 1 and 0", ok, bad)
	}
}

// Records that cannot be broadcast are dropped and logged, and the room's
// next broadcast is handled: an undecodable one, one of another kind, one
// without messages, one to no room.
func TestBroadcastDropsWhatItCannotSend(t *testing.T) {
	t.Parallel()
	h := newBcastHarness(t, nil, "b1", "b2")
	toUidV, err := proto.Marshal(toUid("u1", []string{"ios"}, msg(5)))
	if err != nil {
		t.Fatal(err)
	}
	noMsgs, err := proto.Marshal(&mqpb.Payload{Seq: 6, Body: &mqpb.Payload_Broadcast{Broadcast: &mqpb.Broadcast{Room: "r1"}}})
	if err != nil {
		t.Fatal(err)
	}
	h.publish("r1", []byte("\xff\xff not a payload"), toUidV, noMsgs, bcast("", false, nil, msg(7)), roomMsg("r1", 8))
	h.waitTaken("r1", 1, "b1", "b2")
	for _, id := range []string{"b1", "b2"} {
		if n := h.boats[id].callCount(); n != 1 {
			t.Errorf("boat %s called %d times, want 1 (only the good record)", id, n)
		}
		if got := h.boats[id].seqs("r1"); !slices.Equal(got, []int64{8}) {
			t.Errorf("boat %s took %v, want [8]", id, got)
		}
	}
	for _, m := range []string{"dropping undecodable broadcast task", "dropping task of another kind on the broadcast topic",
		"dropping broadcast task without messages", "dropping broadcast task to no room"} {
		if n := h.logs.FilterMessage(m).Len(); n != 1 {
			t.Errorf("logged %q %d times, want 1", m, n)
		}
	}
}

// The boats given up on are forgotten when they answer and when they are no
// longer registered, so that a boat id registered again is retried as a new
// boat and the set does not grow with boats long gone.
func TestFailingBoatsForgetsAnsweredAndUnregisteredBoats(t *testing.T) {
	t.Parallel()
	var f failingBoats
	f.set("a", true)
	f.set("b", true)
	f.set("c", true)
	f.keep([]string{"a", "c", "d"})
	f.set("c", false)
	for id, want := range map[string]bool{"a": true, "b": false, "c": false, "d": false} {
		if got := f.has(id); got != want {
			t.Errorf("has(%s) = %v, want %v", id, got, want)
		}
	}
}
