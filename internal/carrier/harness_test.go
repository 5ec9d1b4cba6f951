package carrier

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/boatclient"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// The answers a test boat gives, as boat itself codes them.
var (
	errUnavailable = status.Error(codes.Unavailable, "boat unavailable")
	errNotHeld     = grpcerr.Status(grpcerr.New(codes.NotFound, errorpb.Code_SESSION_NOT_FOUND, "session not held"))
	errAckTimeout  = grpcerr.Status(grpcerr.New(codes.DeadlineExceeded, errorpb.Code_ACK_TIMEOUT, "no ACK"))
	errNotReady    = grpcerr.Status(grpcerr.New(codes.FailedPrecondition, errorpb.Code_SESSION_NOT_READY, "not ready"))
)

// pushed is one PushMessages call a test boat accepted.
type pushed struct {
	sid    string
	seqs   []int64
	replay bool
}

// testBoat is boat's internal gRPC service served for real on a loopback
// port, answering as the test says: answer returns the error for a push (nil:
// the client got and ACKed every message), finish runs on FinishReplay.
type testBoat struct {
	boatpb.UnimplementedBoatServer
	mu       sync.Mutex
	answer   func(req *boatpb.PushMessagesRequest) error
	finish   func(sid string) error
	accepted []pushed
	refused  int
	finished []string
	// deadlines holds, per PushMessages call, the time left before the
	// caller's deadline as the boat saw it on receipt (0: no deadline).
	deadlines []time.Duration
}

func (b *testBoat) PushMessages(ctx context.Context, req *boatpb.PushMessagesRequest) (*boatpb.PushMessagesResponse, error) {
	var left time.Duration
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	b.mu.Lock()
	answer := b.answer
	b.deadlines = append(b.deadlines, left)
	b.mu.Unlock()
	if answer != nil {
		if err := answer(req); err != nil {
			b.mu.Lock()
			b.refused++
			b.mu.Unlock()
			return nil, err
		}
	}
	p := pushed{sid: req.GetSid(), replay: req.GetReplay()}
	var acked []int64
	for _, m := range req.GetMsgs() {
		p.seqs = append(p.seqs, m.GetSeq())
		if m.GetOptions()&uint32(msgpb.Option_NEED_ACK) != 0 {
			acked = append(acked, m.GetSeq())
		}
	}
	b.mu.Lock()
	b.accepted = append(b.accepted, p)
	b.mu.Unlock()
	return &boatpb.PushMessagesResponse{AckedSeqs: acked}, nil
}

func (b *testBoat) FinishReplay(_ context.Context, req *boatpb.FinishReplayRequest) (*boatpb.FinishReplayResponse, error) {
	b.mu.Lock()
	finish := b.finish
	b.mu.Unlock()
	if finish != nil {
		if err := finish(req.GetSid()); err != nil {
			return nil, err
		}
	}
	b.mu.Lock()
	b.finished = append(b.finished, req.GetSid())
	b.mu.Unlock()
	return &boatpb.FinishReplayResponse{}, nil
}

func (b *testBoat) setAnswer(f func(req *boatpb.PushMessagesRequest) error) {
	b.mu.Lock()
	b.answer = f
	b.mu.Unlock()
}

// got returns the seqs the boat accepted for sid, in the order it got them,
// and whether each came as a replay.
func (b *testBoat) got(sid string) (seqs []int64, replays []bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.accepted {
		if p.sid == sid {
			for _, s := range p.seqs {
				seqs = append(seqs, s)
				replays = append(replays, p.replay)
			}
		}
	}
	return seqs, replays
}

func (b *testBoat) finishedSids() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.finished)
}

// boatSet is carrier's view of registered boats: id → client.
type boatSet map[string]boatpb.BoatClient

func (s boatSet) Client(_ context.Context, id string) (boatpb.BoatClient, bool, error) {
	c, ok := s[id]
	return c, ok, nil
}

func (s boatSet) IDs() []string { return slices.Collect(maps.Keys(s)) }

// startBoat serves b on a loopback port and returns carrier's client of it.
// b serves no Deliver stream, so the client makes unary calls, as it does
// for a boat older than it.
func startBoat(t *testing.T, b *testBoat) boatpb.BoatClient {
	t.Helper()
	srv := grpc.NewServer()
	boatpb.RegisterBoatServer(srv, b)
	return boatclient.New(testutil.ServeGRPC(t, srv))
}

const (
	taskTopic  = "t.tasks"
	retryTopic = "t.tasks.retry"
	dlqTopic   = "t.dead" // not the default name, so a lost setting shows
	notifTopic = "t.notify"
	bcastTopic = "t.broadcast"
)

