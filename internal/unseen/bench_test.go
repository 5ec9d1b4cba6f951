package unseen

import (
	"strconv"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
)

// BenchmarkUnseen measures what notify-if-unseen costs per message (one
// uid, one message, two notifications of ~60 bytes: iOS and Android) on a
// real redis-server and the in-process Kafka broker, sequentially:
//
//	go test -run x -bench Unseen -benchtime 20000x ./internal/unseen
//
// publish_at_once is the baseline, what carrier does without the option:
// one Publish of the two records. schedule is one Schedule (EVALSHA of
// schedule.lua), what carrier does instead. schedule_claim_publish adds
// the poller's share: b.N messages are scheduled due now, then one Poll
// claims them (claim.lua, 256 a call), publishes each claim in one Publish
// and removes it (done.lua). cancel is a Cancel of a scheduled message with
// receipts on (peek.lua, NOTIFY_CANCELLED receipts published, cancel.lua),
// what an ACK of a notify-if-unseen message adds to its replay page or
// retry; cancel_miss a Cancel that finds nothing (peek.lua), what every
// ACKed replay page pays.
func BenchmarkUnseen(b *testing.B) {
	r := newRig(b, nil)
	ctx := b.Context()
	tm, err := New(Config{Topic: notifyTopic}, zap.NewNop(), metrics.New(), r.store, r.prod, nil)
	if err != nil {
		b.Fatal(err)
	}
	notes := func(uid string, seq int64) [][]byte {
		return [][]byte{notification(b, uid, "ios", seq), notification(b, uid, "android", seq)}
	}
	var seq int64
	b.Run("publish_at_once", func(b *testing.B) {
		for b.Loop() {
			seq++
			uid := "p" + strconv.FormatInt(seq, 10)
			ns := notes(uid, seq)
			if err := r.prod.Publish(ctx, queue.Record{Topic: notifyTopic, Key: uid, Value: ns[0]},
				queue.Record{Topic: notifyTopic, Key: uid, Value: ns[1]}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("schedule", func(b *testing.B) {
		now := time.Now().Add(time.Hour) // not due: only the write is measured
		for b.Loop() {
			seq++
			uid := "s" + strconv.FormatInt(seq, 10)
			if err := tm.Schedule(ctx, uid, []int64{seq}, now, notes(uid, seq)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("schedule_claim_publish", func(b *testing.B) {
		now := time.Now()
		n := 0
		for b.Loop() {
			seq++
			uid := "c" + strconv.FormatInt(seq, 10)
			if err := tm.Schedule(ctx, uid, []int64{seq}, now, notes(uid, seq)); err != nil {
				b.Fatal(err)
			}
			n++
		}
		// b.Loop's timer stops at its end: the poller's share is timed
		// here and added.
		start := time.Now()
		sent, err := tm.Poll(ctx, now)
		if err != nil || sent != 2*n {
			b.Fatalf("poll sent %d, %v; want %d", sent, err, 2*n)
		}
		poll := time.Since(start)
		b.ReportMetric(float64(poll.Nanoseconds())/float64(n), "poll-ns/msg")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds()+poll.Nanoseconds())/float64(n), "total-ns/msg")
	})
	rec := newRig(b, r.rdb) // receipts on, on the same Redis
	rec.timer.log = zap.NewNop()
	b.Run("cancel_miss", func(b *testing.B) {
		for b.Loop() {
			seq++
			if err := rec.timer.Cancel(ctx, "m"+strconv.FormatInt(seq, 10), []int64{seq}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cancel", func(b *testing.B) {
		due := time.Now().Add(time.Hour)
		var seqs []int64
		for range b.N {
			seq++
			uid := "x" + strconv.FormatInt(seq, 10)
			if err := rec.timer.Schedule(ctx, uid, []int64{seq}, due, notes(uid, seq)); err != nil {
				b.Fatal(err)
			}
			seqs = append(seqs, seq)
		}
		b.ResetTimer()
		for i := range b.N {
			if err := rec.timer.Cancel(ctx, "x"+strconv.FormatInt(seqs[i], 10), seqs[i:i+1]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
