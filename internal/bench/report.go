package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Report is what one scenario measured.
type Report struct {
	Scenario       string      `json:"scenario"`
	Transport      string      `json:"transport"` // the device sessions': grpc or ws
	Date           string      `json:"date"`
	Command        string      `json:"command"`
	Machine        Machine     `json:"machine"`
	StreamsPerConn int         `json:"streams_per_conn"`
	Concurrency    int         `json:"concurrency"`
	WindowSeconds  float64     `json:"window_seconds"`
	Runs           []RunResult `json:"runs"`
	// BaselineRuns were measured interleaved with the system runs (before
	// and after them); Baselines is their mean.
	BaselineRuns []Baselines `json:"baseline_runs,omitempty"`
	Baselines    Baselines   `json:"baselines"`
	Targets      []Target    `json:"targets,omitempty"`
	// KafkaAtRate is the Kafka baseline paced at the latency run's rate.
	KafkaAtRate *RateBaseline `json:"kafka_at_rate,omitempty"`
	// TLSCost is the plaintext/TLS comparison of a CompareTLS run.
	TLSCost []TLSCost `json:"tls_cost,omitempty"`
}

// RateBaseline is a baseline run at a fixed rate.
type RateBaseline struct {
	Rate   float64 `json:"rate"`
	PerSec float64 `json:"per_sec"`
	P99MS  float64 `json:"p99_ms"`
}

// RunResult is one measured configuration.
type RunResult struct {
	Label    string        `json:"label"`
	Mode     string        `json:"mode,omitempty"`  // CompareTLS: plaintext or tls
	Round    int           `json:"round,omitempty"` // CompareTLS: 1, 2, …
	Sessions int           `json:"sessions"`
	Load     *LoadResult   `json:"load,omitempty"`
	Memory   *MemorySample `json:"memory,omitempty"`
	Floor    *MemorySample `json:"floor,omitempty"`
	Fanout   *FanoutResult `json:"fanout,omitempty"`
	// Disconnect is one mass disconnect (drain or kill).
	Disconnect *DisconnectResult `json:"disconnect,omitempty"`
}

// MemorySample is the memory of one process before and after opening
// Sessions idle sessions.
type MemorySample struct {
	Process        string  `json:"process"`
	Sessions       int     `json:"sessions"`
	Conns          int     `json:"conns"`
	FreshProcess   bool    `json:"fresh_process"`
	RSSBefore      float64 `json:"rss_before_bytes"`
	RSSAfter       float64 `json:"rss_after_bytes"`
	HeapBefore     float64 `json:"heap_inuse_before_bytes"`
	HeapAfter      float64 `json:"heap_inuse_after_bytes"`
	Goroutines     float64 `json:"goroutines_added"`
	RSSPerSession  float64 `json:"rss_per_session_bytes"`
	HeapPerSession float64 `json:"heap_per_session_bytes"`
	// StackPerSession: goroutine stacks (go_memstats_stack_inuse_bytes).
	StackPerSession float64  `json:"stack_per_session_bytes"`
	Profiles        []string `json:"profiles,omitempty"`
}

// Target is one performance goal checked against the measurements.
type Target struct {
	Name     string  `json:"name"`
	Goal     string  `json:"goal"`
	Measured string  `json:"measured"`
	Ratio    float64 `json:"ratio"`
	Met      bool    `json:"met"`
}

func (r *Report) addTarget(name, goal, measured string, ratio float64, met bool) {
	r.Targets = append(r.Targets, Target{Name: name, Goal: goal, Measured: measured, Ratio: ratio, Met: met})
}