// harness is one carrier on a real redis-server and the in-process Kafka
// broker, with one test boat registered as "b1".
type harness struct {
	t        *testing.T
	c        *Carrier
	cfg      Config
	rdb      *redis.Client
	sessions *session.Store
	off      *offline.Store
	prod     *queue.Producer
	boat     *testBoat
	m        *metrics.Metrics
	logs     *observer.ObservedLogs // everything carrier logged, Debug and up
	brokers  []string
	read     map[string]int64 // next offset to read per topic
}

func newHarness(t *testing.T, platforms string, mod func(*Config)) *harness {
	t.Helper()
	rdb := testutil.StartRedis(t).Client(t)
	brokers := []string{testutil.StartKafka(t, 1, taskTopic, retryTopic, dlqTopic, notifTopic, bcastTopic)}
	prod := queue.NewProducer(queue.ProducerConfig{Brokers: brokers}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = prod.Close() })
	b := &testBoat{}
	cfg := Config{Brokers: brokers, TaskTopic: taskTopic, RetryTopic: retryTopic, DeadLetterTopic: dlqTopic,
		NotifyTopic: notifTopic, BroadcastTopic: bcastTopic, GroupID: "t-carrier", Workers: 4, Platforms: platform.MustParse(platforms),
		RetryBackoffMin: 10 * time.Millisecond, RetryBackoffMax: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	obs, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), obs))
	h := &harness{t: t, cfg: cfg, rdb: rdb, sessions: session.New(rdb), off: offline.New(rdb), prod: prod,
		boat: b, m: metrics.New(), logs: logs, brokers: brokers, read: map[string]int64{}}
	c, err := New(cfg, log, h.m, h.sessions, h.off, boatSet{"b1": startBoat(t, b)}, prod)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	return h
}

// run runs the carrier's consumers until the test ends.
func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.c.Run(ctx) }()
	h.t.Cleanup(func() { cancel(); <-done })
}

// connectStuck connects users u0 … u<stuck-1> with sessions stuck<i> and
// the next others users with sessions fine<i>, all ios on b1.
func (h *harness) connectStuck(stuck, others int) {
	h.t.Helper()
	for i := range stuck + others {
		sid := fmt.Sprintf("stuck%d", i)
		if i >= stuck {
			sid = fmt.Sprintf("fine%d", i)
		}
		h.connect(fmt.Sprintf("u%d", i), sid, "ios", "b1")
	}
}

// holdStuck makes the boat hold each delivery to a stuck<i> session until
// letGo is closed, then answer it with err (nil: delivered and ACKed);
// waiting counts the deliveries it held.
func (h *harness) holdStuck(err error) (letGo chan struct{}, waiting *atomic.Int64) {
	letGo, waiting = make(chan struct{}), new(atomic.Int64)
	h.boat.setAnswer(func(req *boatpb.PushMessagesRequest) error {
		if !strings.HasPrefix(req.GetSid(), "stuck") {
			return nil
		}
		waiting.Add(1)
		<-letGo
		return err
	})
	return letGo, waiting
}

// publishTasks publishes, for users u<from> … u<to-1>, a ToUid task of one
// message for ios, seq i+1, asking ACK and offline storage.
func (h *harness) publishTasks(from, to int) {
	h.t.Helper()
	var recs []queue.Record
	for i := from; i < to; i++ {
		uid := fmt.Sprintf("u%d", i)
		v, err := proto.Marshal(toUid(uid, []string{"ios"}, msg(int64(i+1), msgpb.Option_NEED_ACK, msgpb.Option_NEED_OFFLINE)))
		if err != nil {
			h.t.Fatal(err)
		}
		recs = append(recs, queue.Record{Topic: taskTopic, Key: uid, Value: v})
	}
	if err := h.prod.Publish(h.t.Context(), recs...); err != nil {
		h.t.Fatal(err)
	}
}

// deliveries reads gomsg_carrier_deliveries_total{outcome}.
func (h *harness) deliveries(outcome string) int {
	return int(promtest.ToFloat64(h.m.Deliveries.WithLabelValues(outcome)))
}

// latency reads the gomsg_carrier_push_to_delivery_seconds histogram as the
// registry exposes it: its sample count and sum.
func (h *harness) latency() (count uint64, sum float64) {
	h.t.Helper()
	mfs, err := h.m.Registry.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gomsg_carrier_push_to_delivery_seconds" {
			hist := mf.GetMetric()[0].GetHistogram()
			return hist.GetSampleCount(), hist.GetSampleSum()
		}
	}
	h.t.Fatal("gomsg_carrier_push_to_delivery_seconds not registered")
	return 0, 0
}

