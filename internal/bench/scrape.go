package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Service is one process of the cluster whose ops server the tool reads:
// /metrics for CPU and memory, /debug/pprof/ for profiles.
type Service struct {
	Name    string // boat, station, carrier, backends, floor
	OpsAddr string // host:port of its ops server
	// Pid, for a process without an ops server (redis-server): CPU and
	// RSS are read from /proc. A spawned process with an ops server has
	// it too, for its system calls.
	Pid int
}

// Sample is what one scrape of a process's /metrics says.
type Sample struct {
	CPUSeconds float64 // process_cpu_seconds_total
	RSSBytes   float64 // process_resident_memory_bytes
	HeapInuse  float64 // go_memstats_heap_inuse_bytes
	Goroutines float64 // go_goroutines
	StackInuse float64 // go_memstats_stack_inuse_bytes
	// Syscalls is the read and write system calls the process has made
	// (/proc/<pid>/io syscr + syscw; 0 where the pid is not known).
	Syscalls float64
}

var httpClient = &http.Client{Timeout: 60 * time.Second}

// Scrape reads the process metrics of one service.
func Scrape(ctx context.Context, s Service) (Sample, error) {
	if s.OpsAddr == "" {
		return procSample(s.Pid)
	}
	sample, err := scrapeMetrics(ctx, s)
	if err == nil && s.Pid > 0 {
		sample.Syscalls, _ = procSyscalls(s.Pid)
	}
	return sample, err
}

func scrapeMetrics(ctx context.Context, s Service) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.OpsAddr+"/metrics", nil)
	if err != nil {
		return Sample{}, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("scrape %s: %w", s.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("scrape %s: %s", s.Name, resp.Status)
	}
	return parseSample(resp.Body)
}

func parseSample(r io.Reader) (Sample, error) {
	var s Sample
	fields := map[string]*float64{
		"process_cpu_seconds_total":     &s.CPUSeconds,
		"process_resident_memory_bytes": &s.RSSBytes,
		"go_memstats_heap_inuse_bytes":  &s.HeapInuse,
		"go_goroutines":                 &s.Goroutines,
		"go_memstats_stack_inuse_bytes": &s.StackInuse,
	}
	seen := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		p, ok := fields[name]
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return s, fmt.Errorf("metric %s: %w", name, err)
		}
		*p = v
		seen++
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	if seen < len(fields) {
		return s, fmt.Errorf("/metrics lacks some of process_cpu_seconds_total, process_resident_memory_bytes, go_memstats_heap_inuse_bytes, go_memstats_stack_inuse_bytes, go_goroutines")
	}
	return s, nil
}

// ScrapeAll samples every service; a service that cannot be read is an error.
func ScrapeAll(ctx context.Context, svcs []Service) (map[string]Sample, error) {
	out := make(map[string]Sample, len(svcs))
	for _, s := range svcs {
		v, err := Scrape(ctx, s)
		if err != nil {
			return nil, err
		}
		out[s.Name] = v
	}
	return out, nil
}

// fetchTo saves one pprof endpoint of a service to path.
func fetchTo(ctx context.Context, s Service, endpoint, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.OpsAddr+endpoint, nil)
	if err != nil {
		return err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", s.Name, endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s (is --pprof on?)", s.Name, endpoint, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// series are the samples of one /metrics page by series: the metric name
// with its labels as the page writes them (`name{label="v"}`).
type series map[string]float64

// scrapeSeries reads every sample of a service's /metrics page.
func scrapeSeries(ctx context.Context, s Service) (series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.OpsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", s.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", s.Name, resp.Status)
	}
	return parseSeries(resp.Body)
}

func parseSeries(r io.Reader) (series, error) {
	out := series{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// sum adds the samples of metric name over its label values; ok is false
// when the page has none.
func (s series) sum(name string) (v float64, ok bool) {
	for k, x := range s {
		if n, _, _ := strings.Cut(k, "{"); n == name {
			v += x
			ok = true
		}
	}
	return v, ok
}

// byLabel maps the value of label to the sample, for metric name.
func (s series) byLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for k, x := range s {
		n, rest, _ := strings.Cut(k, "{")
		if n != name {
			continue
		}
		_, after, ok := strings.Cut(rest, label+`="`)
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(after, `"`)
		out[v] += x
	}
	return out
}

// syscallsPerMsg is each process's read and write system calls in the
// window per delivered message, for the processes whose pid is known, and
// the load tool's (tool: its own calls in the window).
func syscallsPerMsg(before, after map[string]Sample, tool float64, msgs int64) map[string]float64 {
	if msgs <= 0 {
		return nil
	}
	per := make(map[string]float64, len(after)+1)
	for name, a := range after {
		// A process started again within the window counts from zero;
		// where that shows as fewer calls than before, it is left out.
		if d := a.Syscalls - before[name].Syscalls; a.Syscalls > 0 && d >= 0 {
			per[name] = d / float64(msgs)
		}
	}
	if tool > 0 {
		per["tool"] = tool / float64(msgs)
	}
	return per
}

// syscallsLine prints per, the processes sorted by name.
func syscallsLine(per map[string]float64) string {
	parts := make([]string, 0, len(per))
	for _, name := range slices.Sorted(maps.Keys(per)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, per[name]))
	}
	return strings.Join(parts, ", ")
}

// cpuDeltas is each process's CPU seconds between two scrapes, and their
// sums without the backends (the services) and with them.
func cpuDeltas(before, after map[string]Sample) (perProcess map[string]float64, services, all float64) {
	perProcess = make(map[string]float64, len(after))
	for name, a := range after {
		d := a.CPUSeconds - before[name].CPUSeconds
		perProcess[name] = d
		all += d
		if name != "backends" && name != "redis" {
			services += d
		}
	}
	return perProcess, services, all
}
