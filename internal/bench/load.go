package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// LoadConfig configures pushing through the Push API to open sessions.
type LoadConfig struct {
	PushAddr string
	TLS      *tls.Config // nil: plaintext
	APIKey   string      // sent on every Push call
	Platform string
	// Offline pushes NEED_ACK|NEED_OFFLINE (stored for a session that is
	// not there) instead of NEED_ACK alone.
	Offline bool
	// Rate is pushes per second; 0 pushes as fast as Concurrency callers can.
	Rate        float64
	Concurrency int
	// PushConns is how many gRPC connections the callers share.
	PushConns int
	// Warmup pushes before the measured window; Duration is the window;
	// Drain bounds the wait for messages still in flight after it.
	Warmup, Duration, Drain time.Duration
	// Services are scraped for CPU at the window's ends and, with
	// ProfileDir, profiled during the window.
	Services    []Service
	ProfileDir  string
	ProfileName string
	Progress    io.Writer
}

// LoadResult is what one load run measured.
type LoadResult struct {
	Sessions    int     `json:"sessions"`
	TargetRate  float64 `json:"target_rate"` // 0: as fast as possible
	Concurrency int     `json:"concurrency"`
	// Bookkeeping over the whole run (warm-up, window and drain).
	Pushed      int64 `json:"pushed"`       // Push calls that returned a seq
	PushErrors  int64 `json:"push_errors"`  // Push calls that failed
	Delivered   int64 `json:"delivered"`    // messages received (and ACKed) by the sessions
	Missing     int64 `json:"missing"`      // pushed seqs their target never received
	Duplicates  int64 `json:"duplicates"`   // extra receipts of a pushed seq
	Unexpected  int64 `json:"unexpected"`   // receipts of seqs no successful Push returned
	WrongTarget int64 `json:"wrong_target"` // messages received by a session they were not for
	// MsgOptions are the options every Push asked for; WrongOptions counts
	// messages received with others.
	MsgOptions   string `json:"msg_options"`
	WrongOptions int64  `json:"wrong_options"`
	Kickouts     int64  `json:"kickouts"`
	Ended        int64  `json:"streams_ended"`
	// The measured window.
	WindowStart      string             `json:"window_start"`
	WindowSeconds    float64            `json:"window_seconds"`
	PushesPerSec     float64            `json:"pushes_per_sec"`
	DeliveriesPerSec float64            `json:"acked_deliveries_per_sec"`
	Latency          Percentiles        `json:"latency"`
	CPUSeconds       map[string]float64 `json:"cpu_seconds"`
	// CPU per delivered message in the window, in microseconds: boat,
	// station and carrier; and with the backends (the `gomsg dev
	// --services none` process and redis-server) added.
	CPUPerMsgUS         float64  `json:"cpu_per_msg_us"`
	CPUPerMsgWithBackUS float64  `json:"cpu_per_msg_with_backends_us"`
	Profiles            []string `json:"profiles,omitempty"`
	// SyscallsPerMsg is each process's read and write system calls in the
	// window per delivered message ("tool" is the load tool's).
	SyscallsPerMsg map[string]float64 `json:"syscalls_per_msg,omitempty"`
	// ToolCPUSeconds is the load tool's own CPU time in the window.
	ToolCPUSeconds float64 `json:"tool_cpu_seconds"`
	// LoadAvg is /proc/loadavg at the window's end: other work on the
	// machine shows here.
	LoadAvg string `json:"loadavg"`
	// With stuck sessions (sessions that never ACK), the counts above are
	// over all sessions, except that acked deliveries/s counts only ACKed
	// receipts; Others and Stuck split them.
	StuckClients int          `json:"stuck_clients,omitempty"`
	Others       *GroupResult `json:"others,omitempty"`
	Stuck        *StuckResult `json:"stuck,omitempty"`
}

