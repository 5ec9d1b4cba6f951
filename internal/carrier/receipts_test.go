package carrier

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// createReceiptsTopic creates receiptsTopic on the harness's broker.
func (h *harness) createReceiptsTopic() {
	h.t.Helper()
	conn, err := kafka.Dial("tcp", h.brokers[0])
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.CreateTopics(kafka.TopicConfig{Topic: receiptsTopic, NumPartitions: 1, ReplicationFactor: 1}); err != nil {
		h.t.Fatal(err)
	}
}

// withReceipts turns receipts on: carrier publishes them to receiptsTopic
// (created here) through the harness's producer, as app wires it.
func (h *harness) withReceipts() *harness {
	h.createReceiptsTopic()
	h.c.cfg.Receipts = receipt.New(receiptsTopic, h.prod)
	h.c.cfg.Tracked = receipt.NewTracked(h.rdb)
	return h
}

// receipts decodes the receipts published since the last call.
func (h *harness) receipts() []*receiptpb.Receipt {
	h.t.Helper()
	var out []*receiptpb.Receipt
	for _, m := range h.published(receiptsTopic) {
		rc := &receiptpb.Receipt{}
		if err := proto.Unmarshal(m.Value, rc); err != nil {
			h.t.Fatal(err)
		}
		if m.Key != rc.GetUid() {
			h.t.Fatalf("receipt of %q keyed %q, want its uid", rc.GetUid(), m.Key)
		}
		if rc.GetId() != receipt.ID(rc) || rc.GetAt() == 0 {
			h.t.Fatalf("receipt %v: id or time not filled", rc)
		}
		out = append(out, rc)
	}
	return out
}

// brief is a receipt in one line, without its time, id and detail.
func brief(rc *receiptpb.Receipt) string {
	s := fmt.Sprintf("%d %s/%s %s", rc.GetSeq(), rc.GetUid(), rc.GetPlatform(), rc.GetState())
	if rc.GetSid() != "" || rc.GetBoatId() != "" {
		s += " " + rc.GetSid() + "@" + rc.GetBoatId()
	}
	if rc.GetAcked() {
		s += " acked"
	}
	if rc.GetAttempt() != 0 {
		s += fmt.Sprintf(" attempt=%d", rc.GetAttempt())
	}
	return s
}

func briefs(rs []*receiptpb.Receipt) []string {
	out := make([]string, len(rs))
	for i, rc := range rs {
		out[i] = brief(rc)
	}
	return out
}

func wantReceipts(t *testing.T, got []*receiptpb.Receipt, want ...string) {
	t.Helper()
	if g := briefs(got); !slices.Equal(g, want) {
		t.Fatalf("receipts:\n  %s\nwant:\n  %s", strings.Join(g, "\n  "), strings.Join(want, "\n  "))
	}
}

// A task's first pass leads its receipts with ACCEPTED per message and
// platform, as station wrote it (same id, the message's time), so that the
// uid's receipts start with it whatever reached the topic first. Then a
// platform whose newest session got the messages reports DELIVERED per
// message, with that session and its boat, acked where the message asked
// NEED_ACK; a storing platform nobody is on reports STORED for what it kept
// and DROPPED for the rest; a platform that keeps nothing DROPPED.
func TestReceiptsOfOneDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100,android:offline=1h/100,web:offline=none", nil).withReceipts()
	h.connect("u1", "1001", "ios", "b1")
	task := toUid("u1", []string{"ios", "android", "web"}, msg(1, needRc, needOff, needAck), msg(2, needRc))
	h.process(task, "u1")
	got := h.receipts()
	wantReceipts(t, got,
		"1 u1/ios ACCEPTED",
		"2 u1/ios ACCEPTED",
		"1 u1/android ACCEPTED",
		"2 u1/android ACCEPTED",
		"1 u1/web ACCEPTED",
		"2 u1/web ACCEPTED",
		"1 u1/ios DELIVERED 1001@b1 acked",
		"2 u1/ios DELIVERED 1001@b1",
		"1 u1/android STORED",
		"2 u1/android DROPPED",
		"1 u1/web DROPPED",
		"2 u1/web DROPPED")
	for _, rc := range got[:6] {
		m := task.GetToUid().GetMsgs()[rc.GetSeq()-1]
		station := &receiptpb.Receipt{Seq: rc.GetSeq(), Uid: "u1", Platform: rc.GetPlatform(), State: receiptpb.State_ACCEPTED}
		if rc.GetAt() != m.GetTimestamp() || rc.GetId() != receipt.ID(station) {
			t.Fatalf("ACCEPTED %v: at %d, id %q; want the message's time %d and station's id %q",
				brief(rc), rc.GetAt(), rc.GetId(), m.GetTimestamp(), receipt.ID(station))
		}
	}
}

