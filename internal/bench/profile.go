package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// profileSet captures a CPU profile of every service over a window and a heap
// profile at its end, from the services' /debug/pprof/ endpoints.
type profileSet struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	files []string
	errs  []string
}

// start begins the captures; files are <prefix>-<service>-cpu.pprof and
// <prefix>-<service>-heap.pprof.
func (ps *profileSet) start(ctx context.Context, svcs []Service, prefix string, window time.Duration) {
	secs := max(1, int(window.Seconds())-1)
	for _, s := range svcs {
		if s.OpsAddr == "" {
			continue
		}
		ps.wg.Add(1)
		go func() {
			defer ps.wg.Done()
			cpu := fmt.Sprintf("%s-%s-cpu.pprof", prefix, s.Name)
			heap := fmt.Sprintf("%s-%s-heap.pprof", prefix, s.Name)
			if err := fetchTo(ctx, s, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), cpu); err != nil {
				ps.fail(err)
				return
			}
			ps.add(cpu)
			if err := fetchTo(ctx, s, "/debug/pprof/heap", heap); err != nil {
				ps.fail(err)
				return
			}
			ps.add(heap)
		}()
	}
}

// captureHeaps saves a heap profile of every service now.
func captureHeaps(ctx context.Context, svcs []Service, prefix string) []string {
	var out []string
	for _, s := range svcs {
		if s.OpsAddr == "" {
			continue
		}
		path := fmt.Sprintf("%s-%s-heap.pprof", prefix, s.Name)
		if err := fetchTo(ctx, s, "/debug/pprof/heap", path); err == nil {
			out = append(out, path)
		}
	}
	return out
}

func (ps *profileSet) add(f string) {
	ps.mu.Lock()
	ps.files = append(ps.files, f)
	ps.mu.Unlock()
}

func (ps *profileSet) fail(err error) {
	ps.mu.Lock()
	ps.errs = append(ps.errs, err.Error())
	ps.mu.Unlock()
}

// wait returns the files written, and a note per capture that failed.
func (ps *profileSet) wait() []string {
	ps.wg.Wait()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := append([]string(nil), ps.files...)
	for _, e := range ps.errs {
		out = append(out, "error: "+e)
	}
	return out
}
