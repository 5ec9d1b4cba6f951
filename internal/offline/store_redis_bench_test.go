package offline

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
)

// BenchmarkWrite compares Store.Write (one pipeline: an EVALSHA of write.lua
// per message, then clean.lua for the platform) with bare pipelined EVALSHAs
// of write.lua, for batches of 10 messages to one user, a new user each batch,
// on one real redis-server.
func BenchmarkWrite(b *testing.B) {
	rdb := testutil.StartRedis(b).Client(b)
	const batch = 10
	body := bytes.Repeat([]byte("x"), 128)
	policy := Policy{Store: true, Expiry: time.Hour, MaxCount: 100}

	var storeBatches int64
	b.Run("store", func(b *testing.B) {
		s := New(rdb)
		items := make([]Item, batch)
		n := 0
		for b.Loop() {
			storeBatches++
			uid := "store-" + strconv.FormatInt(storeBatches, 10)
			ts := time.Now().UnixMilli()
			for j := range items {
				items[j] = Item{Platform: "ios", Policy: policy,
					Msg: Message{Seq: 1<<40 + storeBatches*batch + int64(j), Timestamp: ts, Body: body}}
			}
			added, err := s.Write(b.Context(), uid, items)
			if err != nil || added != batch {
				b.Fatalf("Write added %d of %d: %v", added, batch, err)
			}
			n += batch
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
	})

	var rawBatches int64
	b.Run("raw_evalsha", func(b *testing.B) {
		script := redis.NewScript(writeLua)
		if err := script.Load(b.Context(), rdb).Err(); err != nil {
			b.Fatal(err)
		}
		keys := rkeys.Standalone
		ms := strconv.FormatInt(policy.Expiry.Milliseconds(), 10)
		cmds := make([]*redis.Cmd, batch)
		n := 0
		for b.Loop() {
			rawBatches++
			uid := "raw-" + strconv.FormatInt(rawBatches, 10)
			ts := time.Now().UnixMilli()
			_, err := rdb.Pipelined(b.Context(), func(p redis.Pipeliner) error {
				for j := range cmds {
					seq := 2<<40 + rawBatches*batch + int64(j)
					cmds[j] = script.EvalSha(b.Context(), p,
						[]string{keys.Offline(uid, "ios"), keys.Body(uid, seq), keys.Count(uid, seq)},
						itoa(ts), itoa(seq), body, itoa(ts+policy.Expiry.Milliseconds()), ms)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			for _, c := range cmds {
				if v, err := c.Int(); err != nil || v != 1 {
					b.Fatalf("write.lua = %d: %v", v, err)
				}
			}
			n += batch
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
	})
}

// BenchmarkWriteParallel measures offline writes per second through
// Store.Write from many goroutines (8 per GOMAXPROCS), each writing batches
// of 10 messages of 128 B to a user of its own (a new user every 100
// batches), on a redis-server, a Redis Cluster of one master and one of
// three masters, started in the same run:
//
//	go test -run x -bench WriteParallel -benchtime 3s -count 3 ./internal/offline
//
// Every server runs on the machine the benchmark runs on, so on a small
// machine the three masters compete with each other and with the client for
// the same cores.
func BenchmarkWriteParallel(b *testing.B) {
	const batch = 10
	body := bytes.Repeat([]byte("x"), 128)
	policy := Policy{Store: true, Expiry: time.Hour, MaxCount: 1000}
	targets := []struct {
		name  string
		start func(b *testing.B) redis.UniversalClient
	}{
		{"standalone", func(b *testing.B) redis.UniversalClient { return testutil.StartRedis(b).Client(b) }},
		{"cluster-1", func(b *testing.B) redis.UniversalClient { return testutil.StartRedisCluster(b, 1, 0).Client(b) }},
		{"cluster-3", func(b *testing.B) redis.UniversalClient { return testutil.StartRedisCluster(b, 3, 0).Client(b) }},
	}
	for _, tg := range targets {
		rdb := tg.start(b)
		s := New(rdb)
		var workers, seqs atomic.Int64
		b.Run(tg.name, func(b *testing.B) {
			testutil.FlushAll(b, rdb)
			b.ResetTimer()
			b.SetParallelism(8)
			var writes atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				w := workers.Add(1)
				items := make([]Item, batch)
				for i := 0; pb.Next(); i++ {
					uid := "w" + strconv.FormatInt(w, 10) + "-" + strconv.Itoa(i/100)
					ts := time.Now().UnixMilli()
					base := seqs.Add(batch)
					for j := range items {
						items[j] = Item{Platform: "ios", Policy: policy,
							Msg: Message{Seq: base + int64(j), Timestamp: ts, Body: body}}
					}
					if added, err := s.Write(context.Background(), uid, items); err != nil || added != batch {
						b.Errorf("Write added %d of %d: %v", added, batch, err)
						return
					}
					writes.Add(1)
				}
			})
			b.ReportMetric(float64(writes.Load())/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(writes.Load()*batch)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkMemory measures what stored offline messages cost in Redis
// memory: the growth of INFO memory used_memory (summed over a cluster's
// masters) while m messages of a 1 KiB body are written to k users, on one
// ios list each (no maximum, so every list is a skiplist zset past 128
// members). On a standalone Redis a body is shared by the k users; on a
// cluster each user keeps its own. One iteration is one measurement:
//
//	go test -run x -bench Memory -benchtime 1x ./internal/offline
func BenchmarkMemory(b *testing.B) {
	body := bytes.Repeat([]byte("b"), 1024)
	policy := Policy{Store: true, Expiry: time.Hour}
	layouts := []struct {
		name  string
		start func(b *testing.B) redis.UniversalClient
	}{
		{"standalone", func(b *testing.B) redis.UniversalClient { return testutil.StartRedis(b).Client(b) }},
		{"cluster", func(b *testing.B) redis.UniversalClient { return testutil.StartRedisCluster(b, 3, 0).Client(b) }},
	}
	for _, l := range layouts {
		rdb := l.start(b)
		s := New(rdb)
		for _, size := range []struct{ k, m int }{{1, 10_000}, {100, 1000}} {
			b.Run(fmt.Sprintf("%s/users=%d/msgs=%d", l.name, size.k, size.m), func(b *testing.B) {
				var delta int64
				for b.Loop() {
					testutil.FlushAll(b, rdb)
					before := testutil.UsedMemory(b, rdb)
					ts := time.Now().UnixMilli()
					for u := range size.k {
						uid := "user-" + strconv.Itoa(u)
						for start := 0; start < size.m; start += 100 {
							var items []Item
							for seq := start; seq < min(start+100, size.m); seq++ {
								items = append(items, Item{Platform: "ios", Policy: policy,
									Msg: Message{Seq: 1<<40 + int64(seq), Timestamp: ts + int64(seq), Body: body}})
							}
							if _, err := s.Write(b.Context(), uid, items); err != nil {
								b.Fatal(err)
							}
						}
					}
					delta = testutil.UsedMemory(b, rdb) - before
				}
				b.ReportMetric(float64(delta)/float64(size.k*size.m), "B/msg-user")
				b.ReportMetric(float64(delta)/float64(size.m), "B/msg")
			})
		}
	}
}

// BenchmarkReplayPage is one offline page's life on a standalone Redis: 50
// messages written for one user, read as one page, deleted after the ACK.
// It compares store versions (BENCHMARKS.md: Read became ZRANGEBYSCORE then
// MGET, and Delete names every body and count key, for Redis Cluster).
func BenchmarkReplayPage(b *testing.B) {
	r := testutil.StartRedis(b)
	s := New(r.Client(b))
	ctx := context.Background()
	pol := Policy{Store: true, Expiry: time.Hour}
	body := make([]byte, 256)
	now := time.Now()
	var seq int64
	b.ResetTimer()
	for range b.N {
		items := make([]Item, 50)
		for i := range items {
			seq++
			items[i] = Item{Platform: "ios", Policy: pol, Msg: Message{Seq: seq, Timestamp: now.UnixMilli(), Body: body}}
		}
		if _, err := s.Write(ctx, "alice", items); err != nil {
			b.Fatal(err)
		}
		msgs, err := s.Read(ctx, "alice", "ios", time.Now(), time.Hour, 50)
		if err != nil || len(msgs) != 50 {
			b.Fatalf("read %d, %v", len(msgs), err)
		}
		seqs := make([]int64, len(msgs))
		for i, m := range msgs {
			seqs[i] = m.Seq
		}
		if err := s.Delete(ctx, "alice", "ios", seqs); err != nil {
			b.Fatal(err)
		}
	}
}