// Messages stored for an offline device report STORED; once it connects
// and ACKs the replay, REPLAYED with its session, and nothing is left.
func TestReceiptsOfStoredThenReplayed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", nil).withReceipts()
	h.process(toUid("u1", []string{"ios"}, msg(1, needRc, needOff), msg(2, needRc, needOff, needAck)), "u1")
	wantReceipts(t, h.receipts(), "1 u1/ios ACCEPTED", "2 u1/ios ACCEPTED", "1 u1/ios STORED", "2 u1/ios STORED")

	h.connect("u1", "1001", "ios", "b1")
	h.process(&mqpb.Payload{Seq: 9, Body: &mqpb.Payload_SendOfflineToSession{
		SendOfflineToSession: &mqpb.SendOfflineToSession{Uid: "u1", Sid: "1001", Platform: "ios"}}}, "u1")
	wantReceipts(t, h.receipts(), "1 u1/ios REPLAYED 1001@b1 acked", "2 u1/ios REPLAYED 1001@b1 acked")
	if s := h.stored("u1", "ios"); len(s) != 0 {
		t.Fatalf("still stored after the replay: %v", s)
	}
}

// A device that reads but never ACKs: its storable message is STORED, and
// the platform is retried (RETRIED, attempt 1, with the failure) until the
// retries run out (DEAD_LETTERED with the reason); the replay queued for it
// is never ACKed, so nothing is REPLAYED.
func TestReceiptsOfANeverAckingDevice(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", func(c *Config) { c.MaxRetries = 1 }).withReceipts()
	h.boat.setAnswer(func(*boatpb.PushMessagesRequest) error { return errAckTimeout })
	h.connect("u1", "1001", "ios", "b1")
	h.process(toUid("u1", []string{"ios"}, msg(1, needRc, needOff, needAck), msg(2, needRc, needAck)), "u1")
	first := h.receipts()
	wantReceipts(t, first, "1 u1/ios ACCEPTED", "2 u1/ios ACCEPTED", "1 u1/ios STORED", "1 u1/ios RETRIED attempt=1", "2 u1/ios RETRIED attempt=1")
	if d := first[3].GetDetail(); !strings.Contains(d, "delivery failed on [ios]") {
		t.Fatalf("RETRIED detail %q, want the failure", d)
	}
	for _, p := range payloads(t, h.published(taskTopic)) { // the replay queued for 1001
		if err := h.c.process(t.Context(), p, "u1"); err != nil {
			t.Fatal(err)
		}
	}
	retries := payloads(t, h.published(retryTopic))
	if len(retries) != 1 {
		t.Fatalf("%d retries, want 1", len(retries))
	}
	h.process(retries[0], "u1")
	last := h.receipts()
	wantReceipts(t, last, "1 u1/ios STORED", "1 u1/ios DEAD_LETTERED", "2 u1/ios DEAD_LETTERED")
	if d := last[1].GetDetail(); !strings.HasPrefix(d, "failed 2 attempts; last: delivery failed on [ios]") {
		t.Fatalf("DEAD_LETTERED detail %q, want the reason", d)
	}
	if first[2].GetId() != last[0].GetId() {
		t.Fatalf("STORED again by the retry has id %q, want the first's %q", last[0].GetId(), first[2].GetId())
	}
}

// The same task handled twice (a crash before its offset was committed)
// publishes its receipts again with the same ids: a consumer drops the
// repeats.
func TestReceiptsOfATaskHandledTwiceHaveTheSameIDs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100,web", nil).withReceipts()
	h.connect("u1", "1001", "web", "b1")
	task := toUid("u1", []string{"ios", "web"}, msg(1, needRc, needOff, needAck))
	h.process(task, "u1")
	first := h.receipts()
	h.process(proto.Clone(task).(*mqpb.Payload), "u1")
	again := h.receipts()
	wantReceipts(t, first, "1 u1/ios ACCEPTED", "1 u1/web ACCEPTED", "1 u1/ios STORED", "1 u1/web DELIVERED 1001@b1 acked")
	if !slices.Equal(briefs(again), briefs(first)) {
		t.Fatalf("second handling published %v, want %v", briefs(again), briefs(first))
	}
	for i := range first {
		if first[i].GetId() != again[i].GetId() {
			t.Fatalf("receipt %d: id %q then %q", i, first[i].GetId(), again[i].GetId())
		}
	}
}

