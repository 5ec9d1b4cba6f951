package carrier

import (
	"slices"
	"strconv"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/unseen"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

const (
	needNotif     = msgpb.Option_NEED_NOTIFICATION
	receiptsTopic = "t.receipts"
	unseenSpec    = "ios:offline=1h/100:notify=apns,android:offline=1h/100:notify=fcm,web:offline=1h/100"
	unseenAfter   = time.Minute
	unseenLease   = 10 * time.Second
)

// newUnseenHarness is a harness whose carrier has the notify-if-unseen
// timer (on the harness's Redis) and records receipts; the tests poll it
// themselves, at the times they choose.
func newUnseenHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, unseenSpec, nil)
	conn, err := kafka.Dial("tcp", h.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	err = conn.CreateTopics(kafka.TopicConfig{Topic: receiptsTopic, NumPartitions: 1, ReplicationFactor: 1})
	_ = conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := unseen.New(unseen.Config{Topic: notifTopic, Lease: unseenLease}, zaptest.NewLogger(t), h.m,
		unseen.NewStore(h.rdb), h.prod, receipt.New(receiptsTopic, h.prod))
	if err != nil {
		t.Fatal(err)
	}
	h.c.unseen = tm
	return h
}

// unseenTask is a first-attempt ToUid task of a notify-if-unseen push.
func unseenTask(uid string, platforms []string, msgs ...*msgpb.Message) *mqpb.Payload {
	p := toUid(uid, platforms, msgs...)
	p.GetToUid().NotifyIfUnseenMs = unseenAfter.Milliseconds()
	p.GetToUid().Notification = nil
	return p
}

// due is when p's notification is due.
func due(p *mqpb.Payload) time.Time { return time.UnixMilli(p.GetTimestamp()).Add(unseenAfter) }

// poll runs the timer at now and returns the notifications it published,
// as "uid/platform" sorted.
func (h *harness) poll(now time.Time) []string {
	h.t.Helper()
	if _, err := h.c.unseen.Poll(h.t.Context(), now); err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, p := range payloads(h.t, h.published(notifTopic)) {
		n := p.GetNotification()
		out = append(out, n.GetUid()+"/"+n.GetPlatform())
	}
	slices.Sort(out)
	return out
}

func (h *harness) unseenCount(event string) int {
	return int(promtest.ToFloat64(h.m.UnseenNotifications.WithLabelValues(event)))
}

// cancelReceipts returns the NOTIFY_CANCELLED receipts published since the
// last call, as "uid/platform/seq" sorted.
func (h *harness) cancelReceipts() []string {
	h.t.Helper()
	var out []string
	for _, m := range h.published(receiptsTopic) {
		var rc receiptpb.Receipt
		if err := proto.Unmarshal(m.Value, &rc); err != nil {
			h.t.Fatal(err)
		}
		if rc.GetState() == receiptpb.State_NOTIFY_CANCELLED {
			out = append(out, rc.GetUid()+"/"+rc.GetPlatform()+"/"+strconv.FormatInt(rc.GetSeq(), 10))
		}
	}
	slices.Sort(out)
	return out
}

// Two users, each with an iOS device online: ann's device ACKs, bob's
// never does (the boat times his ACK out). Nothing is notified at once;
// when the delay has passed, bob's undelivered platforms are notified, once,
// and ann, who saw the message, is not.
func TestUnseenNotifiesOnlyTheUserWhoDidNotAck(t *testing.T) {
	t.Parallel()
	h := newUnseenHarness(t)
	h.connect("ann", "a1", "ios", "b1")
	h.connect("bob", "b1", "ios", "b1")
	h.boat.setAnswer(func(req *boatpb.PushMessagesRequest) error {
		if req.GetSid() == "b1" && !req.GetReplay() {
			return errAckTimeout
		}
		return nil
	})
	all := []string{"ios", "android"}
	ann := unseenTask("ann", all, msg(1, needAck, needOff, needNotif))
	bob := unseenTask("bob", all, msg(2, needAck, needOff, needNotif))
	h.process(ann, "ann")
	h.process(bob, "bob")
	if got := h.poll(time.Now()); len(got) != 0 {
		t.Fatalf("notified %v before the delay", got)
	}
	if got := h.unseenCount(metrics.UnseenScheduled); got != 2 {
		t.Fatalf("scheduled %d notifications, want bob's ios and android", got)
	}
	if got := h.poll(due(bob).Add(-time.Millisecond)); len(got) != 0 {
		t.Fatalf("notified %v a millisecond early", got)
	}
	if got := h.poll(due(bob)); !slices.Equal(got, []string{"bob/android", "bob/ios"}) {
		t.Fatalf("notified %v when due, want bob/android and bob/ios", got)
	}
	if got := h.poll(due(bob).Add(2 * unseenLease)); len(got) != 0 {
		t.Fatalf("notified %v again", got)
	}
	if n := h.deliveries(metrics.Notified); n != 2 {
		t.Fatalf("notified deliveries %d, want 2", n)
	}
}

