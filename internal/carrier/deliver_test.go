package carrier

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

const (
	needOff = msgpb.Option_NEED_OFFLINE
	needAck = msgpb.Option_NEED_ACK
	needRc  = msgpb.Option_NEED_RECEIPTS
)

// failLive makes the boat refuse live pushes with err and take replays.
func failLive(err error) func(*boatpb.PushMessagesRequest) error {
	return func(req *boatpb.PushMessagesRequest) error {
		if req.GetReplay() {
			return nil
		}
		return err
	}
}

func TestDeliveredStoresAndQueuesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", nil)
	h.connect("u1", "1001", "ios", "b1")
	h.process(toUid("u1", []string{"ios"}, msg(1, needOff, needAck), msg(2, needOff, needAck)), "u1")

	if seqs, _ := h.boat.got("1001"); !slices.Equal(seqs, []int64{1, 2}) {
		t.Fatalf("boat got %v, want [1 2]", seqs)
	}
	if s := h.stored("u1", "ios"); len(s) != 0 {
		t.Fatalf("stored %v after a delivery", s)
	}
	if ps := h.published(taskTopic); len(ps) != 0 {
		t.Fatalf("%d tasks queued after a delivery", len(ps))
	}
	if ps := h.published(retryTopic); len(ps) != 0 {
		t.Fatalf("%d retries after a delivery", len(ps))
	}
	h.process(toUid("u1", []string{"ios"}, msg(3, needOff)), "u1")
	h.process(toUid("u1", []string{"ios"}, msg(4, needAck)), "u1")
	if a, d := h.deliveries(metrics.Acked), h.deliveries(metrics.Delivered); a != 2 || d != 1 {
		t.Fatalf("deliveries acked %d delivered %d, want 2 and 1", a, d)
	}
	// Nothing was removed, so nothing says so (on every task it would drown
	// the removals that happen).
	if l := h.logged("removing sessions"); len(l) != 0 {
		t.Fatalf("logged %d removals although no session was removed", len(l))
	}
}

// A delivery to a live session that fails for a transient reason stores the
// messages and queues a replay for the session, which delivers them in seq
// order, once, with no reconnect. Without the queued replay they would wait
// in the store for a reconnect that a connected session never makes.
func TestTransientFailureBesideLiveSessionIsReplayed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
	}{{"unavailable", errUnavailable}, {"not_ready", errNotReady}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, "ios:offline=1h/100", nil)
			h.connect("u1", "1001", "ios", "b1")
			h.boat.setAnswer(failLive(tc.err))
			h.process(toUid("u1", []string{"ios"}, msg(1, needOff), msg(2, needOff)), "u1")
			h.process(toUid("u1", []string{"ios"}, msg(3, needOff)), "u1")

			if s := h.stored("u1", "ios"); !slices.Equal(s, []int64{1, 2, 3}) {
				t.Fatalf("stored %v, want [1 2 3]", s)
			}
			tasks := payloads(t, h.published(taskTopic))
			replays := replayTasks(tasks)
			if len(replays) != 2 || len(tasks) != 2 {
				t.Fatalf("queued %v, want one SendOfflineToSession per failed task", tasks)
			}
			for _, r := range replays {
				if r.GetUid() != "u1" || r.GetSid() != "1001" || r.GetPlatform() != "ios" {
					t.Fatalf("replay task %v, want u1/1001/ios", r)
				}
			}
			if rs := h.published(retryTopic); len(rs) != 0 {
				t.Fatalf("%d retries of messages that were all stored", len(rs))
			}

			for _, p := range tasks {
				h.process(p, "u1")
			}
			seqs, replay := h.boat.got("1001")
			if !slices.Equal(seqs, []int64{1, 2, 3}) || slices.Contains(replay, false) {
				t.Fatalf("boat got %v (replay %v), want [1 2 3] replayed once each in order", seqs, replay)
			}
			if s := h.stored("u1", "ios"); len(s) != 0 {
				t.Fatalf("still stored after the replay: %v", s)
			}
			if f := h.boat.finishedSids(); len(f) == 0 || f[0] != "1001" {
				t.Fatalf("FinishReplay calls %v", f)
			}
			// One replay found messages (the second task's read an empty
			// store): one "done" line, with the count.
			if done := h.logged("offline replay done"); len(done) != 1 || done[0].ContextMap()["messages"] != int64(3) {
				t.Fatalf("replay done lines %v, want one with messages=3", done)
			}
		})
	}
}

