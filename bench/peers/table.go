package main

import (
	"fmt"
	"strings"

	"github.com/gomsg/gomsg/internal/bench"
)

// Labels of the table's rows.
var labels = map[string]string{
	GomsgGRPC:          "gomsg, gRPC stream",
	GomsgWS:            "gomsg, WebSocket",
	GomsgMQTT:          "gomsg, MQTT 5 QoS 1",
	GomsgNATS:          "gomsg on NATS JetStream, gRPC stream",
	CentrifugoMemory:   "Centrifugo, memory engine",
	CentrifugoRedis:    "Centrifugo, Redis engine",
	CentrifugoRecovery: "Centrifugo, Redis engine, history+recovery",
	Mosquitto:          "Mosquitto, MQTT 5 QoS 1, persistent sessions",
}

type stat struct {
	mean, min, max float64
	n              int
}

// mean is f over the successful load steps of one system and kind.
func mean(steps []Step, sys, kind string, f func(*bench.LoadResult) float64) (stat, bool) {
	var s stat
	for _, st := range steps {
		if st.System != sys || st.Kind != kind || st.Error != "" || st.Load == nil {
			continue
		}
		v := f(st.Load)
		if s.n == 0 || v < s.min {
			s.min = v
		}
		if s.n == 0 || v > s.max {
			s.max = v
		}
		s.mean += v
		s.n++
	}
	if s.n == 0 {
		return s, false
	}
	s.mean /= float64(s.n)
	return s, true
}

// Row is one system's line of the table.
type Row struct {
	System string
	// DeliveredPerSec is the mean of the throughput rounds; P50 and P99
	// (ms) of the latency rounds; CPUPerMsg (µs, backends included) of the
	// throughput rounds; IdleKB of the idle step. ok false: not measured.
	DeliveredPerSec, P50, P99, CPUPerMsg, IdleKB stat
	HasDelivered, HasLatency, HasCPU, HasIdle    bool
	Idle                                         *bench.MemorySample
	// Over every load step of the system.
	Pushed, Delivered, Missing, Duplicates, Errors, Disconnects, WrongTarget int64
	Guarantee                                                                string
	Failed                                                                   []string
	// Paced runs that did not keep their rate: "kept 6,468 of 7,313/s".
	Slow []string
}

// Rows sums up the steps per system, in the configured order.
func (c *Comparison) Rows() []Row {
	var rows []Row
	for _, sys := range c.Config.Systems {
		r := Row{System: sys}
		r.DeliveredPerSec, r.HasDelivered = mean(c.Steps, sys, KindThroughput, func(l *bench.LoadResult) float64 { return l.DeliveriesPerSec })
		r.CPUPerMsg, r.HasCPU = mean(c.Steps, sys, KindThroughput, func(l *bench.LoadResult) float64 { return l.CPUPerMsgWithBackUS })
		r.P50, r.HasLatency = mean(c.Steps, sys, KindLatency, func(l *bench.LoadResult) float64 { return l.Latency.P50 })
		r.P99, _ = mean(c.Steps, sys, KindLatency, func(l *bench.LoadResult) float64 { return l.Latency.P99 })
		for _, st := range c.Steps {
			if st.System != sys {
				continue
			}
			if st.Error != "" {
				r.Failed = append(r.Failed, fmt.Sprintf("%s #%d", st.Kind, st.Round))
			}
			if l := st.Load; l != nil {
				r.Pushed += l.Pushed
				r.Delivered += l.Delivered
				r.Missing += l.Missing
				r.Duplicates += l.Duplicates
				r.Errors += l.PushErrors
				r.Disconnects += l.Ended + l.Kickouts
				r.WrongTarget += l.WrongTarget + l.Unexpected
				if r.Guarantee == "" {
					r.Guarantee = l.MsgOptions
				}
				if st.Kind == KindLatency && l.TargetRate > 0 && l.PushesPerSec < 0.95*l.TargetRate {
					r.Slow = append(r.Slow, fmt.Sprintf("kept %.0f of %.0f/s", l.PushesPerSec, l.TargetRate))
				}
			}
			if st.Kind == KindIdle && st.Memory != nil && st.Error == "" {
				r.Idle, r.HasIdle = st.Memory, true
			}
		}
		if strings.HasPrefix(sys, "gomsg") && r.Guarantee != "" {
			r.Guarantee = "at least once, ACKed: " + r.Guarantee
		}
		rows = append(rows, r)
	}
	return rows
}