// GroupResult is one group of sessions' share of a load run.
type GroupResult struct {
	Sessions    int   `json:"sessions"`
	Pushed      int64 `json:"pushed"`    // Push calls to the group's uids that returned a seq
	Delivered   int64 `json:"delivered"` // messages the group's sessions received
	Missing     int64 `json:"missing"`
	Duplicates  int64 `json:"duplicates"`
	Unexpected  int64 `json:"unexpected"`
	WrongTarget int64 `json:"wrong_target"`
	Kickouts    int64 `json:"kickouts"`
	Ended       int64 `json:"streams_ended"`
	// DeliveriesPerSec: messages received in the window per second (ACKed
	// by the others; never ACKed by the stuck).
	DeliveriesPerSec float64     `json:"delivered_per_sec"`
	Latency          Percentiles `json:"latency"`
}

// StuckResult is what the stuck sessions, which read their streams but
// never ACK, received.
type StuckResult struct {
	GroupResult
	// NeedAck counts receipts that asked for an ACK (all of them: every
	// push asks); none was ACKed.
	NeedAck    int64 `json:"need_ack"`
	Reconnects int64 `json:"reconnects"`
}

type pushed struct {
	seq    int64
	target int32
}

// runLoad pushes to the open sessions and measures.
func runLoad(ctx context.Context, p *sessions, cfg LoadConfig) (LoadResult, error) {
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 64
	}
	if cfg.PushConns < 1 {
		cfg.PushConns = 4
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 20 * time.Second
	}
	opts := uint32(msgpb.Option_NEED_ACK)
	if cfg.Offline {
		opts |= uint32(msgpb.Option_NEED_OFFLINE)
	}
	p.reset()
	p.wantOptions = opts
	n := len(p.list)
	res := LoadResult{Sessions: n, TargetRate: cfg.Rate, Concurrency: cfg.Concurrency, MsgOptions: optionNames(opts)}
	clients, closeClients, err := pushClients(cfg.PushAddr, cfg.TLS, cfg.APIKey, cfg.PushConns)
	if err != nil {
		return res, err
	}
	defer closeClients()

	t0, winStart, winEnd := p.window(cfg.Warmup, cfg.Duration)

	var next, okCount, okOthers, errCount, inWinPushes atomic.Int64
	records := make([][]pushed, cfg.Concurrency)
	var firstErr atomic.Value
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
	}
	pctx, stopPush := context.WithDeadline(ctx, winEnd)
	defer stopPush()
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[w%len(clients)]
			for {
				i := next.Add(1) - 1
				if interval > 0 {
					due := t0.Add(time.Duration(i) * interval)
					if !due.Before(winEnd) {
						return
					}
					if d := time.Until(due); d > 0 {
						select {
						case <-time.After(d):
						case <-pctx.Done():
							return
						}
					}
				}
				if pctx.Err() != nil {
					return
				}
				target := int(i % int64(n))
				now := time.Now()
				// The Push call gets its own deadline: one already sent
				// finishes even when the window closes.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				resp, err := cl.Push(cctx, &pushpb.PushRequest{
					Uids:           []string{p.list[target].uid},
					PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{cfg.Platform}},
					MsgBodies:      []*anypb.Any{encodeBody(now.UnixNano(), target)},
					MsgOptions:     opts,
				})
				cancel()
				if err != nil || len(resp.GetSeqs()) != 1 {
					errCount.Add(1)
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
					}
					continue
				}
				okCount.Add(1)
				if target >= p.stuck {
					okOthers.Add(1)
				}
				if !now.Before(winStart) {
					inWinPushes.Add(1)
				}
				records[w] = append(records[w], pushed{seq: resp.GetSeqs()[0], target: int32(target)})
			}
		}()
	}

	// Scrapes and profiles at the window's ends.
	var before, after map[string]Sample
	var scrapeErr error
	var prof profileSet
	var toolBefore, toolAfter Sample
	self := os.Getpid()
	g := new(errgroup.Group)
	g.Go(func() error {
		if !sleepUntil(ctx, winStart) {
			return ctx.Err()
		}
		var err error
		if before, err = ScrapeAll(ctx, cfg.Services); err != nil {
			return err
		}
		toolBefore, _ = procSample(self)
		if cfg.ProfileDir != "" {
			prof.start(ctx, cfg.Services, filepath.Join(cfg.ProfileDir, cfg.ProfileName), cfg.Duration)
		}
		if !sleepUntil(ctx, winEnd) {
			return ctx.Err()
		}
		after, err = ScrapeAll(ctx, cfg.Services)
		toolAfter, _ = procSample(self)
		return err
	})

	// Progress while pushing.
	stopProgress := progress(cfg.Progress, func() string {
		line := fmt.Sprintf("sessions %d  pushed %d (errors %d)  delivered %d  in-window %d",
			n, okCount.Load(), errCount.Load(), p.received.Load(), p.inWindow.Load())
		if p.stuck > 0 {
			line += fmt.Sprintf("  (others; pushed to them %d)  stuck %d received %d, kicked %d",
				okOthers.Load(), p.stuck, p.stuckReceived.Load(), p.stuckKickouts.Load())
		}
		return line
	})
	wg.Wait()
	scrapeErr = g.Wait()
	// Drain: wait for what was pushed to arrive; not for what was pushed to
	// stuck sessions, which may wait for ack_wait after ack_wait.
	deadline := time.Now().Add(cfg.Drain)
	for p.received.Load() < okOthers.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	stopProgress()
	res.Profiles = prof.wait()
	if scrapeErr != nil {
		return res, fmt.Errorf("scrape: %w", scrapeErr)
	}

	res.Pushed, res.PushErrors = okCount.Load(), errCount.Load()
	res.Kickouts = p.kickouts.Load() + p.stuckKickouts.Load()
	res.Ended = p.ended.Load() + p.stuckEnded.Load()
	res.WindowSeconds = cfg.Duration.Seconds()
	res.WindowStart = winStart.UTC().Format("15:04:05.000")
	res.PushesPerSec = float64(inWinPushes.Load()) / res.WindowSeconds
	inWin := p.inWindow.Load()
	res.DeliveriesPerSec = float64(inWin) / res.WindowSeconds
	res.Latency = percentilesOf(append(p.lat.values(), p.stuckLat.values()...))
	res.LoadAvg = loadAvg()
	var svc, all float64
	res.CPUSeconds, svc, all = cpuDeltas(before, after)
	// The load tool's own CPU, to tell whether it was the bottleneck; not in
	// the sums.
	res.ToolCPUSeconds = toolAfter.CPUSeconds - toolBefore.CPUSeconds
	if inWin > 0 {
		res.CPUPerMsgUS = svc / float64(inWin) * 1e6
		res.CPUPerMsgWithBackUS = all / float64(inWin) * 1e6
	}
	res.SyscallsPerMsg = syscallsPerMsg(before, after, toolAfter.Syscalls-toolBefore.Syscalls, inWin)
	res.check(p, records)
	if p.stuck > 0 {
		res.split(p, records)
	}
	if res.Pushed == 0 {
		if e, ok := firstErr.Load().(error); ok {
			return res, fmt.Errorf("no push succeeded: %w", e)
		}
	}
	return res, nil
}