// The same through Kafka: the task goes in the task topic, carrier's
// consumers do the rest, and the boat gets the message as a replay.
func TestStrandedMessageReachesLiveSessionThroughTheQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", nil)
	h.connect("u1", "1001", "ios", "b1")
	h.boat.setAnswer(failLive(errUnavailable))
	h.run()

	for _, seq := range []int64{1, 2, 3} {
		v, err := proto.Marshal(toUid("u1", []string{"ios"}, msg(seq, needOff)))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.prod.Publish(t.Context(), queue.Record{Topic: taskTopic, Key: "u1", Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if seqs, _ := h.boat.got("1001"); len(seqs) < 3 {
			return testutil.Errorf("boat got %v", seqs)
		}
		if s := h.stored("u1", "ios"); len(s) != 0 {
			return testutil.Errorf("stored %v", s)
		}
		return nil
	})
	seqs, replay := h.boat.got("1001")
	if !slices.Equal(seqs, []int64{1, 2, 3}) || slices.Contains(replay, false) {
		t.Fatalf("boat got %v (replay %v), want [1 2 3] as replays, once each, in order", seqs, replay)
	}
}

// A platform that keeps nothing offline stores nothing and queues no replay
// (there would be nothing to replay); its failed delivery is retried.
func TestOfflineNonePlatformStoresAndQueuesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100,web:offline=none", nil)
	h.connect("u1", "1001", "web", "b1")
	h.connect("u1", "1002", "ios", "b1")
	h.boat.setAnswer(func(req *boatpb.PushMessagesRequest) error {
		if req.GetSid() == "1001" {
			return errUnavailable
		}
		return nil
	})
	h.process(toUid("u1", []string{"web", "ios"}, msg(1, needOff)), "u1")

	n, err := h.rdb.Keys(t.Context(), "msg/u:*/oms").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(n) != 0 {
		t.Fatalf("offline lists %v after a failed delivery on an offline=none platform", n)
	}
	if tasks := h.published(taskTopic); len(tasks) != 0 {
		t.Fatalf("queued %v for an offline=none platform", payloads(t, tasks))
	}
	retries := payloads(t, h.published(retryTopic))
	if len(retries) != 1 || !slices.Equal(retries[0].GetToUid().GetPlatforms(), []string{"web"}) {
		t.Fatalf("retries %v, want one ToUid for web", retries)
	}
}

// A platform counts as delivered only when its newest session got the
// messages; the replay goes to the newest session.
func TestNewestSessionRule(t *testing.T) {
	t.Parallel()
	t.Run("older_ok_newest_fails", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, "ios:offline=1h/100", nil)
		h.connect("u1", "1001", "ios", "b1")
		h.connect("u1", "1002", "ios", "b1")
		h.boat.setAnswer(func(req *boatpb.PushMessagesRequest) error {
			if req.GetSid() == "1002" && !req.GetReplay() {
				return errUnavailable
			}
			return nil
		})
		h.process(toUid("u1", []string{"ios"}, msg(1, needOff)), "u1")
		if s := h.stored("u1", "ios"); !slices.Equal(s, []int64{1}) {
			t.Fatalf("stored %v, want [1]: the newest session did not get it", s)
		}
		replays := replayTasks(payloads(t, h.published(taskTopic)))
		if len(replays) != 1 || replays[0].GetSid() != "1002" {
			t.Fatalf("replays %v, want one for the newest session 1002", replays)
		}
	})
	t.Run("older_fails_newest_ok", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, "ios:offline=1h/100", nil)
		h.connect("u1", "1001", "ios", "b1")
		h.connect("u1", "1002", "ios", "b1")
		h.boat.setAnswer(func(req *boatpb.PushMessagesRequest) error {
			if req.GetSid() == "1001" {
				return errUnavailable
			}
			return nil
		})
		h.process(toUid("u1", []string{"ios"}, msg(1, needOff)), "u1")
		if s := h.stored("u1", "ios"); len(s) != 0 {
			t.Fatalf("stored %v although the newest session got it", s)
		}
		if tasks := h.published(taskTopic); len(tasks) != 0 {
			t.Fatalf("queued %v although the newest session got it", payloads(t, tasks))
		}
		if rs := h.published(retryTopic); len(rs) != 0 {
			t.Fatalf("%d retries although the newest session got it", len(rs))
		}
	})
}

