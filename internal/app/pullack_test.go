package app

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/internal/unseen"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// A device's ACK through Pull records REPLAYED only for the messages that
// asked for receipts (those carrier tracked as it stored them), although
// station knows their seqs alone; and forgets them once recorded.
func TestPullAckRecordsReceiptsOfTrackedSeqsOnly(t *testing.T) {
	t.Parallel()
	const topic = "t.receipts"
	rdb := testutil.SharedRedis(t)
	broker := testutil.StartKafka(t, 1, topic, "t.notify")
	log := zaptest.NewLogger(t)
	prod := queue.NewProducer(queue.ProducerConfig{Brokers: []string{broker}}, log)
	t.Cleanup(func() { _ = prod.Close() })
	rec := receipt.New(topic, prod)
	tracked := receipt.NewTracked(rdb)
	timer, err := unseen.New(unseen.Config{Topic: "t.notify"}, log, metrics.New(), unseen.NewStore(rdb), prod, rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	now := time.Now().UnixMilli()
	if err := tracked.Add(ctx, "u1", "ios", time.Hour, receipt.TrackedMsg{Seq: 2, SentAt: now}, receipt.TrackedMsg{Seq: 4, SentAt: now}); err != nil {
		t.Fatal(err)
	}
	hook := pullAcked(rec, tracked, timer)
	if err := hook(ctx, "u1", "ios", "s1", "b1", []int64{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	// Seq 4 again, and 3: nothing more to record.
	if err := hook(ctx, "u1", "ios", "s1", "b1", []int64{3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := prod.Publish(ctx, queue.Record{Topic: topic, Key: "end", Value: []byte("end")}); err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic, Partition: 0, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var seqs []int64
	for {
		m, err := r.ReadMessage(rctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Key) == "end" {
			break
		}
		var rc receiptpb.Receipt
		if err := proto.Unmarshal(m.Value, &rc); err != nil {
			t.Fatal(err)
		}
		if rc.GetState() != receiptpb.State_REPLAYED || rc.GetSid() != "s1" || rc.GetDetail() != "pulled" {
			t.Fatalf("receipt %v, want REPLAYED pulled by s1", &rc)
		}
		seqs = append(seqs, rc.GetSeq())
	}
	if len(seqs) != 2 || seqs[0] != 2 || seqs[1] != 4 {
		t.Fatalf("REPLAYED receipts of seqs %v, want [2 4]: the tracked ones, once", seqs)
	}
	if left, err := tracked.Filter(ctx, "u1", "ios", []int64{1, 2, 3, 4}); err != nil || len(left) != 0 {
		t.Fatalf("still tracked %v, %v; want none", left, err)
	}
}