// check does the bookkeeping: every pushed seq received exactly once by its
// target session, and nothing else received.
func (r *LoadResult) check(p *sessions, records [][]pushed) {
	var all []pushed
	for _, rs := range records {
		all = append(all, rs...)
	}
	r.checkGroup(p, all)
}

// checkGroup does check's bookkeeping for the sessions in p.list (any
// subset of a pool, found by their idx) and the pushes to them.
func (r *LoadResult) checkGroup(p *sessions, records []pushed) {
	byIdx := make(map[int]*session, len(p.list))
	for _, s := range p.list {
		byIdx[s.idx] = s
	}
	want := make(map[int64]int32)
	for _, x := range records {
		want[x.seq] = x.target
	}
	for _, s := range p.list {
		s.mu.Lock()
		r.WrongTarget += int64(s.wrong)
		r.WrongOptions += int64(s.wrongOptions)
		for seq, c := range s.got {
			r.Delivered += int64(c)
			t, ok := want[seq]
			switch {
			case !ok:
				r.Unexpected += int64(c)
			case int(t) != s.idx:
				// counted in WrongTarget from the body already
			case c > 1:
				r.Duplicates += int64(c - 1)
			}
		}
		s.mu.Unlock()
	}
	for seq, t := range want {
		s := byIdx[int(t)]
		c := int32(0)
		if s != nil {
			s.mu.Lock()
			c = s.got[seq]
			s.mu.Unlock()
		}
		if c == 0 {
			r.Missing++
		}
	}
}