// A session its boat says it does not hold is removed from the user's
// record, and the next newest session decides the platform.
func TestSessionNotHeldIsRemoved(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", nil)
	h.connect("u1", "1001", "ios", "b1")
	h.connect("u1", "1002", "ios", "b1")
	h.connect("u1", "1003", "ios", "gone") // a boat no longer registered
	// A record no version of gomsg wrote, on no target platform.
	if err := h.rdb.HSet(t.Context(), rkeys.Standalone.Sessions("u1"), "999", "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	h.boat.setAnswer(func(req *boatpb.PushMessagesRequest) error {
		if req.GetSid() == "1002" {
			return errNotHeld
		}
		return nil
	})
	h.process(toUid("u1", []string{"ios"}, msg(1, needOff)), "u1")
	if got := h.sids("u1"); !slices.Equal(got, []string{"1001"}) {
		t.Fatalf("sessions %v, want [1001]: 1002 is not held, 1003's boat is gone, 999 is garbage", got)
	}
	if seqs, _ := h.boat.got("1001"); !slices.Equal(seqs, []int64{1}) {
		t.Fatalf("1001 got %v", seqs)
	}
	if s := h.stored("u1", "ios"); len(s) != 0 {
		t.Fatalf("stored %v although the newest held session got it", s)
	}
	if tasks := h.published(taskTopic); len(tasks) != 0 {
		t.Fatalf("queued %v", payloads(t, tasks))
	}
	if w := h.warnings(); len(w) != 0 {
		t.Fatalf("warnings %q although every removal succeeded", w)
	}
}

// A failed delivery whose messages cannot be stored is retried with the
// count raised and the attempt recorded, and dead-lettered after MaxRetries.
func TestRetriesThenDeadLetter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", func(c *Config) { c.MaxRetries = 2 })
	h.connect("u1", "1001", "ios", "b1")
	h.boat.setAnswer(func(*boatpb.PushMessagesRequest) error { return errUnavailable })
	task := toUid("u1", []string{"ios"}, msg(1)) // no NEED_OFFLINE: nothing to store
	for want := int32(1); want <= 2; want++ {
		h.process(task, "u1")
		rs := payloads(t, h.published(retryTopic))
		if len(rs) != 1 || rs[0].GetRetryCount() != want || len(rs[0].GetAttempts()) != int(want) ||
			!slices.Equal(rs[0].GetToUid().GetPlatforms(), []string{"ios"}) {
			t.Fatalf("retry %d: %v", want, rs)
		}
		task = rs[0]
	}
	h.process(task, "u1")
	if rs := h.published(retryTopic); len(rs) != 0 {
		t.Fatalf("retried past --max-retries: %d", len(rs))
	}
	dl := h.published(dlqTopic)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	var d mqpb.DeadLetter
	if err := proto.Unmarshal(dl[0].Value, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.GetPayload().GetAttempts()) != 3 || !strings.Contains(d.GetReason(), "failed 3 attempts") ||
		d.GetPayload().GetToUid().GetMsgs()[0].GetSeq() != 1 {
		t.Fatalf("dead letter %v", &d)
	}
	if tasks := h.published(taskTopic); len(tasks) != 0 {
		t.Fatalf("queued %v although nothing was stored", payloads(t, tasks))
	}
	if r, d := h.deliveries(metrics.Retried), h.deliveries(metrics.DeadLettered); r != 2 || d != 1 {
		t.Fatalf("deliveries retried %d dead-lettered %d, want 2 and 1", r, d)
	}
}

