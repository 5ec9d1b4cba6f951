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
// sharded like latencies, and the part of each spent before station took
// the message (its accept timestamp, in milliseconds).
type timedLatencies struct {
	shards [latencyShards]struct {
		mu   sync.Mutex
		sent []int64 // unix ns
		ns   []int64
		// toStation is from the send to station's accept timestamp, ns;
		// that timestamp is truncated to the millisecond, so it may read
		// up to 1 ms early (never below 0 here).
		toStation []int64
	}
}

func (l *timedLatencies) add(session int, sent, ns, stationMs int64) {
	sh := &l.shards[session%latencyShards]
	sh.mu.Lock()
	sh.sent = append(sh.sent, sent)
	sh.ns = append(sh.ns, ns)
	sh.toStation = append(sh.toStation, min(ns, max(0, stationMs*int64(time.Millisecond)-sent)))
	sh.mu.Unlock()
}

// between returns the percentiles of the messages sent in [from, to].
func (l *timedLatencies) between(from, to time.Time) Percentiles {
	return l.stagesBetween(from, to).Total
}

// Stages splits the latencies of a group of messages at station's accept
// timestamp: the Push call up to station (the client's gRPC call, station's
// gRPC server and its checks), and the rest (Kafka, carrier, boat, the
// device's stream). Each is its own distribution: the two p99s need not
// come from the same messages, and do not add up to the total's.
type Stages struct {
	Total        Percentiles `json:"total"`
	ToStation    Percentiles `json:"to_station"`
	AfterStation Percentiles `json:"after_station"`
}

// stagesBetween returns the stages of the messages sent in [from, to].
func (l *timedLatencies) stagesBetween(from, to time.Time) Stages {
	var total, toStation, after []int64
	f, t := from.UnixNano(), to.UnixNano()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for j, s := range sh.sent {
			if s >= f && s <= t {
				total = append(total, sh.ns[j])
				toStation = append(toStation, sh.toStation[j])
				after = append(after, sh.ns[j]-sh.toStation[j])
			}
		}
		sh.mu.Unlock()
	}
	return Stages{Total: percentilesOf(total), ToStation: percentilesOf(toStation), AfterStation: percentilesOf(after)}
}

// Slice is the latencies of the messages sent in one slice of a span.
type Slice struct {
	FromSeconds float64 `json:"from_s"` // the slice's start, from the span's
	Stages
}

// sliced returns the stages of the messages sent in each step-long slice
// of [from, to]: where in a span its slow messages were sent.
func (l *timedLatencies) sliced(from, to time.Time, step time.Duration) []Slice {
	var out []Slice
	for at := from; at.Before(to); at = at.Add(step) {
		end := at.Add(step).Add(-1) // stagesBetween includes both ends
		if !end.Before(to) {
			end = to // the last slice ends where the span does, inclusive
		}
		out = append(out, Slice{FromSeconds: at.Sub(from).Seconds(), Stages: l.stagesBetween(at, end)})
	}
	return out
}