// split fills Others and Stuck: the bookkeeping of check, the window rate
// and the latencies of each group on its own.
func (r *LoadResult) split(p *sessions, records [][]pushed) {
	others := &sessions{list: p.list[p.stuck:]}
	stuck := &sessions{list: p.list[:p.stuck]}
	var recOthers, recStuck []pushed
	for _, rs := range records {
		for _, x := range rs {
			if int(x.target) < p.stuck {
				recStuck = append(recStuck, x)
			} else {
				recOthers = append(recOthers, x)
			}
		}
	}
	group := func(g *sessions, rec []pushed, l *latencies, inWin int64) GroupResult {
		var c LoadResult
		c.checkGroup(g, rec)
		return GroupResult{Sessions: len(g.list), Pushed: int64(len(rec)), Delivered: c.Delivered,
			Missing: c.Missing, Duplicates: c.Duplicates, Unexpected: c.Unexpected, WrongTarget: c.WrongTarget,
			DeliveriesPerSec: float64(inWin) / r.WindowSeconds, Latency: l.percentiles()}
	}
	o := group(others, recOthers, p.lat, p.inWindow.Load())
	o.Kickouts, o.Ended = p.kickouts.Load(), p.ended.Load()
	s := group(stuck, recStuck, p.stuckLat, p.stuckInWindow.Load())
	s.Kickouts, s.Ended = p.stuckKickouts.Load(), p.stuckEnded.Load()
	r.StuckClients = p.stuck
	r.Others = &o
	r.Stuck = &StuckResult{GroupResult: s, NeedAck: p.stuckNeedAck.Load(), Reconnects: p.stuckReconnects.Load()}
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	select {
	case <-time.After(time.Until(t)):
		return true
	case <-ctx.Done():
		return false
	}
}

// progress prints line() every second to w until the returned stop is called.
func progress(w io.Writer, line func() string) (stop func()) {
	if w == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "  [%4.0fs] %s\n", time.Since(start).Seconds(), line())
			}
		}
	}()
	return func() { close(done); <-finished }
}

// pushClients opens n connections to the Push API at addr, each carrying
// key; closeAll closes them.
func pushClients(addr string, tc *tls.Config, key string, n int) (clients []pushpb.PushClient, closeAll func(), err error) {
	var conns []*grpc.ClientConn
	closeAll = func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	for range n {
		c, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(transport(tc)), auth.BearerDialOption(key))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, c)
		clients = append(clients, pushpb.NewPushClient(c))
	}
	return clients, closeAll, nil
}

// window starts the measured window: it opens warmup after now and lasts
// d; deliveries count in it.
func (p *sessions) window(warmup, d time.Duration) (t0, start, end time.Time) {
	t0 = time.Now()
	start = t0.Add(warmup)
	end = start.Add(d)
	p.winStart.Store(start.UnixNano())
	p.winEnd.Store(end.UnixNano())
	return t0, start, end
}

// optionNames spells message options as the protocol names them,
// "NEED_ACK|NEED_OFFLINE".
func optionNames(opts uint32) string {
	var names []string
	for bit := uint32(1); bit != 0 && bit <= opts; bit <<= 1 {
		if opts&bit != 0 {
			names = append(names, msgpb.Option(bit).String())
		}
	}
	return strings.Join(names, "|")
}