// A message stored while a replay runs (the retry consumer found the session
// not ready) is replayed by the same task once the session is ready.
func TestStoredDuringReplayIsPickedUp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", nil)
	h.connect("u1", "1001", "ios", "b1")
	h.store("u1", "ios", msg(1, needOff), msg(2, needOff))
	var once sync.Once
	h.boat.mu.Lock()
	h.boat.finish = func(string) error {
		// As the retry consumer would, after the replay's last read.
		once.Do(func() { h.store("u1", "ios", msg(3, needOff)) })
		return nil
	}
	h.boat.mu.Unlock()
	h.process(&mqpb.Payload{Seq: 9, Body: &mqpb.Payload_SendOfflineToSession{
		SendOfflineToSession: &mqpb.SendOfflineToSession{Uid: "u1", Sid: "1001", Platform: "ios"}}}, "u1")
	if seqs, _ := h.boat.got("1001"); !slices.Equal(seqs, []int64{1, 2, 3}) {
		t.Fatalf("boat got %v, want [1 2 3]", seqs)
	}
	if s := h.stored("u1", "ios"); len(s) != 0 {
		t.Fatalf("left stored: %v", s)
	}
}

// A replay the session cannot take (it ended, or did not ACK) keeps what it
// did not ACK stored for the next connect, and is not retried.
func TestReplayToEndedSessionKeepsTheRest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", nil)
	h.connect("u1", "1001", "ios", "b1")
	h.store("u1", "ios", msg(1, needOff))
	h.boat.setAnswer(func(*boatpb.PushMessagesRequest) error { return errAckTimeout })
	h.process(&mqpb.Payload{Seq: 9, Body: &mqpb.Payload_SendOfflineToSession{
		SendOfflineToSession: &mqpb.SendOfflineToSession{Uid: "u1", Sid: "1001", Platform: "ios"}}}, "u1")
	if s := h.stored("u1", "ios"); !slices.Equal(s, []int64{1}) {
		t.Fatalf("stored %v, want [1] kept", s)
	}
	if f := h.boat.finishedSids(); len(f) != 0 {
		t.Fatalf("FinishReplay %v for a session that ended", f)
	}
	if rs := h.published(retryTopic); len(rs) != 0 {
		t.Fatalf("%d retries of a replay to an ended session", len(rs))
	}
}

// A platform not reached online gets a Notification task carrying the
// NEED_NOTIFICATION messages, once: a retried task notifies nobody again.
func TestNotificationForPlatformNotReached(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100:notify=apns,web:offline=none", nil)
	h.connect("u1", "1001", "web", "b1") // web is delivered; ios has no session
	h.process(toUid("u1", []string{"ios", "web"}, msg(1, needOff, msgpb.Option_NEED_NOTIFICATION), msg(2, needOff)), "u1")
	ns := payloads(t, h.published(notifTopic))
	if len(ns) != 1 {
		t.Fatalf("%d notifications, want 1", len(ns))
	}
	n := ns[0].GetNotification()
	if n.GetUid() != "u1" || n.GetPlatform() != "ios" || n.GetProvider() != "apns" ||
		len(n.GetMsgs()) != 1 || n.GetMsgs()[0].GetSeq() != 1 {
		t.Fatalf("notification %v, want ios/apns with message 1 only", n)
	}
	if c := h.deliveries(metrics.Notified); c != 1 {
		t.Fatalf("notified %d", c)
	}

	h.process(toUid("u1", []string{"ios"}, msg(3, needOff)), "u1") // nothing asks for one
	retried := toUid("u1", []string{"ios"}, msg(4, needOff, msgpb.Option_NEED_NOTIFICATION))
	retried.RetryCount = 1
	h.process(retried, "u1")
	everyone := toUid("u1", []string{"web"}, msg(5, msgpb.Option_NEED_NOTIFICATION)) // delivered
	h.process(everyone, "u1")
	if ns := h.published(notifTopic); len(ns) != 0 {
		t.Fatalf("notified %v", payloads(t, ns))
	}
}

