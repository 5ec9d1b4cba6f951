package receipt_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

const topic = "gomsg.receipts"

// rig is a materializer consuming the in-process Kafka broker into a real
// redis-server, and a recorder publishing to it.
type rig struct {
	redis *testutil.Redis
	store *receipt.Store
	rec   *receipt.Recorder
	prod  *queue.Producer
	m     *metrics.Metrics
}

// startMaterializer runs the rig on a database of the shared redis-server,
// or, with ownRedis, on a redis-server of its own (to stop it).
func startMaterializer(t *testing.T, ownRedis bool) *rig {
	t.Helper()
	var r *testutil.Redis
	var rdb redis.UniversalClient
	if ownRedis {
		r = testutil.StartRedis(t)
		rdb = r.Client(t)
	} else {
		rdb = testutil.SharedRedis(t)
	}
	brokers := []string{testutil.StartKafka(t, 4, topic)}
	log := zaptest.NewLogger(t)
	prod := queue.NewProducer(queue.ProducerConfig{Brokers: brokers}, log)
	t.Cleanup(func() { _ = prod.Close() })
	g := &rig{redis: r, store: receipt.NewStore(rdb), rec: receipt.New(topic, prod), prod: prod, m: metrics.New()}
	var settings queue.ConsumerSettings
	settings.Defaults()
	mt, err := receipt.NewMaterializer(receipt.MaterializerConfig{Brokers: brokers, Topic: topic, GroupID: "gomsg-carrier-receipts",
		Retention: time.Hour, Consumer: settings}, g.store, log, g.m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mt.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("materializer: %v", err)
		}
	})
	return g
}

// record publishes receipts of seq: per uid an ACCEPTED and a DELIVERED.
func (g *rig) record(t *testing.T, seq int64, uids int) {
	t.Helper()
	var rs []*receiptpb.Receipt
	for i := range uids {
		uid := fmt.Sprintf("u%03d", i)
		rs = append(rs, &receiptpb.Receipt{Seq: seq, Uid: uid, Platform: "ios", State: receiptpb.State_ACCEPTED, At: 1000},
			&receiptpb.Receipt{Seq: seq, Uid: uid, Platform: "ios", State: receiptpb.State_DELIVERED, At: 1001, Sid: "s-" + uid, BoatId: "boat-1", Acked: true})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := g.rec.Record(ctx, rs...); err != nil {
		t.Fatal(err)
	}
}

// waitStored waits until seq shows uids targets, each ACCEPTED then
// DELIVERED.
func (g *rig) waitStored(t *testing.T, seq int64, uids int) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, func() error {
		p, err := g.store.Get(context.Background(), seq, "", 1000, "")
		if err != nil {
			return err
		}
		if len(p.Targets) != uids {
			return fmt.Errorf("seq %d: %d targets, want %d", seq, len(p.Targets), uids)
		}
		for _, tg := range p.Targets {
			if tg.State != receiptpb.State_DELIVERED || len(tg.Steps) != 2 || !tg.Steps[1].Acked {
				return fmt.Errorf("%s: %v", tg.Uid, tg)
			}
		}
		return nil
	})
}

// Receipts published with the Recorder show in the store, each step once
// though published twice.
func TestMaterializerStoresReceipts(t *testing.T) {
	t.Parallel()
	g := startMaterializer(t, false)
	g.record(t, 100, 200)
	g.record(t, 100, 200) // every step again
	g.waitStored(t, 100, 200)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := promtest.ToFloat64(g.m.ReceiptsApplied); n != 800 {
			return fmt.Errorf("applied %v, want 800", n)
		}
		return nil
	})
	if n := promtest.ToFloat64(g.m.ReceiptsSkipped); n != 0 {
		t.Fatalf("skipped %v, want 0", n)
	}
}

// A record that is not a receipt, or a receipt the store does not keep, is
// counted and skipped; the records after it are stored.
func TestMaterializerSkipsUndecodable(t *testing.T) {
	t.Parallel()
	g := startMaterializer(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	bad, err := g.rec.Records(&receiptpb.Receipt{Seq: 5, Uid: "u000", State: receiptpb.State_ACCEPTED}) // no platform
	if err != nil {
		t.Fatal(err)
	}
	if err := g.prod.Publish(ctx, queue.Record{Topic: topic, Key: "u000", Value: []byte("\xff\xff not a receipt")}, bad[0]); err != nil {
		t.Fatal(err)
	}
	g.record(t, 5, 1)
	g.waitStored(t, 5, 1)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := promtest.ToFloat64(g.m.ReceiptsSkipped); n != 2 {
			return fmt.Errorf("skipped %v, want 2", n)
		}
		return nil
	})
}

// While Redis is down the writes fail and are retried, the records stay
// uncommitted; once Redis is back every receipt is stored.
func TestMaterializerWaitsForRedis(t *testing.T) {
	t.Parallel()
	g := startMaterializer(t, true)
	g.redis.Stop()
	g.record(t, 77, 50)
	testutil.WaitFor(t, 20*time.Second, func() error {
		if n := promtest.ToFloat64(g.m.ReceiptsStoreErrors); n < 2 {
			return fmt.Errorf("store errors %v, want at least 2 (retries)", n)
		}
		return nil
	})
	if n := promtest.ToFloat64(g.m.ReceiptsApplied); n != 0 {
		t.Fatalf("applied %v with Redis down", n)
	}
	if err := g.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	g.waitStored(t, 77, 50)
}