// failingRecorder publishes receipts to a broker that is stopped: every
// Record fails within a second.
func failingRecorder(t *testing.T) *receipt.Recorder {
	t.Helper()
	k := testutil.StartKafkaBroker(t, 1, receiptsTopic)
	k.Close()
	p := queue.NewProducer(queue.ProducerConfig{Brokers: []string{k.Addr}, WriteTimeout: time.Second}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = p.Close() })
	return receipt.New(receiptsTopic, p)
}

// When Kafka refuses a task's receipts the task is not done: process
// returns the error (the consumer retries the record in place), and a
// replay keeps in the store what it could not report as REPLAYED. Once
// Kafka takes them, the task completes and publishes them.
func TestReceiptsRefusedKeepTheTaskUndone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", nil)
	h.c.cfg.Receipts = failingRecorder(t)
	h.connect("u1", "1001", "ios", "b1")
	if err := h.c.process(t.Context(), toUid("u1", []string{"ios"}, msg(1, needRc, needOff, needAck)), "u1"); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("delivery with its receipts refused: process = %v, want queue.ErrUnavailable", err)
	}

	h.store("u1", "ios", msg(2, needRc, needOff), msg(3, needRc, needOff))
	replay := &mqpb.Payload{Seq: 9, Body: &mqpb.Payload_SendOfflineToSession{
		SendOfflineToSession: &mqpb.SendOfflineToSession{Uid: "u1", Sid: "1001", Platform: "ios"}}}
	if err := h.c.process(t.Context(), replay, "u1"); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("replay with its receipts refused: process = %v, want queue.ErrUnavailable", err)
	}
	if s := h.stored("u1", "ios"); !slices.Equal(s, []int64{2, 3}) {
		t.Fatalf("stored %v after a replay whose receipts were refused, want [2 3]", s)
	}

	h.withReceipts()
	h.process(replay, "u1")
	wantReceipts(t, h.receipts(), "2 u1/ios REPLAYED 1001@b1 acked", "3 u1/ios REPLAYED 1001@b1 acked")
	if s := h.stored("u1", "ios"); len(s) != 0 {
		t.Fatalf("stored %v after the replay, want none", s)
	}
}

// With receipts off nothing reaches the receipts topic, whatever happens.
func TestReceiptsOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100,web", func(c *Config) { c.MaxRetries = 1 })
	h.createReceiptsTopic()
	h.connect("u1", "1001", "web", "b1")
	h.process(toUid("u1", []string{"ios", "web"}, msg(1, needRc, needOff, needAck), msg(2, needRc)), "u1")
	h.connect("u1", "1002", "ios", "b1")
	h.process(&mqpb.Payload{Seq: 9, Body: &mqpb.Payload_SendOfflineToSession{
		SendOfflineToSession: &mqpb.SendOfflineToSession{Uid: "u1", Sid: "1002", Platform: "ios"}}}, "u1")
	h.boat.setAnswer(failLive(errUnavailable))
	h.process(toUid("u1", []string{"web"}, msg(3, needRc)), "u1")
	retries := payloads(t, h.published(retryTopic))
	if len(retries) != 1 {
		t.Fatalf("%d retries, want 1", len(retries))
	}
	h.process(retries[0], "u1")
	if n := len(h.published(dlqTopic)); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
	if rs := h.receipts(); len(rs) != 0 {
		t.Fatalf("receipts off published %v", briefs(rs))
	}
}