// An offline user whose device connects and ACKs the replay before the
// delay is not notified: the replay cancels the notifications of every
// platform, and records NOTIFY_CANCELLED for each.
func TestUnseenCancelledByReplayAck(t *testing.T) {
	t.Parallel()
	h := newUnseenHarness(t)
	p := unseenTask("bob", []string{"ios", "android"}, msg(1, needAck, needOff, needNotif), msg(2, needAck, needOff, needNotif))
	h.process(p, "bob")
	if got := h.unseenCount(metrics.UnseenScheduled); got != 2 {
		t.Fatalf("scheduled %d notifications, want 2", got)
	}
	// bob's phone connects: its replay is ACKed.
	h.connect("bob", "s1", "ios", "b1")
	h.process(&mqpb.Payload{Seq: 10, Timestamp: time.Now().UnixMilli(), Body: &mqpb.Payload_SendOfflineToSession{
		SendOfflineToSession: &mqpb.SendOfflineToSession{Uid: "bob", Sid: "s1", Platform: "ios"}}}, "bob")
	if seqs, replays := h.boat.got("s1"); !slices.Equal(seqs, []int64{1, 2}) || slices.Contains(replays, false) {
		t.Fatalf("replayed %v (%v), want [1 2]", seqs, replays)
	}
	if got := h.poll(due(p).Add(time.Second)); len(got) != 0 {
		t.Fatalf("notified %v after the replay was ACKed", got)
	}
	if got := h.unseenCount(metrics.UnseenCancelled); got != 2 {
		t.Fatalf("cancelled %d, want 2", got)
	}
	want := []string{"bob/android/1", "bob/android/2", "bob/ios/1", "bob/ios/2"}
	if got := h.cancelReceipts(); !slices.Equal(got, want) {
		t.Fatalf("NOTIFY_CANCELLED receipts %v, want %v", got, want)
	}
}

// A platform whose live delivery failed is retried; when the retry
// delivers with an ACK, the notifications scheduled by the first attempt
// (for every undelivered platform) are cancelled. A retry that is not
// ACKed schedules nothing more.
func TestUnseenCancelledByRetryAck(t *testing.T) {
	t.Parallel()
	h := newUnseenHarness(t)
	h.connect("bob", "w1", "web", "b1")
	h.boat.setAnswer(func(*boatpb.PushMessagesRequest) error { return errUnavailable })
	// No NEED_OFFLINE: the web delivery that failed is retried.
	p := unseenTask("bob", []string{"ios", "web"}, msg(1, needAck, needNotif))
	h.process(p, "bob")
	retries := payloads(t, h.published(retryTopic))
	if len(retries) != 1 || retries[0].GetToUid().GetNotifyIfUnseenMs() != unseenAfter.Milliseconds() {
		t.Fatalf("retries %v, want one carrying the delay", retries)
	}
	if got := h.unseenCount(metrics.UnseenScheduled); got != 1 {
		t.Fatalf("scheduled %d, want ios's 1 (web has no notifier)", got)
	}
	// The first retry fails again: nothing more is scheduled.
	h.process(retries[0], "bob")
	retries = payloads(t, h.published(retryTopic))
	if len(retries) != 1 {
		t.Fatalf("second retries %d, want 1", len(retries))
	}
	if got := h.unseenCount(metrics.UnseenScheduled); got != 1 {
		t.Fatalf("scheduled %d after a failed retry, want 1", got)
	}
	h.boat.setAnswer(nil)
	h.process(retries[0], "bob")
	if seqs, _ := h.boat.got("w1"); !slices.Equal(seqs, []int64{1}) {
		t.Fatalf("web got %v, want [1]", seqs)
	}
	if got := h.poll(due(p).Add(time.Second)); len(got) != 0 {
		t.Fatalf("notified %v after the retry was ACKed", got)
	}
	if got := h.cancelReceipts(); !slices.Equal(got, []string{"bob/ios/1"}) {
		t.Fatalf("NOTIFY_CANCELLED receipts %v, want bob/ios/1", got)
	}
}

