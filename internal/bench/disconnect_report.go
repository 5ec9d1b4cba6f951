package bench

import (
	"fmt"
	"strings"
	"time"
)

// Targets of a mass disconnect.
const (
	disconnectClearGoal  = 10.0 // seconds until Redis holds none of the boat's sessions
	disconnectP99Ratio   = 2.0  // the others' p99 during it vs their quiet p99
	disconnectGoalString = "≤ 10 s"
)

// spanProfile is how long --profile-dir profiles a disconnect's span
// from the signal: the slow messages are in its first seconds.
const spanProfile = 4 * time.Second

// spanSlice is the step of a disconnect span's latency slices.
const spanSlice = 500 * time.Millisecond

// slicesLine is each slice's p99 and count, split at station:
// "0.0s 12.3 (2.1+10.5) n=480, …".
func slicesLine(ss []Slice) string {
	parts := make([]string, 0, len(ss))
	for _, s := range ss {
		parts = append(parts, fmt.Sprintf("%.1fs %.1f (%.1f+%.1f) n=%d", s.FromSeconds, s.Total.P99,
			s.ToStation.P99, s.AfterStation.P99, s.Total.Count))
	}
	return strings.Join(parts, ", ")
}

// evaluateDisconnect checks each mass disconnect against its targets.
func (r *Report) evaluateDisconnect() {
	for _, run := range r.Runs {
		d := run.Disconnect
		if d == nil {
			continue
		}
		name := fmt.Sprintf("%s, %d sessions", d.label(), d.Sessions)
		if d.Cleared {
			r.addTarget("Redis clear of the boat's sessions, "+name, disconnectGoalString,
				fmt.Sprintf("%.2f s", d.ClearSeconds), d.ClearSeconds/disconnectClearGoal, d.ClearSeconds <= disconnectClearGoal)
		} else {
			r.addTarget("Redis clear of the boat's sessions, "+name, disconnectGoalString,
				fmt.Sprintf("not clear: %d index members, %d hash entries left", d.LeftIndex, d.LeftHashes), 0, false)
		}
		q, s := d.Others.Quiet.P99, d.Others.Span.P99
		if q > 0 && d.Others.Span.Count > 0 {
			r.addTarget("other users' p99 during it, "+name, "≤ 2× quiet",
				fmt.Sprintf("%.2f ms vs quiet %.2f ms", s, q), s/q, s <= disconnectP99Ratio*q)
		}
		st := d.Stored
		r.addTarget("stored messages lost, "+name, "0",
			fmt.Sprintf("%d of %d", st.Lost, st.Pushed), float64(st.Lost), st.Lost == 0 && st.PushErrors == 0)
	}
}

// label is the run's mode, and whether boat A was isolated.
func (d *DisconnectResult) label() string {
	if d.Isolated {
		return d.Mode + " (isolated)"
	}
	return d.Mode
}

// disconnectMarkdown adds the mass disconnects' tables.
func disconnectMarkdown(b *strings.Builder, runs []RunResult) {
	var ds []*DisconnectResult
	for _, run := range runs {
		if run.Disconnect != nil {
			ds = append(ds, run.Disconnect)
		}
	}
	if len(ds) == 0 {
		return
	}
	b.WriteString("Mass disconnect: every session of boat A leaves at once (drain: SIGTERM; kill: SIGKILL, then the boat starts again on the same address). " +
		"Clear: from the signal until a poll of Redis finds boat A's index empty and none of its users' session hashes naming it. " +
		"Commands: total_commands_processed's rise in that span, less the poller's own and the quiet window's rate (the others' load). " +
		"Isolated: boat A and the process holding its sessions ran at nice 19, as on machines of their own. " +
		"Devices off: until every boat A session's stream had ended on the device's side (kicked, or its connection broken).\n\n")
	b.WriteString("| mode | sessions | recorded before | clear s | index empty s | polls | boat A after the signal, s | Redis commands (attributed) | top commands | Redis CPU % quiet / span / peak | load avg |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, d := range ds {
		clear := "**not clear**"
		if d.Cleared {
			clear = fmt.Sprintf("%.2f", d.ClearSeconds)
		}
		back := fmt.Sprintf("devices off %.2f, exited %.2f", d.DevicesEndedSeconds, d.ExitSeconds)
		if d.Mode == DisconnectKill {
			back = fmt.Sprintf("devices off %.2f, up %.2f, serving %.2f", d.DevicesEndedSeconds, d.RestartUpSeconds, d.RestartServingSeconds)
		}
		cmds, top, cpu := "—", "—", "—"
		if rr := d.Redis; rr.CountsRead {
			cmds = fmt.Sprintf("%d (%d)", rr.Commands, rr.Attributed)
			var parts []string
			for _, c := range rr.Top {
				parts = append(parts, fmt.Sprintf("%s %d", c.Command, c.Calls))
			}
			top = strings.Join(parts, ", ")
		}
		if rr := d.Redis; rr.CPUSampled {
			cpu = fmt.Sprintf("%.0f / %.0f / %.0f", rr.QuietCPUPct, rr.SpanCPUPct, rr.PeakCPUPct)
		}
		fmt.Fprintf(b, "| %s | %d | %d | %s | %.2f | %d | %s | %s | %s | %s | %s |\n", d.label(), d.Sessions, d.RecordedBefore, clear,
			d.IndexEmptySeconds, d.Polls, back, cmds, top, cpu, d.LoadAvg)
	}
	b.WriteString("\n| mode | others | rate | pushed | delivered | missing | dup | quiet p50 / p99 ms | span s | span p50 / p99 ms | p99 ÷ quiet | held (received) | stored while gone | reconnected | received back | lost | dup | replay s |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, d := range ds {
		o, st := d.Others, d.Stored
		ratio := "—"
		if o.Quiet.P99 > 0 && o.Span.Count > 0 {
			ratio = fmt.Sprintf("%.2f×", o.Span.P99/o.Quiet.P99)
		}
		fmt.Fprintf(b, "| %s | %d | %.0f/s | %d | %d | %d | %d | %.2f / %.2f | %.2f | %.2f / %.2f | %s | %d (%d) | %d | %d | %d | %d | %d | %.2f |\n",
			d.label(), o.Sessions, o.Rate, o.Pushed, o.Delivered, o.Missing, o.Duplicates, o.Quiet.P50, o.Quiet.P99, o.SpanSeconds,
			o.Span.P50, o.Span.P99, ratio, st.Held, st.HeldReceived, st.Stored, st.Reconnected, st.Received, st.Lost, st.Duplicates, st.ReplaySeconds)
	}
	b.WriteString("\nThe others' p99 split at station's accept timestamp (up to station: the Push call and station's checks; after: Kafka, carrier, " +
		"boat B, the device's stream), and the span's p99 by half-second slice of send time, as total (up to + after) n=messages:\n\n")
	b.WriteString("| mode | quiet p99 up to / after station, ms | span p99 up to / after station, ms | span by slice |\n|---|---|---|---|\n")
	for _, d := range ds {
		o := d.Others
		fmt.Fprintf(b, "| %s | %.2f / %.2f | %.2f / %.2f | %s |\n", d.label(), o.QuietStages.ToStation.P99, o.QuietStages.AfterStation.P99,
			o.SpanStages.ToStation.P99, o.SpanStages.AfterStation.P99, slicesLine(o.SpanSlices))
	}
	b.WriteString("\n")
}