// Messages the offline store gives up unread report EXPIRED: those a
// write pushes out of the per-user limit, those a write finds past the
// expiry, and those a replay finds past it; only those that asked for
// receipts, although the store reports them by seq alone.
func TestReceiptsOfExpiredMessages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/2,android:offline=8s/100", nil).withReceipts()
	h.process(toUid("u1", []string{"ios"}, msg(1, needRc, needOff), msg(2, needOff), msg(3, needRc, needOff), msg(4, needOff)), "u1")
	got := h.receipts()
	wantReceipts(t, got, "1 u1/ios ACCEPTED", "3 u1/ios ACCEPTED", "1 u1/ios STORED", "3 u1/ios STORED", "1 u1/ios EXPIRED")
	if d := got[4].GetDetail(); d != "over the per-user limit" {
		t.Fatalf("EXPIRED detail %q", d)
	}

	late, lateUntracked := msg(5, needRc, needOff), msg(6, needOff)
	late.Timestamp = time.Now().Add(-2 * time.Hour).UnixMilli() // a task that waited past the expiry
	lateUntracked.Timestamp = late.Timestamp
	h.process(toUid("u1", []string{"ios"}, late, lateUntracked), "u1")
	got = h.receipts()
	wantReceipts(t, got, "5 u1/ios ACCEPTED", "5 u1/ios STORED", "5 u1/ios EXPIRED")
	if d := got[2].GetDetail(); d != "expired" {
		t.Fatalf("EXPIRED detail %q", d)
	}

	fresh := []*msgpb.Message{msg(7, needOff), msg(8, needRc, needOff), msg(9, needOff)}
	for _, m := range fresh {
		// 1.5 s before their expiry: they expire well after the write's
		// clean, and long before their keys do (a margin past the
		// expiry), so the replay's Expire is what ends them.
		m.Timestamp = time.Now().Add(-6500 * time.Millisecond).UnixMilli()
	}
	h.process(toUid("u1", []string{"android"}, fresh...), "u1")
	wantReceipts(t, h.receipts(), "8 u1/android ACCEPTED", "8 u1/android STORED")
	testutil.WaitFor(t, 10*time.Second, func() error { // they outlive their expiry
		if page, err := h.off.Read(t.Context(), "u1", "android", time.Now(), 8*time.Second, 10); err != nil || len(page) > 0 {
			return fmt.Errorf("still readable: %d, %v", len(page), err)
		}
		return nil
	})
	h.connect("u1", "1001", "android", "b1")
	h.process(&mqpb.Payload{Seq: 19, Body: &mqpb.Payload_SendOfflineToSession{
		SendOfflineToSession: &mqpb.SendOfflineToSession{Uid: "u1", Sid: "1001", Platform: "android"}}}, "u1")
	got = h.receipts()
	wantReceipts(t, got, "8 u1/android EXPIRED")
	if d := got[0].GetDetail(); d != "expired" {
		t.Fatalf("EXPIRED detail %q", d)
	}
	if seqs, _ := h.boat.got("1001"); len(seqs) != 0 {
		t.Fatalf("replayed %v, want nothing", seqs)
	}
	// What was reported is forgotten; what is still stored stays tracked.
	for pl, want := range map[string][]string{"ios": {"3"}, "android": nil} {
		if got, err := h.rdb.ZRange(t.Context(), "msg/u:u1/p:"+pl+"/rcp", 0, -1).Result(); err != nil || !slices.Equal(got, want) {
			t.Fatalf("tracked on %s: %v, %v; want %v", pl, got, err, want)
		}
	}
}

