package bench

import (
	"slices"
	"sync"
	"time"
)

const latencyShards = 32

// latencies records end-to-end latencies, sharded by session so that
// receivers rarely contend.
type latencies struct {
	shards [latencyShards]struct {
		mu sync.Mutex
		v  []int64 // nanoseconds
	}
}

func newLatencies() *latencies { return &latencies{} }

func (l *latencies) add(session int, ns int64) {
	sh := &l.shards[session%latencyShards]
	sh.mu.Lock()
	sh.v = append(sh.v, ns)
	sh.mu.Unlock()
}

func (l *latencies) reset() {
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		sh.v = nil
		sh.mu.Unlock()
	}
}

// Percentiles of a latency sample, in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

func (l *latencies) percentiles() Percentiles { return percentilesOf(l.values()) }

// values returns a copy of every recorded latency.
func (l *latencies) values() []int64 {
	var all []int64
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		all = append(all, sh.v...)
		sh.mu.Unlock()
	}
	return all
}

func percentilesOf(all []int64) Percentiles {
	if len(all) == 0 {
		return Percentiles{}
	}
	slices.Sort(all)
	at := func(q float64) float64 {
		i := int(q * float64(len(all)-1))
		return float64(all[i]) / float64(time.Millisecond)
	}
	return Percentiles{Count: len(all), P50: at(0.50), P99: at(0.99), P999: at(0.999), Max: at(1)}
}

// timedLatencies records latencies with the send time of their message,
// sharded like latencies.
type timedLatencies struct {
	shards [latencyShards]struct {
		mu   sync.Mutex
		sent []int64 // unix ns
		ns   []int64
	}
}

func (l *timedLatencies) add(session int, sent, ns int64) {
	sh := &l.shards[session%latencyShards]
	sh.mu.Lock()
	sh.sent = append(sh.sent, sent)
	sh.ns = append(sh.ns, ns)
	sh.mu.Unlock()
}

// between returns the percentiles of the messages sent in [from, to].
func (l *timedLatencies) between(from, to time.Time) Percentiles {
	var v []int64
	f, t := from.UnixNano(), to.UnixNano()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for j, s := range sh.sent {
			if s >= f && s <= t {
				v = append(v, sh.ns[j])
			}
		}
		sh.mu.Unlock()
	}
	return percentilesOf(v)
}
