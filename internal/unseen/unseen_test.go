package unseen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

const (
	notifyTopic   = "t.notify"
	receiptsTopic = "t.receipts"
	lease         = 10 * time.Second
)

// rig is a timer on a real redis-server and the in-process Kafka broker.
type rig struct {
	t       testing.TB
	rdb     redis.UniversalClient
	store   *Store
	timer   *Timer
	m       *metrics.Metrics
	prod    *queue.Producer
	brokers []string
	read    map[string]int64
}

func newRig(t testing.TB, rdb redis.UniversalClient) *rig {
	t.Helper()
	if rdb == nil {
		rdb = testutil.SharedRedis(t)
	}
	brokers := []string{testutil.StartKafka(t, 1, notifyTopic, receiptsTopic)}
	prod := queue.NewProducer(queue.ProducerConfig{Brokers: brokers}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = prod.Close() })
	r := &rig{t: t, rdb: rdb, store: NewStore(rdb), m: metrics.New(), prod: prod, brokers: brokers, read: map[string]int64{}}
	tm, err := New(Config{Topic: notifyTopic, Lease: lease, Batch: 2}, zaptest.NewLogger(t), r.m, r.store, prod, receipt.New(receiptsTopic, prod))
	if err != nil {
		t.Fatal(err)
	}
	r.timer = tm
	return r
}

// notification is the value of a Notification task of uid on platform
// about seqs, messages that ask for receipts.
func notification(t testing.TB, uid, platform string, seqs ...int64) []byte {
	t.Helper()
	n := &mqpb.Notification{Uid: uid, Platform: platform, Provider: "apns"}
	for _, s := range seqs {
		n.Msgs = append(n.Msgs, &msgpb.Message{Seq: s, Options: uint32(msgpb.Option_NEED_RECEIPTS)})
	}
	v, err := proto.Marshal(&mqpb.Payload{Seq: seqs[0], Body: &mqpb.Payload_Notification{Notification: n}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

const marker = "\x00marker"

// published returns the records published to topic since the last call,
// reading up to a marker it appends, so "none" needs no guessed wait.
func (r *rig) published(topic string) []kafka.Message {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), 20*time.Second)
	defer cancel()
	if err := r.prod.Publish(ctx, queue.Record{Topic: topic, Key: marker, Value: []byte(marker)}); err != nil {
		r.t.Fatal(err)
	}
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: r.brokers, Topic: topic, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer rd.Close()
	if err := rd.SetOffset(r.read[topic]); err != nil {
		r.t.Fatal(err)
	}
	var out []kafka.Message
	for {
		m, err := rd.ReadMessage(ctx)
		if err != nil {
			r.t.Fatalf("read %s: %v", topic, err)
		}
		r.read[topic] = m.Offset + 1
		if string(m.Key) == marker {
			return out
		}
		out = append(out, m)
	}
}

// poll runs one poll at now and returns how many notifications it sent.
func (r *rig) poll(now time.Time) int {
	r.t.Helper()
	n, err := r.timer.Poll(r.t.Context(), now)
	if err != nil {
		r.t.Fatalf("poll at %s: %v", now, err)
	}
	return n
}

// keysLeft lists the timer's keys that still exist in Redis.
func (r *rig) keysLeft() []string {
	r.t.Helper()
	var left []string
	l := rkeys.Of(r.rdb)
	for sh := range Shards {
		due, pay, idx := l.Unseen(sh)
		for _, k := range []string{due, pay, idx} {
			n, err := r.rdb.Exists(r.t.Context(), k).Result()
			if err != nil {
				r.t.Fatal(err)
			}
			if n > 0 {
				left = append(left, k)
			}
		}
	}
	return left
}

func (r *rig) count(event string) int {
	return int(promtest.ToFloat64(r.m.UnseenNotifications.WithLabelValues(event)))
}

// sameShard returns n uids whose entries share a shard.
func sameShard(n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if uid := fmt.Sprintf("user-%d", i); Shard(uid) == 0 {
			out = append(out, uid)
		}
	}
	return out
}