// Two replays of one store at once (the task topic's SendOfflineToSession
// and the retry topic's copy of one queued during a partition) push each
// stored message once: the second waits for the first and finds its pages
// deleted. The boat holds the first replay's push until a second push
// arrives or a second has passed.
func TestConcurrentReplaysDeliverOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", nil)
	h.connect("u1", "1001", "ios", "b1")
	h.store("u1", "ios", msg(1, needOff), msg(2, needOff))
	var (
		mu     sync.Mutex
		pushes int
	)
	second := make(chan struct{})
	h.boat.setAnswer(func(req *boatpb.PushMessagesRequest) error {
		mu.Lock()
		pushes++
		n := pushes
		mu.Unlock()
		switch n {
		case 1:
			select {
			case <-second:
			case <-time.After(time.Second):
			}
		case 2:
			close(second)
		}
		return nil
	})
	task := func(seq int64) *mqpb.Payload {
		return &mqpb.Payload{Seq: seq, Body: &mqpb.Payload_SendOfflineToSession{
			SendOfflineToSession: &mqpb.SendOfflineToSession{Uid: "u1", Sid: "1001", Platform: "ios"}}}
	}
	errs := make(chan error, 2)
	for _, seq := range []int64{9, 10} {
		go func() { errs <- h.c.process(t.Context(), task(seq), "u1") }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("process: %v", err)
		}
	}
	if seqs, _ := h.boat.got("1001"); !slices.Equal(seqs, []int64{1, 2}) {
		t.Fatalf("boat got %v, want [1 2] once", seqs)
	}
	if s := h.stored("u1", "ios"); len(s) != 0 {
		t.Fatalf("left stored: %v", s)
	}
}

// Every platform delivered to its newest session observes the time from the
// message's send time in gomsg_carrier_push_to_delivery_seconds; platforms
// not delivered (no session, or a failed push) and tasks without messages
// observe nothing.
func TestPushToDeliveryLatency(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100,web:offline=none,desktop:offline=1h/100,android:offline=1h/100,watch:offline=none", nil)
	h.connect("u1", "1001", "ios", "b1")
	h.connect("u1", "1002", "web", "b1")
	h.connect("u1", "1004", "desktop", "b1")
	h.connect("u1", "1003", "android", "b1") // its pushes fail
	h.boat.setAnswer(func(req *boatpb.PushMessagesRequest) error {
		if req.GetSid() == "1003" && !req.GetReplay() {
			return errUnavailable
		}
		return nil
	})
	const age = 3 * time.Second
	m := msg(1, needOff)
	m.Timestamp = time.Now().Add(-age).UnixMilli()
	start := time.Now()
	// watch has no session: not delivered.
	h.process(toUid("u1", []string{"ios", "web", "desktop", "android", "watch"}, m), "u1")
	took := time.Since(start)
	count, sum := h.latency()
	if count != 3 {
		t.Fatalf("latency observed %d times, want 3 (ios, web and desktop delivered)", count)
	}
	if lo, hi := 3*age.Seconds(), 3*(age+took).Seconds()+0.01; sum < lo || sum > hi {
		t.Fatalf("latency sum %.3fs, want 3 × between %s and %s", sum, age, age+took)
	}

	empty := &mqpb.Payload{Seq: 2, Body: &mqpb.Payload_ToUid{ToUid: &mqpb.ToUid{Uid: "u1", Platforms: []string{"ios"}}}}
	h.process(empty, "u1")
	if count, _ := h.latency(); count != 3 {
		t.Fatalf("latency observed %d times after a task without messages, want still 3", count)
	}
	if d := h.deliveries(metrics.Delivered); d != 4 {
		t.Fatalf("delivered %d, want 4 (ios, web, desktop, then ios with no messages)", d)
	}
}

