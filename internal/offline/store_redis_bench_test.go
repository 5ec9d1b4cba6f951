package offline

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
						[]string{UserKey(uid, "ios"), BodyKey(seq), CountKey(seq)},
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