// An entry is published once, when due, with exactly its notifications,
// keyed by its uid; a second poll finds nothing and Redis keeps no trace.
// Claims of more entries than a batch take several batches.
func TestTimerPublishesWhenDue(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx := t.Context()
	t0 := time.UnixMilli(time.Now().UnixMilli())
	// Three users of one shard: a batch of two takes two claims.
	uids := sameShard(3)
	for i, uid := range uids {
		seq := int64(100 + i)
		if err := r.timer.Schedule(ctx, uid, []int64{seq}, t0.Add(time.Duration(i)*time.Millisecond),
			[][]byte{notification(t, uid, "ios", seq), notification(t, uid, "android", seq)}); err != nil {
			t.Fatal(err)
		}
	}
	late := time.Hour
	if err := r.timer.Schedule(ctx, "dee", []int64{200}, t0.Add(late), [][]byte{notification(t, "dee", "ios", 200)}); err != nil {
		t.Fatal(err)
	}
	if got := r.count(metrics.UnseenScheduled); got != 7 {
		t.Fatalf("scheduled %d notifications, want 7", got)
	}
	if n := r.poll(t0.Add(-time.Millisecond)); n != 0 {
		t.Fatalf("poll before due sent %d", n)
	}
	if recs := r.published(notifyTopic); len(recs) != 0 {
		t.Fatalf("%d records published before due", len(recs))
	}
	if n := r.poll(t0.Add(2 * time.Millisecond)); n != 6 {
		t.Fatalf("poll when due sent %d, want 6", n)
	}
	got := map[string][]string{}
	for _, m := range r.published(notifyTopic) {
		var p mqpb.Payload
		if err := proto.Unmarshal(m.Value, &p); err != nil {
			t.Fatal(err)
		}
		n := p.GetNotification()
		if n.GetUid() != string(m.Key) {
			t.Fatalf("notification of %s keyed %q", n.GetUid(), m.Key)
		}
		got[n.GetUid()] = append(got[n.GetUid()], n.GetPlatform())
	}
	for _, uid := range uids {
		if p := got[uid]; !slices.Equal(p, []string{"ios", "android"}) {
			t.Errorf("%s: notifications for %v, want [ios android]", uid, p)
		}
	}
	if len(got) != 3 {
		t.Fatalf("notifications of %v, want %v", got, uids)
	}
	if n := r.poll(t0.Add(lease + time.Second)); n != 0 {
		t.Fatalf("second poll sent %d", n)
	}
	if v := promtest.ToFloat64(r.m.UnseenEntries.WithLabelValues("scheduled")); v != 1 {
		t.Fatalf("scheduled entries gauge %v, want 1 (dee)", v)
	}
	if n := r.poll(t0.Add(late)); n != 1 {
		t.Fatalf("poll at dee's time sent %d, want 1", n)
	}
	if left := r.keysLeft(); len(left) != 0 {
		t.Fatalf("keys left after every entry was sent: %v", left)
	}
	if got := r.count(metrics.UnseenSent); got != 7 {
		t.Fatalf("sent %d, want 7", got)
	}
}

// A poller that claimed an entry and crashed before publishing it does not
// lose it: the entry is not due again while the claim's lease runs, and is
// published once by the next poll after it.
func TestClaimedEntryIsDueAgainAfterTheLease(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx := t.Context()
	t0 := time.UnixMilli(time.Now().UnixMilli())
	if err := r.timer.Schedule(ctx, "bob", []int64{7}, t0, [][]byte{notification(t, "bob", "ios", 7)}); err != nil {
		t.Fatal(err)
	}
	// The crashed poller: claims, never publishes, never calls Done.
	claimed, err := r.store.Claim(ctx, Shard("bob"), t0, lease, 10)
	if err != nil || len(claimed) != 1 || claimed[0].UID != "bob" || !slices.Equal(claimed[0].Seqs, []int64{7}) {
		t.Fatalf("claim: %+v, %v", claimed, err)
	}
	// A re-processed task schedules it again: the claim stands.
	if err := r.timer.Schedule(ctx, "bob", []int64{7}, t0, [][]byte{notification(t, "bob", "ios", 7)}); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{t0, t0.Add(lease - time.Millisecond)} {
		if n := r.poll(at); n != 0 {
			t.Fatalf("poll at +%s, within the lease, sent %d", at.Sub(t0), n)
		}
	}
	if n := r.poll(t0.Add(lease)); n != 1 {
		t.Fatalf("poll when the lease ended sent %d, want 1", n)
	}
	recs := r.published(notifyTopic)
	if len(recs) != 1 || string(recs[0].Key) != "bob" {
		t.Fatalf("published %d records, want bob's one", len(recs))
	}
	if n := r.poll(t0.Add(3 * lease)); n != 0 {
		t.Fatalf("poll after it was sent sent %d", n)
	}
	if got := r.count(metrics.UnseenScheduled); got != 1 {
		t.Fatalf("scheduled %d, want 1 (the second Schedule added nothing)", got)
	}
	if left := r.keysLeft(); len(left) != 0 {
		t.Fatalf("keys left: %v", left)
	}
}