// warnings returns the messages carrier logged at Warn level or above.
func (h *harness) warnings() []string {
	var out []string
	for _, e := range h.logs.All() {
		if e.Level >= zapcore.WarnLevel {
			out = append(out, e.Message)
		}
	}
	return out
}

// logged returns the log entries whose message starts with prefix.
func (h *harness) logged(prefix string) []observer.LoggedEntry {
	var out []observer.LoggedEntry
	for _, e := range h.logs.All() {
		if strings.HasPrefix(e.Message, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// connect records a session as station does on Connect, keeping every session
// of the platform (the tests choose which one is newest).
func (h *harness) connect(uid, sid, pl, boatID string) {
	h.t.Helper()
	if _, err := h.sessions.Add(h.t.Context(), uid, session.Session{Sid: sid, Platform: pl, BoatID: boatID}, session.Caps{}, false); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) sids(uid string) []string {
	h.t.Helper()
	all, err := h.sessions.List(h.t.Context(), uid)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, s := range all {
		out = append(out, s.Sid)
	}
	return out
}

// stored returns the seqs kept offline for uid's platform, oldest first.
func (h *harness) stored(uid, pl string) []int64 {
	h.t.Helper()
	page, err := h.off.Read(h.t.Context(), uid, pl, time.Now(), time.Hour, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []int64
	for _, m := range page {
		out = append(out, m.Seq)
	}
	return out
}

// store keeps msgs for uid's platform as carrier does for an offline one.
func (h *harness) store(uid, pl string, msgs ...*msgpb.Message) {
	h.t.Helper()
	if err := h.c.storeOffline(context.Background(), uid, []string{pl}, msgs); err != nil {
		h.t.Fatal(err)
	}
}

// process runs one task as the consumer would.
func (h *harness) process(p *mqpb.Payload, uid string) {
	h.t.Helper()
	if err := h.c.process(h.t.Context(), p, uid); err != nil {
		h.t.Fatalf("process: %v", err)
	}
}

const marker = "\x00marker"

// published returns the records published to topic since the last call:
// it appends a marker record and reads up to it, so "nothing published" is
// known without waiting for a guessed time.
func (h *harness) published(topic string) []queue.Message {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 20*time.Second)
	defer cancel()
	if err := h.prod.Publish(ctx, queue.Record{Topic: topic, Key: marker, Value: []byte(marker)}); err != nil {
		h.t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: h.brokers, Topic: topic, Partition: 0, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	if err := r.SetOffset(h.read[topic]); err != nil {
		h.t.Fatal(err)
	}
	var out []queue.Message
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			h.t.Fatalf("read %s: %v", topic, err)
		}
		h.read[topic] = m.Offset + 1
		if string(m.Key) == marker {
			return out
		}
		out = append(out, queue.Message{Key: string(m.Key), Value: m.Value, Offset: m.Offset})
	}
}

// payloads decodes records of the task or retry topic.
func payloads(t *testing.T, ms []queue.Message) []*mqpb.Payload {
	t.Helper()
	out := make([]*mqpb.Payload, len(ms))
	for i, m := range ms {
		out[i] = &mqpb.Payload{}
		if err := proto.Unmarshal(m.Value, out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func msg(seq int64, opts ...msgpb.Option) *msgpb.Message {
	body, _ := anypb.New(wrapperspb.Int64(seq))
	var o uint32
	for _, x := range opts {
		o |= uint32(x)
	}
	// Send times follow seqs, so the store's order is seq order.
	return &msgpb.Message{Seq: seq, Options: o, Body: body, Timestamp: time.Now().UnixMilli() - 1000 + seq}
}

func toUid(uid string, platforms []string, msgs ...*msgpb.Message) *mqpb.Payload {
	return &mqpb.Payload{Seq: msgs[0].GetSeq(), Timestamp: time.Now().UnixMilli(),
		Body: &mqpb.Payload_ToUid{ToUid: &mqpb.ToUid{Uid: uid, Platforms: platforms, Msgs: msgs}}}
}

// replayTasks returns the SendOfflineToSession tasks among ps.
func replayTasks(ps []*mqpb.Payload) []*mqpb.SendOfflineToSession {
	var out []*mqpb.SendOfflineToSession
	for _, p := range ps {
		if s := p.GetSendOfflineToSession(); s != nil {
			out = append(out, s)
		}
	}
	return out
}

func (b *testBoat) deadlinesSeen() []time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.deadlines)
}
