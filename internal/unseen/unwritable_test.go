package unseen

import (
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/receipt"
)

// An entry whose notification Kafka refuses for good (larger than the
// notify topic accepts) is dropped, counted and removed, not published
// again, with the batch around it, at every lease; the other entries of its
// batch are published once.
func TestEntryKafkaRefusesIsDroppedNotRetried(t *testing.T) {
	t.Parallel()
	const small = "t.small-notify"
	r := newRig(t, nil)
	conn, err := kafka.Dial("tcp", r.brokers[0])
	if err != nil {
		t.Fatal(err)
	}
	err = conn.CreateTopics(kafka.TopicConfig{Topic: small, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "1024"}}})
	_ = conn.Close()
	if err != nil {
		t.Fatal(err)
	}
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
