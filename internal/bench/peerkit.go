package bench

import (
	"context"
	"io"
	"net"
	"os"
	"time"
)

// What a load tool for another system (bench/peers, a module of its own so
// that its client libraries stay out of this one) needs to measure the way
// this package measures gomsg: the same percentiles, the same CPU and
// memory readings, the same source addresses and child processes.

// PercentilesOf returns the percentiles of latencies in nanoseconds; it
// sorts v.
func PercentilesOf(v []int64) Percentiles { return percentilesOf(v) }

// CPUDeltas is each process's CPU seconds between two ScrapeAll readings,
// and their sums without the processes named backends or redis and with
// them.
func CPUDeltas(before, after map[string]Sample) (perProcess map[string]float64, services, all float64) {
	return cpuDeltas(before, after)
}

// Settle collects a Go service's garbage (through its pprof), waits two
// seconds and reads its memory: what the idle scenario does before each
// reading.
func Settle(ctx context.Context, s Service) (Sample, error) { return settle(ctx, s) }

// ToolCPU is this process's CPU seconds so far.
func ToolCPU() float64 { s, _ := procSample(os.Getpid()); return s.CPUSeconds }

// LoadAvg is /proc/loadavg's first three fields.
func LoadAvg() string { return loadAvg() }

// FreePorts returns n loopback TCP ports that were free a moment ago.
func FreePorts(n int) ([]int, error) { return freePorts(n) }

// DialFrom returns a dialer bound to source address 127.0.0.<2+i%spread>,
// as the tool's own sessions dial.
func DialFrom(i, spread int) func(ctx context.Context, addr string) (net.Conn, error) {
	return dialFrom(i, spread)
}

// Process is a child process the tool started; it dies with the tool.
type Process struct{ c *child }

// StartProcess starts bin with args, its output in <logDir>/<name>.log.
func StartProcess(name, logDir, bin string, args ...string) (*Process, error) {
	c, err := startChild(name, logDir, bin, args...)
	if err != nil {
		return nil, err
	}
	return &Process{c: c}, nil
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.c.cmd.Process.Pid }

// Exited returns an error once the process has ended, nil while it runs.
func (p *Process) Exited() error { return p.c.exited() }

// Stop sends SIGTERM, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) { p.c.stop(grace) }

// SleepUntil waits until t and reports true, or false once ctx ends first.
func SleepUntil(ctx context.Context, t time.Time) bool { return sleepUntil(ctx, t) }

// Progress prints line() to w every second until stop is called.
func Progress(w io.Writer, line func() string) (stop func()) { return progress(w, line) }
