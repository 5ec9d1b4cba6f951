package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomsg/gomsg/internal/bench"
)

// loadConfig is one load run against a peer, with gomsg-bench's meaning of
// each knob: Rate 0 publishes as fast as Concurrency callers can, each
// waiting for its call; Rate > 0 paces call i at t0 + i/Rate. Deliveries
// count in the window [warm-up end, + Duration]; after it the run waits up
// to Drain for what is still on its way.
type loadConfig struct {
	Rate                    float64
	Concurrency, Conns      int
	Warmup, Duration, Drain time.Duration
	Progress                io.Writer
}

type record struct {
	seq    int64
	target int32
}

// runLoad publishes to the pool's users and measures, filling a
// bench.LoadResult so that a peer's step reads like gomsg's: delivered/s
// is receipts in the window ÷ window, latency is publish call start →
// receipt of messages sent from the window's start on, CPU per message is
// the peer's processes' CPU in the window ÷ receipts in it. Disconnects go
// in streams_ended.
func runLoad(ctx context.Context, sys peer, p *pool, cfg loadConfig, guarantee string) (bench.LoadResult, error) {
	if cfg.Drain <= 0 {
		cfg.Drain = 20 * time.Second
	}
	p.reset()
	n := len(p.list)
	res := bench.LoadResult{Sessions: n, TargetRate: cfg.Rate, Concurrency: cfg.Concurrency, MsgOptions: guarantee}
	pub, err := sys.newPublisher(ctx, cfg.Conns)
	if err != nil {
		return res, err
	}
	defer pub.close()

	t0 := time.Now()
	winStart := t0.Add(cfg.Warmup)
	winEnd := winStart.Add(cfg.Duration)
	p.winStart.Store(winStart.UnixNano())
	p.winEnd.Store(winEnd.UnixNano())
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
	}
	var next, ok, failed, inWin atomic.Int64
	var firstErr atomic.Value
	records := make([][]record, cfg.Concurrency)
	pctx, stop := context.WithDeadline(ctx, winEnd)
	defer stop()
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 64)
			for {
				i := next.Add(1) - 1
				if interval > 0 {
					due := t0.Add(time.Duration(i) * interval)
					if !due.Before(winEnd) {
						return
					}
					select {
					case <-time.After(time.Until(due)):
					case <-pctx.Done():
						return
					}
				}
				if pctx.Err() != nil {
					return
				}
				target := int(i % int64(n))
				now := time.Now()
				buf = encodePayload(buf[:0], now.UnixNano(), target, i)
				// A call already sent finishes when the window closes.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err := pub.publish(cctx, p.list[target].topic, buf)
				cancel()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
				if !now.Before(winStart) {
					inWin.Add(1)
				}
				records[w] = append(records[w], record{seq: i, target: int32(target)})
			}
		}()
	}

	var before, after map[string]bench.Sample
	var toolBefore, toolAfter float64
	var scrapeErr error
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		if !bench.SleepUntil(ctx, winStart) {
			scrapeErr = ctx.Err()
			return
		}
		if before, scrapeErr = bench.ScrapeAll(ctx, sys.services()); scrapeErr != nil {
			return
		}
		toolBefore = bench.ToolCPU()
		if !bench.SleepUntil(ctx, winEnd) {
			scrapeErr = ctx.Err()
			return
		}
		after, scrapeErr = bench.ScrapeAll(ctx, sys.services())
		toolAfter = bench.ToolCPU()
	}()
	stopProgress := bench.Progress(cfg.Progress, func() string {
		return fmt.Sprintf("sessions %d  published %d (errors %d)  delivered %d  in-window %d  disconnects %d",
			n, ok.Load(), failed.Load(), p.received.Load(), p.inWindow.Load(), p.disconnects.Load())
	})
	wg.Wait()
	<-scraped
	for deadline := time.Now().Add(cfg.Drain); p.received.Load() < ok.Load() && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(20 * time.Millisecond)
	}
	stopProgress()
	if scrapeErr != nil {
		return res, fmt.Errorf("read CPU: %w", scrapeErr)
	}
	res.Pushed, res.PushErrors, res.Ended = ok.Load(), failed.Load(), p.disconnects.Load()
	res.WindowSeconds = cfg.Duration.Seconds()
	res.WindowStart = winStart.UTC().Format("15:04:05.000")
	res.PushesPerSec = float64(inWin.Load()) / res.WindowSeconds
	delivered := p.inWindow.Load()
	res.DeliveriesPerSec = float64(delivered) / res.WindowSeconds
	p.mu.Lock()
	res.Latency = bench.PercentilesOf(p.lat)
	p.mu.Unlock()
	res.LoadAvg = bench.LoadAvg()
	var svc, all float64
	res.CPUSeconds, svc, all = bench.CPUDeltas(before, after)
	res.ToolCPUSeconds = toolAfter - toolBefore
	if delivered > 0 {
		res.CPUPerMsgUS = svc / float64(delivered) * 1e6
		res.CPUPerMsgWithBackUS = all / float64(delivered) * 1e6
	}
	check(&res, p, records)
	if res.Pushed == 0 {
		return res, fmt.Errorf("no publish succeeded (first error: %v)", firstErr.Load())
	}
	return res, nil
}

// check does gomsg-bench's bookkeeping: every published seq received
// exactly once by its target session, and nothing else received.
func check(r *bench.LoadResult, p *pool, records [][]record) {
	want := make(map[int64]int32)
	for _, rs := range records {
		for _, x := range rs {
			want[x.seq] = x.target
		}
	}
	for _, c := range p.list {
		c.mu.Lock()
		r.WrongTarget += int64(c.wrong)
		for seq, k := range c.got {
			r.Delivered += int64(k)
			t, ok := want[seq]
			switch {
			case !ok:
				r.Unexpected += int64(k)
			case int(t) == c.idx && k > 1:
				r.Duplicates += int64(k - 1)
			}
		}
		c.mu.Unlock()
	}
	for seq, t := range want {
		c := p.list[t]
		c.mu.Lock()
		if c.got[seq] == 0 {
			r.Missing++
		}
		c.mu.Unlock()
	}
}

// idleMemory measures the connection holder's memory before and after
// opening n idle sessions on a fresh process, as gomsg-bench's idle does
// for boat: a forced GC where there is a collector (Centrifugo's pprof;
// none for Mosquitto, which is C and gives RSS only), two seconds to
// settle, then a reading.
func idleMemory(ctx context.Context, sys peer, n, spread int) (bench.MemorySample, error) {
	h := sys.holder()
	ms := bench.MemorySample{Process: h.Name, Sessions: n, Conns: n, FreshProcess: true}
	before, err := bench.Settle(ctx, h)
	if err != nil {
		return ms, err
	}
	p, err := sys.openPool(ctx, n, spread)
	if err != nil {
		return ms, err
	}
	defer p.closeAll()
	after, err := bench.Settle(ctx, h)
	if err != nil {
		return ms, err
	}
	ms.RSSBefore, ms.RSSAfter = before.RSSBytes, after.RSSBytes
	ms.HeapBefore, ms.HeapAfter = before.HeapInuse, after.HeapInuse
	ms.Goroutines = after.Goroutines - before.Goroutines
	ms.RSSPerSession = (after.RSSBytes - before.RSSBytes) / float64(n)
	ms.HeapPerSession = (after.HeapInuse - before.HeapInuse) / float64(n)
	ms.StackPerSession = (after.StackInuse - before.StackInuse) / float64(n)
	return ms, nil
}
