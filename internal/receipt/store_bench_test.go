package receipt_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// typical is the 3 steps of a target delivered online: ACCEPTED, then
// DELIVERED (acked, sid and boat), then — as for a target with a phone
// offline — NOTIFIED with the provider's answer. Names are as long as
// gomsg's: a 19-digit sid, an 11-byte uid.
func typical(seq int64, i int) []*receiptpb.Receipt {
	uid := fmt.Sprintf("user-%06d", i)
	at := time.Now().UnixMilli()
	return []*receiptpb.Receipt{
		{Seq: seq, Uid: uid, Platform: "ios", State: receiptpb.State_ACCEPTED, At: at},
		{Seq: seq, Uid: uid, Platform: "ios", State: receiptpb.State_DELIVERED, At: at + 12,
			Sid: strconv.FormatInt(7412233445566778899+int64(i), 10), BoatId: "boat-7f9c", Acked: true},
		{Seq: seq, Uid: uid, Platform: "ios", State: receiptpb.State_NOTIFIED, At: at + 40, Detail: "apns: 200"},
	}
}

func usedMemory(b *testing.B, r *testutil.Redis) int64 {
	b.Helper()
	info, err := r.Client(b).Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO memory")
	return 0
}

// BenchmarkStoreMemory reports Redis memory per target (3 steps): one push
// to 100,000 targets (one seq, large hash and sorted set), and 20,000
// pushes of one target each (a seq per push: small, listpack-encoded keys).
// Run: go test ./internal/receipt -run - -bench StoreMemory -benchtime 1x
func BenchmarkStoreMemory(b *testing.B) {
	for _, c := range []struct {
		name          string
		seqs, targets int
	}{{"one push to 100k targets", 1, 100000}, {"20k pushes to one target", 20000, 1}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				r := testutil.StartRedis(b)
				s := receipt.NewStore(r.Client(b))
				before := usedMemory(b, r)
				var batch []*receiptpb.Receipt
				flush := func() {
					if err := s.Write(context.Background(), time.Hour, batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
				for seq := range c.seqs {
					for i := range c.targets {
						batch = append(batch, typical(int64(1e15+seq), i)...)
						if len(batch) >= 3000 {
							flush()
						}
					}
				}
				flush()
				n := c.seqs * c.targets
				b.ReportMetric(float64(usedMemory(b, r)-before)/float64(n), "bytes/target")
				r.Stop()
			}
		})
	}
}

// BenchmarkMaterializerApply reports receipts stored per second through
// Materializer.Handle (what the consumer calls), from 64 users' handlers
// at once (the consumer's default workers), on a local redis-server.
// Run: go test ./internal/receipt -run - -bench MaterializerApply -benchtime 200000x
func BenchmarkMaterializerApply(b *testing.B) {
	r := testutil.StartRedis(b)
	var settings queue.ConsumerSettings
	settings.Defaults()
	mt, err := receipt.NewMaterializer(receipt.MaterializerConfig{Brokers: []string{"unused:9092"}, Topic: topic,
		GroupID: "bench", Retention: time.Hour, Consumer: settings}, receipt.NewStore(r.Client(b)), zap.NewNop(), metrics.New())
	if err != nil {
		b.Fatal(err)
	}
	const workers = 64
	msgs := make([][]queue.Message, workers)
	rec := receipt.New(topic, nil)
	for w := range workers {
		for i := w; i < b.N; i += workers {
			rs := typical(int64(2e15+i/3000), i)
			recs, err := rec.Records(rs[i%3])
			if err != nil {
				b.Fatal(err)
			}
			msgs[w] = append(msgs[w], queue.Message{Topic: topic, Key: recs[0].Key, Value: recs[0].Value})
		}
	}
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for _, m := range msgs[w] {
				if err := mt.Handle(context.Background(), m); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "receipts/s")
}