// Markdown is the side-by-side table with a line on how it was measured.
func (c *Comparison) Markdown() string {
	var b strings.Builder
	cfg := c.Config
	fmt.Fprintf(&b, "`%s`\n\n", c.Command)
	var vs []string
	for _, k := range []string{"gomsg", "centrifugo", "mosquitto", "redis"} {
		if v, ok := c.Versions[k]; ok {
			vs = append(vs, v)
		}
	}
	m := c.Machine
	fmt.Fprintf(&b, "%s — %s. %d × %s, %s; load average %s at the start, %s at the end. "+
		"%d sessions (one connection each), %s window after %s warm-up, %d callers when saturated, %d alternating round(s); "+
		"figures are the mean (min–max) of the rounds. delivered/s: messages received in the window (gomsg: and ACKed) ÷ window; "+
		"p50/p99: publish call start → receipt, at half of each system's own saturation; idle KB: RSS growth of the process "+
		"holding the connections ÷ sessions (%d, fresh process); CPU µs/msg: the system's processes with their backends "+
		"(gomsg: boat, station, carrier, the Kafka/etcd process, redis-server; Centrifugo: + redis-server) in the saturated "+
		"window ÷ messages delivered in it. The load tool runs on the same cores.\n\n",
		c.Date, strings.Join(vs, "; "), m.CPUs, m.Model, m.MemTotal, strings.TrimSpace(c.LoadAvg[0]), strings.TrimSpace(c.LoadAvg[1]),
		cfg.Sessions, cfg.Duration, cfg.Warmup, cfg.Concurrency, cfg.Rounds, cfg.IdleSessions)
	b.WriteString("| system | delivered/s | p50 | p99 | idle KB/session | CPU µs/msg with backends | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range c.Rows() {
		delivered, p50, p99, idle, cpu := "—", "—", "—", "—", "—"
		if r.HasDelivered {
			delivered = spread(r.DeliveredPerSec, "%.0f", "")
		}
		if r.HasLatency {
			p50, p99 = spread(r.P50, "%.2f", " ms"), spread(r.P99, "%.1f", " ms")
		}
		if r.HasCPU {
			cpu = spread(r.CPUPerMsg, "%.1f", "")
		}
		if r.HasIdle {
			mm := r.Idle
			idle = fmt.Sprintf("%.1f", mm.RSSPerSession/1024)
			if mm.HeapPerSession != 0 || mm.StackPerSession != 0 {
				idle += fmt.Sprintf(" (heap %.1f, stacks %.1f)", mm.HeapPerSession/1024, mm.StackPerSession/1024)
			} else {
				idle += " (RSS only)"
			}
		}
		notes := []string{r.Guarantee}
		notes = append(notes, fmt.Sprintf("%d pushed, %d delivered, missing %d, dup %d, errors %d, disconnects %d",
			r.Pushed, r.Delivered, r.Missing, r.Duplicates, r.Errors, r.Disconnects))
		if r.WrongTarget > 0 {
			notes = append(notes, fmt.Sprintf("**%d wrong or unexpected**", r.WrongTarget))
		}
		notes = append(notes, r.Slow...)
		if len(r.Failed) > 0 {
			notes = append(notes, "**failed: "+strings.Join(r.Failed, ", ")+"**")
		}
		// A cell's | (NEED_ACK|NEED_OFFLINE) would end the cell.
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", labels[r.System], delivered, p50, p99, idle, cpu,
			strings.ReplaceAll(strings.Join(nonEmpty(notes), "; "), "|", `\|`))
	}
	return b.String()
}

// spread prints a mean, with (min–max) when there was more than one round.
func spread(s stat, format, unit string) string {
	out := fmt.Sprintf(format, s.mean) + unit
	if s.n > 1 {
		out += fmt.Sprintf(" ("+format+"–"+format+")", s.min, s.max)
	}
	return out
}

func nonEmpty(v []string) []string {
	var out []string
	for _, s := range v {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
