package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Modes of a CompareTLS run.
const (
	ModePlain = "plaintext"
	ModeTLS   = "tls"
)

// TLSCost compares the plaintext and the TLS runs of one session count:
// the mean of each mode over the rounds.
type TLSCost struct {
	Sessions int         `json:"sessions"`
	Rounds   int         `json:"rounds"`
	Plain    CostFigures `json:"plaintext"`
	TLS      CostFigures `json:"tls"`
}

// CostFigures are what a mode measured; zero where the scenario does not
// measure it.
type CostFigures struct {
	DeliveriesPerSec    float64 `json:"acked_deliveries_per_sec,omitempty"`
	P50MS               float64 `json:"p50_ms,omitempty"`
	P99MS               float64 `json:"p99_ms,omitempty"`
	CPUPerMsgUS         float64 `json:"cpu_per_msg_us,omitempty"`
	CPUPerMsgWithBackUS float64 `json:"cpu_per_msg_with_backends_us,omitempty"`
	RSSPerSession       float64 `json:"rss_per_session_bytes,omitempty"`
	HeapPerSession      float64 `json:"heap_per_session_bytes,omitempty"`
}

// runCompareTLS runs the scenario on a plaintext cluster (NewCluster) and
// on a TLS one (TLSCluster), alternating, Rounds times; baselines and the
// floor are left out (they do not depend on the mode).
func runCompareTLS(ctx context.Context, o Options, rep *Report) error {
	if o.Scenario != ScenarioThroughput && o.Scenario != ScenarioIdle {
		return fmt.Errorf("compare-tls: only the throughput and idle scenarios, not %s", o.Scenario)
	}
	if o.TLSCluster == nil {
		return errors.New("compare-tls: no TLS cluster to run against")
	}
	if o.Scenario == ScenarioThroughput && len(o.Sessions) != 1 {
		return fmt.Errorf("%s: want one session count, got %v", o.Scenario, o.Sessions)
	}
	rounds := max(1, o.Rounds)
	for r := 1; r <= rounds; r++ {
		for _, mode := range []string{ModePlain, ModeTLS} {
			so := o
			so.BaselineDuration, so.SpawnFloor = 0, nil
			if mode == ModeTLS {
				so.NewCluster = o.TLSCluster
			}
			if o.ProfileDir != "" {
				so.ProfileDir = filepath.Join(o.ProfileDir, fmt.Sprintf("%s-%d", mode, r))
			}
			o.logf("round %d/%d: %s", r, rounds, mode)
			sub := &Report{Scenario: o.Scenario}
			var err error
			if o.Scenario == ScenarioIdle {
				err = runIdle(ctx, so, sub)
			} else {
				err = runLoadScenario(ctx, so, sub)
			}
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r, mode, err)
			}
			for _, run := range sub.Runs {
				run.Mode, run.Round = mode, r
				run.Label = fmt.Sprintf("%s %s #%d", run.Label, mode, r)
				rep.Runs = append(rep.Runs, run)
			}
		}
	}
	rep.TLSCost = compareTLS(rep.Runs)
	return nil
}

// compareTLS averages each mode's runs per session count.
func compareTLS(runs []RunResult) []TLSCost {
	type acc struct {
		sum CostFigures
		n   int
	}
	var order []int
	by := map[int]map[string]*acc{}
	for _, run := range runs {
		if run.Mode == "" {
			continue
		}
		m, ok := by[run.Sessions]
		if !ok {
			m = map[string]*acc{ModePlain: {}, ModeTLS: {}}
			by[run.Sessions] = m
			order = append(order, run.Sessions)
		}
		a := m[run.Mode]
		a.n++
		if l := run.Load; l != nil {
			a.sum.DeliveriesPerSec += l.DeliveriesPerSec
			a.sum.P50MS += l.Latency.P50
			a.sum.P99MS += l.Latency.P99
			a.sum.CPUPerMsgUS += l.CPUPerMsgUS
			a.sum.CPUPerMsgWithBackUS += l.CPUPerMsgWithBackUS
		}
		if mm := run.Memory; mm != nil {
			a.sum.RSSPerSession += mm.RSSPerSession
			a.sum.HeapPerSession += mm.HeapPerSession
		}
	}
	mean := func(a *acc) CostFigures {
		if a.n == 0 {
			return CostFigures{}
		}
		d := float64(a.n)
		s := a.sum
		return CostFigures{s.DeliveriesPerSec / d, s.P50MS / d, s.P99MS / d, s.CPUPerMsgUS / d,
			s.CPUPerMsgWithBackUS / d, s.RSSPerSession / d, s.HeapPerSession / d}
	}
	var out []TLSCost
	for _, n := range order {
		m := by[n]
		out = append(out, TLSCost{Sessions: n, Rounds: min(m[ModePlain].n, m[ModeTLS].n),
			Plain: mean(m[ModePlain]), TLS: mean(m[ModeTLS])})
	}
	return out
}

// markdown renders the side-by-side table.
func (c TLSCost) markdown(b *strings.Builder) {
	fmt.Fprintf(b, "| %d sessions, mean of %d round(s) | plaintext | TLS | TLS ÷ plaintext |\n|---|---|---|---|\n", c.Sessions, c.Rounds)
	row := func(name string, p, t float64, format func(float64) string) {
		if p == 0 && t == 0 {
			return
		}
		ratio := "—"
		if p != 0 {
			ratio = fmt.Sprintf("%.2f×", t/p)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", name, format(p), format(t), ratio)
	}
	f := func(format string) func(float64) string {
		return func(v float64) string { return fmt.Sprintf(format, v) }
	}
	p, t := c.Plain, c.TLS
	row("acked deliveries/s", p.DeliveriesPerSec, t.DeliveriesPerSec, f("%.0f"))
	row("p50 ms", p.P50MS, t.P50MS, f("%.2f"))
	row("p99 ms", p.P99MS, t.P99MS, f("%.2f"))
	row("CPU µs/msg (services)", p.CPUPerMsgUS, t.CPUPerMsgUS, f("%.1f"))
	row("CPU µs/msg (+backends)", p.CPUPerMsgWithBackUS, t.CPUPerMsgWithBackUS, f("%.1f"))
	row("boat RSS/idle session", p.RSSPerSession, t.RSSPerSession, kb)
	row("boat heap/idle session", p.HeapPerSession, t.HeapPerSession, kb)
	b.WriteString("\n")
}