// evaluate checks the targets that apply to the scenario's measurements.
func (r *Report) evaluate() {
	var loads, mems []RunResult
	for _, run := range r.Runs {
		if run.Load != nil && run.Label != "saturation" {
			loads = append(loads, run)
		}
		if run.Memory != nil {
			mems = append(mems, run)
		}
	}
	r.evaluateDisconnect()
	chained := r.Baselines.ChainedPerSec
	for _, run := range loads {
		l := run.Load
		if (r.Scenario == ScenarioThroughput || r.Scenario == ScenarioScaling) && chained > 0 {
			ratio := l.DeliveriesPerSec / chained
			r.addTarget(fmt.Sprintf("throughput, %d sessions", run.Sessions), "≥ 0.5× chained baseline",
				fmt.Sprintf("%.0f/s vs chained %.0f/s", l.DeliveriesPerSec, chained), ratio, ratio >= 0.5)
		}
		if r.Scenario == ScenarioLatency {
			name, p99 := fmt.Sprintf("p99 at %.0f/s, %d sessions", l.TargetRate, run.Sessions), l.Latency.P99
			if l.Others != nil {
				name += fmt.Sprintf(", others of %d stuck", l.StuckClients)
				p99 = l.Others.Latency.P99
			}
			r.addTarget(name, "≤ 25 ms", fmt.Sprintf("%.2f ms", p99), p99/25, p99 <= 25)
		}
	}
	for _, run := range mems {
		m := run.Memory
		r.addTarget(fmt.Sprintf("boat memory per idle session, %d sessions", run.Sessions), "≤ 16 KB",
			fmt.Sprintf("%.0f B RSS", m.RSSPerSession), m.RSSPerSession/16384, m.RSSPerSession <= 16384)
		if f := run.Floor; f != nil && f.RSSPerSession > 0 {
			ratio := m.RSSPerSession / f.RSSPerSession
			r.addTarget(fmt.Sprintf("boat vs bare-gRPC floor, %d sessions", run.Sessions), "≤ 1.15× floor",
				fmt.Sprintf("%.0f B vs %.0f B", m.RSSPerSession, f.RSSPerSession), ratio, ratio <= 1.15)
		}
	}
	if len(mems) >= 2 {
		a, b := mems[0].Memory, mems[len(mems)-1].Memory
		if a.RSSPerSession > 0 {
			ratio := b.RSSPerSession / a.RSSPerSession
			r.addTarget(fmt.Sprintf("memory per session %d → %d", a.Sessions, b.Sessions), "within 5 %",
				fmt.Sprintf("%.0f B → %.0f B", a.RSSPerSession, b.RSSPerSession), ratio, math.Abs(ratio-1) <= 0.05)
		}
	}
	if r.Scenario == ScenarioScaling && len(loads) >= 2 {
		a, b := loads[0], loads[len(loads)-1]
		if a.Load.DeliveriesPerSec > 0 {
			ratio := b.Load.DeliveriesPerSec / a.Load.DeliveriesPerSec
			r.addTarget(fmt.Sprintf("throughput %d → %d", a.Sessions, b.Sessions), "≥ 0.9×",
				fmt.Sprintf("%.0f/s → %.0f/s (p99 %.1f → %.1f ms)", a.Load.DeliveriesPerSec, b.Load.DeliveriesPerSec,
					a.Load.Latency.P99, b.Load.Latency.P99), ratio, ratio >= 0.9)
		}
	}
}