// The boat call's deadline is AckWait plus CallTimeout: a boat that answers
// after AckWait (its client ACKed late in the wait, and the answer took a
// while) but within CallTimeout beyond it still counts as a delivery, and
// the boat sees that deadline.
func TestBoatCallDeadlineIsAckWaitPlusCallTimeout(t *testing.T) {
	t.Parallel()
	const (
		ackWait     = 300 * time.Millisecond
		callTimeout = 2 * time.Second
		answerAfter = 800 * time.Millisecond // past AckWait, well within AckWait+CallTimeout
	)
	h := newHarness(t, "ios:offline=1h/100", func(c *Config) { c.AckWait, c.CallTimeout = ackWait, callTimeout })
	h.connect("u1", "1001", "ios", "b1")
	h.boat.setAnswer(func(*boatpb.PushMessagesRequest) error {
		time.Sleep(answerAfter) // the boat answering late, not a wait for the test
		return nil
	})
	h.process(toUid("u1", []string{"ios"}, msg(1, needOff, needAck)), "u1")
	if a := h.deliveries(metrics.Acked); a != 1 {
		t.Fatalf("acked %d, want 1: an answer %s after the push, within AckWait+CallTimeout, was not taken", a, answerAfter)
	}
	if s := h.stored("u1", "ios"); len(s) != 0 {
		t.Fatalf("stored %v after a delivery", s)
	}
	d := h.boat.deadlinesSeen()
	if len(d) != 1 || d[0] > ackWait+callTimeout+50*time.Millisecond || d[0] < ackWait+callTimeout-time.Second {
		t.Fatalf("boat saw deadlines %v, want one of about %s", d, ackWait+callTimeout)
	}
}

// The retry topic is served by a quarter of the workers: retries of several
// users at once never hold more than Workers/4 boat calls.
func TestRetryTopicUsesAQuarterOfTheWorkers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", func(c *Config) { c.Workers = 8 })
	var (
		mu             sync.Mutex
		inflight, peak int
	)
	h.boat.setAnswer(func(*boatpb.PushMessagesRequest) error {
		mu.Lock()
		inflight++
		peak = max(peak, inflight)
		mu.Unlock()
		// Hold the call until a third is in flight, or a second passed.
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			p := peak
			mu.Unlock()
			if p >= 3 {
				break
			}
		}
		mu.Lock()
		inflight--
		mu.Unlock()
		return nil
	})
	users := []string{"u1", "u2", "u3"}
	for _, u := range users {
		h.connect(u, "1001", "ios", "b1")
		p := toUid(u, []string{"ios"}, msg(1))
		p.RetryCount, p.LastAttemptAt = 1, time.Now().Add(-time.Hour).UnixMilli() // due now
		v, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.prod.Publish(t.Context(), queue.Record{Topic: retryTopic, Key: u, Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	h.run()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if d := h.deliveries(metrics.Delivered); d != len(users) {
			return testutil.Errorf("delivered %d of %d", d, len(users))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if peak != 2 {
		t.Fatalf("retry calls in flight at most %d, want 2 (a quarter of 8 workers)", peak)
	}
}

// One replay per key at a time: a waiter gets the lock when the holder
// lets go, a third comer waits while the waiter holds it, other keys do not
// wait, and no entry is left once all are done.
func TestReplayLocks(t *testing.T) {
	t.Parallel()
	var l replayLocks
	refs := func(key string) int {
		l.mu.Lock()
		defer l.mu.Unlock()
		if e := l.m[key]; e != nil {
			return e.refs
		}
		return 0
	}
	unlockA, err := l.lock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	gotB := make(chan func(), 1)
	go func() {
		u, err := l.lock(t.Context(), "k")
		if err != nil {
			t.Error(err)
		}
		gotB <- u
	}()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if r := refs("k"); r != 2 {
			return testutil.Errorf("refs %d, want 2 (holder and waiter)", r)
		}
		return nil
	})
	select {
	case <-gotB:
		t.Fatal("second lock taken while the first is held")
	default:
	}
	unlockA()
	var unlockB func()
	select {
	case unlockB = <-gotB:
	case <-time.After(5 * time.Second):
		t.Fatal("waiter did not get the lock after the holder let go")
	}
	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if u, err := l.lock(short, "k"); err == nil {
		u()
		t.Fatal("third lock taken while the second is held")
	}
	other, cancel2 := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel2()
	unlockO, err := l.lock(other, "other")
	if err != nil {
		t.Fatalf("lock of another key waited: %v", err)
	}
	unlockO()
	unlockB()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.m) != 0 {
		t.Fatalf("entries left after every lock was released: %v", l.m)
	}
}

