package timewheel

import (
	"testing"
	"time"
)

const benchOutstanding = 100_000

// prefilled returns a wheel shaped like boat's ACK wheel (1s tick) holding
// benchOutstanding entries spread over an hour.
func prefilled(tb testing.TB) *Wheel {
	tb.Helper()
	w := New(time.Second, 512)
	fn := func() {}
	for i := range benchOutstanding {
		w.Add(time.Duration(i%3600)*time.Second, fn)
	}
	if got := w.Len(); got != benchOutstanding {
		tb.Fatalf("Len = %d, want %d", got, benchOutstanding)
	}
	return w
}

// BenchmarkAddStop measures one Add and one Stop (an ACK that arrives in time)
// on a wheel with 100,000 outstanding entries.
func BenchmarkAddStop(b *testing.B) {
	w := prefilled(b)
	fn := func() {}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if !w.Add(15*time.Second+time.Duration(i%1000)*time.Millisecond, fn).Stop() {
			b.Fatal("Stop = false, want true")
		}
		i++
	}
}

// BenchmarkAddStopParallel is BenchmarkAddStop from GOMAXPROCS goroutines,
// showing the cost of the single mutex under contention.
func BenchmarkAddStopParallel(b *testing.B) {
	w := prefilled(b)
	fn := func() {}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !w.Add(15*time.Second, fn).Stop() {
				b.Error("Stop = false, want true")
				return
			}
		}
	})
}

// BenchmarkMemory100k reports the live heap per outstanding entry with
// 100,000 entries outstanding and a shared callback.
func BenchmarkMemory100k(b *testing.B) {
	var perEntry float64
	for b.Loop() {
		perEntry, _ = heapPerEntry(benchOutstanding)
	}
	b.ReportMetric(perEntry, "bytes/entry")
}