// Markdown renders the report as tables.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s — %s\n\n", r.Scenario, r.Date)
	fmt.Fprintf(&b, "`%s`\n\n", r.Command)
	m := r.Machine
	transport := r.Transport
	if transport == "" {
		transport = TransportGRPC
	}
	fmt.Fprintf(&b, "Machine: %d × %s, %s, Linux %s, %s, open files limit %d; device sessions over %s, %d stream(s) per client connection.\n\n",
		m.CPUs, m.Model, m.MemTotal, m.Kernel, m.GoVersion, m.NoFile, transport, r.StreamsPerConn)
	for _, run := range r.Runs {
		if run.Load != nil {
			fmt.Fprintf(&b, "Messages pushed with %s.\n\n", run.Load.MsgOptions)
			break
		}
	}
	var loads, mems []RunResult
	for _, run := range r.Runs {
		if run.Load != nil {
			loads = append(loads, run)
		}
		if run.Memory != nil {
			mems = append(mems, run)
		}
	}
	if len(loads) > 0 {
		b.WriteString("| run | sessions | rate | pushed | delivered | acked deliveries/s | p50 ms | p99 ms | p999 ms | CPU µs/msg (services) | CPU µs/msg (+backends) | tool CPU s | missing | dup | push errors | load avg |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, run := range loads {
			l := run.Load
			rate := "max"
			if l.TargetRate > 0 {
				rate = fmt.Sprintf("%.0f/s", l.TargetRate)
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %d | %d | %.0f | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %d | %d | %d | %s |\n",
				run.Label, run.Sessions, rate, l.Pushed, l.Delivered, l.DeliveriesPerSec, l.Latency.P50, l.Latency.P99,
				l.Latency.P999, l.CPUPerMsgUS, l.CPUPerMsgWithBackUS, l.ToolCPUSeconds, l.Missing, l.Duplicates, l.PushErrors, l.LoadAvg)
		}
		b.WriteString("\n")
		stuckMarkdown(&b, loads)
	}
	if len(mems) > 0 {
		b.WriteString("| run | process | sessions | conns | RSS/session | heap/session | stacks/session | goroutines/session | floor RSS/session | floor heap/session | floor stacks/session | boat ÷ floor (RSS) |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, run := range mems {
			mm := run.Memory
			fl, flh, fls, ratio := "—", "—", "—", "—"
			if f := run.Floor; f != nil {
				fl, flh, fls = kb(f.RSSPerSession), kb(f.HeapPerSession), kb(f.StackPerSession)
				if f.RSSPerSession > 0 {
					ratio = fmt.Sprintf("%.2f×", mm.RSSPerSession/f.RSSPerSession)
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %s | %s | %s | %.1f | %s | %s | %s | %s |\n", run.Label, mm.Process, mm.Sessions, mm.Conns,
				kb(mm.RSSPerSession), kb(mm.HeapPerSession), kb(mm.StackPerSession), mm.Goroutines/float64(max(1, mm.Sessions)), fl, flh, fls, ratio)
		}
		b.WriteString("\n")
	}
	fanoutMarkdown(&b, r.Runs)
	disconnectMarkdown(&b, r.Runs)
	if len(r.BaselineRuns) > 0 {
		b.WriteString("| baseline run | Kafka produce→consume /s | Kafka p99 ms | gRPC msg+ACK /s | gRPC p99 ms | Redis HGETALL /s | Redis EVALSHA write.lua /s | chained /s |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|\n")
		row := func(label string, x Baselines) {
			fmt.Fprintf(&b, "| %s | %.0f | %.1f | %.0f | %.2f | %.0f | %.0f | %.0f |\n", label, x.KafkaPerSec, x.KafkaP99MS,
				x.GRPCPerSec, x.GRPCP99MS, x.RedisLookupPerSec, x.RedisEvalPerSec, x.ChainedPerSec)
		}
		for i, x := range r.BaselineRuns {
			row(strconv.Itoa(i+1), x)
		}
		row("mean", r.Baselines)
		b.WriteString("\n")
	}
	for _, c := range r.TLSCost {
		c.markdown(&b)
	}
	if k := r.KafkaAtRate; k != nil {
		fmt.Fprintf(&b, "Kafka produce→consume alone at %.0f records/s: %.0f/s consumed, p99 %.1f ms.\n\n", k.Rate, k.PerSec, k.P99MS)
	}
	if len(r.Targets) > 0 {
		b.WriteString("| target | goal | measured | ratio | met |\n|---|---|---|---|---|\n")
		for _, t := range r.Targets {
			met := "yes"
			if !t.Met {
				met = "**no**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %s |\n", t.Name, t.Goal, t.Measured, t.Ratio, met)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// stuckMarkdown adds, for runs with stuck sessions, the other sessions'
// figures and what the stuck ones received.
func stuckMarkdown(b *strings.Builder, loads []RunResult) {
	header := false
	for _, run := range loads {
		l := run.Load
		if l.Others == nil || l.Stuck == nil {
			continue
		}
		if !header {
			header = true
			b.WriteString("Stuck sessions read their messages (every push asks for an ACK) and never ACK; the run's row above counts every session.\n\n")
			b.WriteString("| run | stuck | others | others pushed | others delivered | others delivered/s | others p50 ms | others p99 ms | others p999 ms | others max ms | others missing | others dup | others kickouts | stuck pushed | stuck received | stuck received NEED_ACK | stuck missing | stuck kickouts | stuck reconnects |\n")
			b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		}
		o, s := l.Others, l.Stuck
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %.0f | %.2f | %.2f | %.2f | %.2f | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n",
			run.Label, s.Sessions, o.Sessions, o.Pushed, o.Delivered, o.DeliveriesPerSec, o.Latency.P50, o.Latency.P99,
			o.Latency.P999, o.Latency.Max, o.Missing, o.Duplicates, o.Kickouts, s.Pushed, s.Delivered, s.NeedAck, s.Missing, s.Kickouts, s.Reconnects)
	}
	if header {
		b.WriteString("\n")
	}
}

func kb(v float64) string { return fmt.Sprintf("%.1f KB", v/1024) }

// Write saves the report as <dir>/<scenario>.json and <scenario>.md.
func (r *Report) Write(dir string) (jsonPath, mdPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", "", err
	}
	jsonPath = filepath.Join(dir, r.Scenario+".json")
	mdPath = filepath.Join(dir, r.Scenario+".md")
	if err := os.WriteFile(jsonPath, append(j, '\n'), 0o644); err != nil {
		return "", "", err
	}
	return jsonPath, mdPath, os.WriteFile(mdPath, []byte(r.Markdown()), 0o644)
}
