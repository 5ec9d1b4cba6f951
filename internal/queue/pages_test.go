package queue

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// A record batch is read into a 64 KiB page of kafka-go's; the consumer
// gives it back once the records are copied, so a stream of lone records
// (one batch each, as lone pushes are) reuses pages instead of allocating
// one per record. Not parallel: it reads the process's allocation counter.
func TestConsumerGivesRecordPagesBack(t *testing.T) {
	const n, page = 300, 64 << 10
	brokers := startBroker(t, 1)
	p := newTestProducer(t, brokers)
	seen := newSeqRecorder()
	c := unitConsumer(t, ConsumerConfig{}, func(_ context.Context, m Message) error {
		seen.add(m.Key, parseSeq(t, m))
		return nil
	})
	_, _, _ = fetchTo(t, c, brokers, 0)

	// Warm up: the first fetches fill kafka-go's pools.
	for i := range 20 {
		publish(t, p, []Record{{Topic: testTopic, Key: "warm", Value: fmt.Appendf(nil, "warm/%d", i)}})
		seen.waitCount(t, i+1, 10*time.Second)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range n {
		// One record per produce call and each handled before the next, so
		// that every fetch reads one batch.
		publish(t, p, []Record{{Topic: testTopic, Key: "k", Value: fmt.Appendf(nil, "k/%d", i)}})
		seen.waitCount(t, 20+i+1, 10*time.Second)
	}
	runtime.ReadMemStats(&after)
	seen.mu.Lock()
	seqs := seen.byKey["k"]
	seen.mu.Unlock()
	for i, s := range seqs {
		if s != i {
			t.Fatalf("handled %v, want 0..%d in order", seqs, n-1)
		}
	}
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d lone records: %.1f KiB allocated each", n, float64(got)/1024/n)
	if got > n*page/2 {
		t.Errorf("%d lone records allocated %d KiB (%.1f KiB each): their pages were not given back (one page is %d KiB)",
			n, got>>10, float64(got)/1024/n, page>>10)
	}
}