// A push without the option notifies offline platforms at once, as
// before; a carrier without the timer notifies a push with it at once too.
func TestUnseenUnsetOrNoTimerNotifiesAtOnce(t *testing.T) {
	t.Parallel()
	h := newUnseenHarness(t)
	h.process(toUid("ann", []string{"ios"}, msg(1, needAck, needNotif)), "ann")
	if got := len(h.published(notifTopic)); got != 1 {
		t.Fatalf("published %d notifications at once, want 1", got)
	}
	h.c.unseen = nil
	h.process(unseenTask("bob", []string{"ios"}, msg(2, needAck, needNotif)), "bob")
	if got := len(h.published(notifTopic)); got != 1 {
		t.Fatalf("without a timer: published %d notifications at once, want 1", got)
	}
	if got := h.unseenCount(metrics.UnseenScheduled); got != 0 {
		t.Fatalf("scheduled %d, want 0", got)
	}
}

// A retry that comes after the notification went out (the delay is shorter
// than the retry backoff) and fails again does not schedule it again.
func TestUnseenRetryAfterTheNotificationSchedulesNothing(t *testing.T) {
	t.Parallel()
	h := newUnseenHarness(t)
	h.connect("bob", "a1", "android", "b1")
	h.boat.setAnswer(func(*boatpb.PushMessagesRequest) error { return errUnavailable })
	p := unseenTask("bob", []string{"ios", "android"}, msg(1, needAck, needNotif))
	h.process(p, "bob")
	if got := h.poll(due(p)); !slices.Equal(got, []string{"bob/android", "bob/ios"}) {
		t.Fatalf("notified %v when due, want bob/android and bob/ios", got)
	}
	retries := payloads(t, h.published(retryTopic))
	if len(retries) != 1 {
		t.Fatalf("retries %d, want 1", len(retries))
	}
	h.process(retries[0], "bob")
	if got := h.poll(due(p).Add(2 * unseenLease)); len(got) != 0 {
		t.Fatalf("notified %v again after a failed retry", got)
	}
	if got := h.unseenCount(metrics.UnseenScheduled); got != 2 {
		t.Fatalf("scheduled %d, want 2", got)
	}
}

// The timer's settings default and are checked with the others.
func TestUnseenConfig(t *testing.T) {
	t.Parallel()
	var c Config
	c.Defaults()
	if c.UnseenPollInterval != time.Second || c.UnseenLease != 30*time.Second {
		t.Fatalf("defaults: poll %s, lease %s; want 1s and 30s", c.UnseenPollInterval, c.UnseenLease)
	}
	c.Brokers = []string{"k:9092"}
	for _, tc := range []struct {
		poll, lease time.Duration
		want        string
	}{
		{time.Millisecond, 2 * time.Millisecond, ""},
		{time.Millisecond - 1, time.Second, "--unseen-poll-interval: 999.999µs, must be at least 1ms"},
		{-time.Second, time.Second, "--unseen-poll-interval: -1s, must be at least 1ms"},
		{time.Second, time.Millisecond, "unseen lease: 1ms, must be at least 2ms"},
	} {
		cc := c
		cc.UnseenPollInterval, cc.UnseenLease = tc.poll, tc.lease
		err := cc.Validate()
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || err.Error() != tc.want)) {
			t.Errorf("poll %s lease %s: %v, want %q", tc.poll, tc.lease, err, tc.want)
		}
	}
}
