package unseen

import (
	"errors"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/testutil"
)

// smallTopic creates a notify topic that takes records of up to 1 KiB.
func (r *rig) smallTopic() string {
	r.t.Helper()
	const small = "t.small-notify"
	conn, err := kafka.Dial("tcp", r.brokers[0])
	if err != nil {
		r.t.Fatal(err)
	}
	err = conn.CreateTopics(kafka.TopicConfig{Topic: small, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "1024"}}})
	_ = conn.Close()
	if err != nil {
		r.t.Fatal(err)
	}
	return small
}

// An entry whose notification Kafka refuses for good (larger than the
// notify topic accepts) is dropped, counted and removed, not published
// again, with the batch around it, at every lease; the other entries of its
// batch are published once.
func TestEntryKafkaRefusesIsDroppedNotRetried(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	small := r.smallTopic()
	tm, err := New(Config{Topic: small, Lease: lease, Batch: 2}, zaptest.NewLogger(t), r.m, r.store, r.prod, receipt.New(receiptsTopic, r.prod))
	if err != nil {
		t.Fatal(err)
	}
	r.timer = tm
	ctx := t.Context()
	t0 := time.UnixMilli(time.Now().UnixMilli())
	uids := sameShard(2) // one batch
	big := notification(t, uids[0], "ios", 1)
	big = append(big, make([]byte, 2048)...) // trailing bytes: still too large, never decoded
	if err := tm.Schedule(ctx, uids[0], []int64{1}, t0, [][]byte{big}); err != nil {
		t.Fatal(err)
	}
	if err := tm.Schedule(ctx, uids[1], []int64{2}, t0, [][]byte{notification(t, uids[1], "ios", 2)}); err != nil {
		t.Fatal(err)
	}
	if n := r.poll(t0); n != 1 {
		t.Fatalf("poll sent %d, want the 1 that fits", n)
	}
	if n := r.poll(t0.Add(2 * lease)); n != 0 {
		t.Fatalf("poll after the lease sent %d again, want none", n)
	}
	if recs := r.published(small); len(recs) != 1 || string(recs[0].Key) != uids[1] {
		t.Fatalf("published %d records (%v), want one of %s", len(recs), recs, uids[1])
	}
	if d := promtest.ToFloat64(r.m.UnwritableRecords.WithLabelValues("carrier", "dropped")); d != 1 {
		t.Fatalf("dropped %v, want 1", d)
	}
	if left := r.keysLeft(); len(left) != 0 {
		t.Fatalf("keys left %v, want none", left)
	}
}

// An entry Kafka refuses for good whose removal Redis refuses (here the
// poller's Redis user may not delete) is not reported as dropped: the poll
// returns Redis's error, counted as a Redis error and not as a failed
// publish, and the entry stays, to be dropped — once — when its lease ends
// and Redis takes the removal.
func TestEntryRedisWillNotDropIsReportedAndDroppedLater(t *testing.T) {
	t.Parallel()
	srv := testutil.StartRedis(t)
	admin := srv.Client(t)
	ctx := t.Context()
	acl := func(rules ...any) {
		t.Helper()
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", "poller"}, rules...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	acl("on", ">pw", "~*", "+@all", "-zrem", "-hdel")
	poller := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "poller", Password: "pw"})
	t.Cleanup(func() { _ = poller.Close() })
	r := newRig(t, admin)
	small := r.smallTopic()
	tm, err := New(Config{Topic: small, Lease: lease, Batch: 2}, zaptest.NewLogger(t), r.m, NewStore(poller), r.prod, nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.UnixMilli(time.Now().UnixMilli())
	uid := sameShard(1)[0]
	big := append(notification(t, uid, "ios", 1), make([]byte, 2048)...)
	if err := tm.Schedule(ctx, uid, []int64{1}, t0, [][]byte{big}); err != nil {
		t.Fatal(err)
	}
	backendErrors := func(backend, op string) float64 {
		return promtest.ToFloat64(r.m.BackendErrors.WithLabelValues(backend, op))
	}
	dropped := func() float64 { return promtest.ToFloat64(r.m.UnwritableRecords.WithLabelValues("carrier", "dropped")) }
	n, err := tm.Poll(ctx, t0)
	var rerr redis.Error
	if n != 0 || !errors.As(err, &rerr) || !strings.Contains(err.Error(), "can't run this command") {
		t.Fatalf("poll with the removal refused: %d sent, %v; want 0 and Redis's refusal", n, err)
	}
	if re, ke, d := backendErrors("redis", "unseen"), backendErrors("kafka", "publish"), dropped(); re != 1 || ke != 0 || d != 0 {
		t.Fatalf("redis errors %v, kafka publish errors %v, dropped %v; want 1, 0, 0", re, ke, d)
	}
	if left := r.keysLeft(); len(left) != 3 {
		t.Fatalf("keys left %v, want the entry's 3", left)
	}
	acl("+zrem", "+hdel")
	if n := r.poll(t0.Add(lease - time.Millisecond)); n != 0 { // r's timer: the claim stands
		t.Fatalf("poll within the lease sent %d", n)
	}
	if n, err := tm.Poll(ctx, t0.Add(lease)); n != 0 || err != nil {
		t.Fatalf("poll after the lease: %d sent, %v; want 0 and the entry dropped", n, err)
	}
	if re, d := backendErrors("redis", "unseen"), dropped(); re != 1 || d != 1 {
		t.Fatalf("redis errors %v, dropped %v; want 1, 1", re, d)
	}
	if left := r.keysLeft(); len(left) != 0 {
		t.Fatalf("keys left %v, want none", left)
	}
	if recs := r.published(small); len(recs) != 0 {
		t.Fatalf("published %d records, want none", len(recs))
	}
}