// Clients that do not ACK hold no worker: with two workers, six users
// whose sessions never answer until the end do not stop four other users'
// messages, published after theirs, from being delivered meanwhile.
func TestUnackedDeliveriesHoldNoWorker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", func(c *Config) { c.Workers = 2 })
	letGo, waiting := h.holdStuck(nil)
	const stuck, others = 6, 4
	h.connectStuck(stuck, others)
	h.publishTasks(0, stuck+others)
	h.run()
	released := false
	defer func() {
		if !released {
			close(letGo)
		}
	}()

	testutil.WaitFor(t, 20*time.Second, func() error {
		for i := stuck; i < stuck+others; i++ {
			if seqs, _ := h.boat.got(fmt.Sprintf("fine%d", i)); !slices.Equal(seqs, []int64{int64(i + 1)}) {
				return testutil.Errorf("fine%d got %v while %d deliveries wait for an ACK", i, seqs, waiting.Load())
			}
		}
		if n := waiting.Load(); n != stuck {
			return testutil.Errorf("%d deliveries wait for an ACK, want %d", n, stuck)
		}
		return nil
	})
	close(letGo)
	released = true
	testutil.WaitFor(t, 20*time.Second, func() error {
		for i := range stuck {
			if seqs, _ := h.boat.got(fmt.Sprintf("stuck%d", i)); !slices.Equal(seqs, []int64{int64(i + 1)}) {
				return testutil.Errorf("stuck%d got %v after its client ACKed", i, seqs)
			}
		}
		return nil
	})
}

// storeHook holds every offline store write (an EVALSHA in a pipeline)
// until gate is closed, counting those in flight and the most at once.
type storeHook struct {
	gate           chan struct{}
	inflight, peak atomic.Int64
}

func (k *storeHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (k *storeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (k *storeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "evalsha" || c.Name() == "eval" }) {
			return next(ctx, cmds)
		}
		n := k.inflight.Add(1)
		for p := k.peak.Load(); n > p && !k.peak.CompareAndSwap(p, n); p = k.peak.Load() {
		}
		<-k.gate
		k.inflight.Add(-1)
		return next(ctx, cmds)
	}
}