// With receipts off, working out a task's receipts allocates nothing.
// (Not parallel: AllocsPerRun refuses to run beside other tests.)
func TestReceiptsOffAllocateNothing(t *testing.T) {
	c, err := New(Config{Brokers: []string{"unused:1"}, Platforms: platform.MustParse("ios:offline=1h/100,web:offline=none")},
		zaptest.NewLogger(t), nil, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	task := toUid("u1", []string{"ios", "web"}, msg(1, needRc, needOff, needAck), msg(2, needRc))
	newest := map[string]*target{"web": {Session: session.Session{Sid: "1001", BoatID: "b1"}}}
	results := map[string]outcome{"ios": noSession, "web": delivered}
	tg := target{Session: session.Session{Sid: "1001", Platform: "ios", BoatID: "b1"}, uid: "u1"}
	acked := []int64{1, 2}
	if n := testing.AllocsPerRun(100, func() {
		rs := c.deliverySteps(task, results, newest)
		rs, _ = c.expirySteps(context.Background(), rs, "u1", "ios", acked, "expired")
		rs = append(rs, c.replaySteps(tg, task.GetToUid().GetMsgs(), acked)...)
		if len(rs) != 0 {
			t.Fatal("receipts made with receipts off")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per task with receipts off, want 0", n)
	}
}

// topicLog is a Publisher that notes the topics of each call.
type topicLog struct {
	next  Publisher
	mu    sync.Mutex
	calls [][]string
}

func (l *topicLog) Publish(ctx context.Context, recs ...queue.Record) error {
	var topics []string
	for _, r := range recs {
		if !slices.Contains(topics, r.Topic) {
			topics = append(topics, r.Topic)
		}
	}
	l.mu.Lock()
	l.calls = append(l.calls, topics)
	l.mu.Unlock()
	return l.next.Publish(ctx, recs...)
}

// The receipts of a task that notifies are published before the
// notifications: horn's NOTIFIED comes after them.
func TestReceiptsPublishedBeforeNotifications(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100:notify=apns", nil)
	h.createReceiptsTopic()
	log := &topicLog{next: h.prod}
	h.c.queue = log
	h.c.cfg.Receipts = receipt.New(receiptsTopic, log)
	h.process(toUid("u1", []string{"ios"}, msg(1, needRc, needOff, msgpb.Option_NEED_NOTIFICATION)), "u1")
	want := [][]string{{receiptsTopic}, {notifTopic}}
	if !reflect.DeepEqual(log.calls, want) {
		t.Fatalf("publish calls by topic %v, want %v", log.calls, want)
	}
	wantReceipts(t, h.receipts(), "1 u1/ios ACCEPTED", "1 u1/ios STORED")
}

// Only the messages that ask NEED_RECEIPTS get receipts: a task of
// messages that do not ask — delivered, stored, dropped, replayed, retried
// then dead-lettered — publishes no receipt and no empty call; a task or a
// replayed page that mixes both reports the asking ones alone.
func TestReceiptsOnlyForMessagesThatAskForThem(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100,android:offline=1h/100,web:offline=none", func(c *Config) { c.MaxRetries = 1 })
	h.createReceiptsTopic()
	log := &topicLog{next: h.prod}
	h.c.queue = log
	h.c.cfg.Receipts = receipt.New(receiptsTopic, log)
	replay := func(sid, pl string) *mqpb.Payload {
		return &mqpb.Payload{Seq: 9, Body: &mqpb.Payload_SendOfflineToSession{
			SendOfflineToSession: &mqpb.SendOfflineToSession{Uid: "u1", Sid: sid, Platform: pl}}}
	}

	h.connect("u1", "1001", "ios", "b1")
	h.process(toUid("u1", []string{"ios", "android", "web"}, msg(1, needOff, needAck), msg(2)), "u1")
	h.connect("u1", "1002", "android", "b1")
	h.process(replay("1002", "android"), "u1")
	if seqs, _ := h.boat.got("1002"); !slices.Equal(seqs, []int64{1}) {
		t.Fatalf("replayed %v to 1002, want [1]", seqs)
	}
	h.boat.setAnswer(failLive(errUnavailable))
	h.process(toUid("u1", []string{"web", "ios"}, msg(3)), "u1")
	retries := payloads(t, h.published(retryTopic))
	if len(retries) != 1 {
		t.Fatalf("%d retries, want 1", len(retries))
	}
	h.process(retries[0], "u1")
	if n := len(h.published(dlqTopic)); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
	if rs := h.receipts(); len(rs) != 0 {
		t.Fatalf("messages without NEED_RECEIPTS got receipts %v", briefs(rs))
	}
	for _, topics := range log.calls {
		if len(topics) == 0 || slices.Contains(topics, receiptsTopic) {
			t.Fatalf("publish calls by topic %v: one empty or to the receipts topic", log.calls)
		}
	}

	h.boat.setAnswer(nil)
	h.process(toUid("u1", []string{"ios", "android"}, msg(4, needRc, needOff, needAck), msg(5, needOff, needAck)), "u1")
	wantReceipts(t, h.receipts(), "4 u1/ios ACCEPTED", "4 u1/android ACCEPTED", "4 u1/ios DELIVERED 1001@b1 acked", "4 u1/android DELIVERED 1002@b1 acked")
	h.store("u1", "android", msg(6, needOff), msg(7, needRc, needOff), msg(8, needOff))
	h.process(replay("1002", "android"), "u1")
	wantReceipts(t, h.receipts(), "7 u1/android REPLAYED 1002@b1 acked")
	if s := h.stored("u1", "android"); len(s) != 0 {
		t.Fatalf("stored %v after the replay, want none", s)
	}
}
