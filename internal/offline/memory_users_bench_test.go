package offline

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/gomsg/gomsg/internal/testutil"
)

// BenchmarkMemoryBacklogs measures what stored offline messages cost in
// Redis memory when many users each hold a short backlog, the common case
// (BenchmarkMemory has one long list and one message for many users): the
// growth of INFO memory used_memory while users × msgs messages are written
// through Store.Write, each message to one user and one platform, with the
// expiry and maximum count of the default ios policy (168 h, 100). Bodies of
// 128 B and 1 KiB; uids of 15 characters. On a standalone server:
//
//	go test -run x -bench MemoryBacklogs -benchtime 1x ./internal/offline
func BenchmarkMemoryBacklogs(b *testing.B) {
	rdb := testutil.StartRedis(b).Client(b)
	s := New(rdb)
	policy := Policy{Store: true, Expiry: 168 * time.Hour, MaxCount: 100}
	const users, msgs = 10_000, 10
	for _, size := range []int{128, 1024} {
		body := bytes.Repeat([]byte("b"), size)
		b.Run(fmt.Sprintf("users=%d/msgs=%d/body=%d", users, msgs, size), func(b *testing.B) {
			var delta int64
			for b.Loop() {
				testutil.FlushAll(b, rdb)
				before := testutil.UsedMemory(b, rdb)
				ts := time.Now().UnixMilli()
				var g errgroup.Group
				g.SetLimit(32)
				for u := range users {
					g.Go(func() error {
						items := make([]Item, msgs)
						for i := range items {
							seq := 1<<40 + int64(u*msgs+i)
							items[i] = Item{Platform: "ios", Policy: policy, Msg: Message{Seq: seq, Timestamp: ts + int64(i), Body: body}}
						}
						_, err := s.Write(b.Context(), fmt.Sprintf("user-%010d", u), items)
						return err
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
				n, err := rdb.DBSize(b.Context()).Result()
				if err != nil || n != users*(1+2*msgs) {
					b.Fatalf("%d keys, want %d (a list per user, a body and a count per message): %v", n, users*(1+2*msgs), err)
				}
				delta = testutil.UsedMemory(b, rdb) - before
			}
			b.ReportMetric(float64(delta)/float64(users*msgs), "B/msg")
		})
	}
}