// Deliveries that wait for ACKs and then fail together, as those held by a
// boat that dies do, go on a few at a time: with four workers one at a time.
// Eight users' deliveries wait, then the boat refuses them all at once; while
// the first one's store is held, the seven others wait for a place, and two
// other users' messages, published then, are delivered meanwhile, and no
// more than one store was ever in flight; the metric counted the seven that
// waited. Once the stores go through, each of the eight has its message
// stored.
func TestFailedDeliveriesGoOnAFewAtATime(t *testing.T) {
	t.Parallel()
	var main *queue.Consumer
	h := newHarness(t, "ios:offline=1h/100", func(c *Config) {
		c.NewConsumer = func(cfg queue.ConsumerConfig, hd queue.Handler, log *zap.Logger) queue.Runner {
			cons := queue.NewConsumer(cfg, hd, log)
			if cfg.Topic == taskTopic {
				main = cons
			}
			return cons
		}
	})
	letGo, waiting := h.holdStuck(errUnavailable)
	const stuck, others = 8, 2
	h.connectStuck(stuck, others)
	hook := &storeHook{gate: make(chan struct{})}
	h.rdb.AddHook(hook)
	h.publishTasks(0, stuck)
	h.run()
	letGoClosed, gateOpened := false, false
	defer func() { // before the harness stops carrier: no handler may still wait
		if !letGoClosed {
			close(letGo)
		}
		if !gateOpened {
			close(hook.gate)
		}
	}()

	testutil.WaitFor(t, 20*time.Second, func() error {
		if n := waiting.Load(); n != stuck {
			return testutil.Errorf("%d deliveries wait for an ACK, want %d", n, stuck)
		}
		return nil
	})
	close(letGo)
	letGoClosed = true
	testutil.WaitFor(t, 20*time.Second, func() error {
		if in, w := hook.inflight.Load(), main.Stats().ResumeWaiting; in != 1 || w != stuck-1 {
			return testutil.Errorf("%d stores in flight and %d failed deliveries waiting to go on, want 1 and %d", in, w, stuck-1)
		}
		return nil
	})
	h.publishTasks(stuck, stuck+others)
	testutil.WaitFor(t, 20*time.Second, func() error {
		for i := stuck; i < stuck+others; i++ {
			if seqs, _ := h.boat.got(fmt.Sprintf("fine%d", i)); !slices.Equal(seqs, []int64{int64(i + 1)}) {
				return testutil.Errorf("fine%d got %v while the failed deliveries' stores wait", i, seqs)
			}
		}
		return nil
	})
	if p := hook.peak.Load(); p != 1 {
		t.Errorf("at most %d stores were in flight at once, want 1", p)
	}
	if n := promtest.ToFloat64(h.m.ResumeWaits.WithLabelValues(taskTopic)); n < stuck-1 {
		t.Errorf("gomsg_carrier_resume_waits_total{topic=%q} = %v, want at least %d", taskTopic, n, stuck-1)
	}
	close(hook.gate)
	gateOpened = true
	testutil.WaitFor(t, 20*time.Second, func() error {
		for i := range stuck {
			if got := h.stored(fmt.Sprintf("u%d", i), "ios"); !slices.Contains(got, int64(i+1)) {
				return testutil.Errorf("u%d has %v stored, want its message %d", i, got, i+1)
			}
		}
		return nil
	})
}

// The newest session of a platform — whose delivery decides whether the
// platform got the message — is the last one to connect, as station ranks
// them when it kicks older sessions, not the one with the largest sid: a
// device that reconnects through a boat whose clock is behind gets a
// smaller sid than its own half-open old session. Here the old session
// (the larger sid) fails while the new one takes the message: the platform
// is delivered, nothing is stored, retried or replayed.
func TestNewestSessionIsTheLastConnect(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", nil)
	for _, sid := range []string{"2002", "1001"} { // 2002 connected first
		if _, err := h.sessions.Add(t.Context(), "u1", session.Session{Sid: sid, Platform: "ios", BoatID: "b1"}, session.Caps{}, true); err != nil {
			t.Fatal(err)
		}
	}
	h.boat.setAnswer(func(req *boatpb.PushMessagesRequest) error {
		if req.GetSid() == "2002" {
			return errUnavailable
		}
		return nil
	})
	h.process(toUid("u1", []string{"ios"}, msg(1, needOff, needAck)), "u1")
	if seqs, _ := h.boat.got("1001"); !slices.Equal(seqs, []int64{1}) {
		t.Fatalf("the new session got %v, want [1]", seqs)
	}
	if s := h.stored("u1", "ios"); len(s) != 0 {
		t.Fatalf("stored %v although the newest session took it", s)
	}
	if ps := h.published(taskTopic); len(ps) != 0 {
		t.Fatalf("queued %v although the newest session took it", payloads(t, ps))
	}
	if rs := h.published(retryTopic); len(rs) != 0 {
		t.Fatalf("%d retries although the newest session took it", len(rs))
	}
}