// An ACK of any message of an entry cancels it whole: NOTIFY_CANCELLED is
// recorded per message and platform, nothing is published when it would
// have been due, and no index field is left behind. An ACK of the same seq
// by another uid cancels nothing.
func TestCancelRemovesTheEntryAndRecords(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx := t.Context()
	t0 := time.UnixMilli(time.Now().UnixMilli())
	for _, uid := range []string{"bob", "eve"} {
		if err := r.timer.Schedule(ctx, uid, []int64{5, 6}, t0,
			[][]byte{notification(t, uid, "ios", 5, 6), notification(t, uid, "android", 5, 6)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.timer.Cancel(ctx, "bob", []int64{6, 99}); err != nil {
		t.Fatal(err)
	}
	if err := r.timer.Cancel(ctx, "bob", []int64{5}); err != nil { // already gone: no receipt, no count
		t.Fatal(err)
	}
	var got []string
	for _, m := range r.published(receiptsTopic) {
		var rc receiptpb.Receipt
		if err := proto.Unmarshal(m.Value, &rc); err != nil {
			t.Fatal(err)
		}
		if rc.GetState() != receiptpb.State_NOTIFY_CANCELLED || string(m.Key) != rc.GetUid() || rc.GetId() == "" {
			t.Fatalf("receipt %v keyed %q", &rc, m.Key)
		}
		got = append(got, fmt.Sprintf("%s/%s/%d", rc.GetUid(), rc.GetPlatform(), rc.GetSeq()))
	}
	slices.Sort(got)
	if want := []string{"bob/android/5", "bob/android/6", "bob/ios/5", "bob/ios/6"}; !slices.Equal(got, want) {
		t.Fatalf("receipts %v, want %v", got, want)
	}
	if got := r.count(metrics.UnseenCancelled); got != 2 {
		t.Fatalf("cancelled %d notifications, want 2", got)
	}
	if n := r.poll(t0); n != 2 {
		t.Fatalf("poll sent %d, want eve's 2", n)
	}
	for _, m := range r.published(notifyTopic) {
		if string(m.Key) != "eve" {
			t.Fatalf("published a notification of %q", m.Key)
		}
	}
	if left := r.keysLeft(); len(left) != 0 {
		t.Fatalf("keys left: %v", left)
	}
}

// On a Redis Cluster every operation runs on one shard's slot: a shard's
// three keys share it, and the timer schedules, cancels and publishes.
func TestTimerOnRedisCluster(t *testing.T) {
	t.Parallel()
	c := testutil.StartRedisCluster(t, 3, 0)
	r := newRig(t, c.Client(t))
	slots := map[int]bool{}
	for sh := range Shards {
		due, pay, idx := rkeys.Cluster.Unseen(sh)
		s := c.KeySlot(t, due)
		slots[s] = true
		if c.KeySlot(t, pay) != s || c.KeySlot(t, idx) != s {
			t.Fatalf("shard %d's keys in different slots", sh)
		}
	}
	if len(slots) < 8 {
		t.Fatalf("%d shards in %d slots: not spread", Shards, len(slots))
	}
	ctx := t.Context()
	t0 := time.UnixMilli(time.Now().UnixMilli())
	for i := range 20 {
		uid := fmt.Sprintf("u%d", i)
		if err := r.timer.Schedule(ctx, uid, []int64{int64(i)}, t0, [][]byte{notification(t, uid, "ios", int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if err := r.timer.Cancel(ctx, fmt.Sprintf("u%d", i), []int64{int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.poll(t0); n != 10 {
		t.Fatalf("poll sent %d, want 10", n)
	}
	if left := r.keysLeft(); len(left) != 0 {
		t.Fatalf("keys left: %v", left)
	}
}

// Entries no version of gomsg wrote (a value without its seqs' separator,
// an id without a uid, a value whose notifications do not parse) are
// dropped by the first poll that claims them, which reports them as
// corrupt, not as a Redis failure, and publishes the readable entries of
// their batch: claimed again at every lease, they would hold their shard.
func TestCorruptEntriesAreDropped(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	tm, err := New(Config{Topic: notifyTopic, Lease: lease}, zaptest.NewLogger(t), r.m, r.store, r.prod, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	t0 := time.UnixMilli(time.Now().UnixMilli())
	uid := sameShard(1)[0]
	if err := tm.Schedule(ctx, uid, []int64{1}, t0.Add(-time.Millisecond), [][]byte{notification(t, uid, "ios", 1)}); err != nil {
		t.Fatal(err)
	}
	due, pay, idx := rkeys.Of(r.rdb).Unseen(Shard(uid))
	for i, c := range []struct{ id, value string }{
		{uid + " 5", "no separator"},
		{"nospace", "6|"},
		{uid + " 7", "7|\xff"},
	} {
		if err := r.rdb.ZAdd(ctx, due, redis.Z{Score: float64(t0.UnixMilli() + int64(i)), Member: c.id}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.rdb.HSet(ctx, pay, c.id, c.value).Err(); err != nil {
			t.Fatal(err)
		}
		if err := r.rdb.HSet(ctx, idx, c.id, c.id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := tm.Poll(ctx, t0.Add(3*time.Millisecond))
	if n != 1 || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("poll: %d sent, %v; want the readable 1 and ErrCorrupt", n, err)
	}
	if e := promtest.ToFloat64(r.m.BackendErrors.WithLabelValues("redis", "unseen")); e != 0 {
		t.Fatalf("%v Redis errors counted, want 0", e)
	}
	if recs := r.published(notifyTopic); len(recs) != 1 || string(recs[0].Key) != uid {
		t.Fatalf("published %d records, want %s's 1", len(recs), uid)
	}
	if left := r.keysLeft(); len(left) != 0 {
		t.Fatalf("keys left %v, want none", left)
	}
	if n, err := tm.Poll(ctx, t0.Add(2*lease)); n != 0 || err != nil {
		t.Fatalf("poll after the lease: %d sent, %v; want 0, nil", n, err)
	}
}
