package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/pb/pushpb"
)

// FanoutSize is one fanout configuration: Rooms rooms of Members sessions
// each, every session in one room.
type FanoutSize struct {
	Rooms   int `json:"rooms"`
	Members int `json:"members"`
}

func (s FanoutSize) String() string { return fmt.Sprintf("%d×%d", s.Rooms, s.Members) }

// latencyMembers bounds how many members' receipts give latencies.
const latencyMembers = 2000

// FanoutResult is what one fanout run measured.
type FanoutResult struct {
	Rooms       int     `json:"rooms"`
	Members     int     `json:"members_per_room"`
	Memberships int     `json:"memberships"`
	Bodies      int     `json:"bodies_per_call"`
	TargetRate  float64 `json:"target_calls_per_sec"` // 0: each room's broadcaster as fast as its window lets it
	// Window (without a rate) is how many messages a room's broadcaster
	// lets be on their way to the members (on average); WindowStalls how
	// often it went on after a second without a receipt.
	Window       int     `json:"window,omitempty"`
	WindowStalls int64   `json:"window_stalls,omitempty"`
	JoinSeconds  float64 `json:"join_seconds"` // to join every session to its room
	// BoatRoomMembers is boat's gomsg_boat_room_members after the joins
	// (-1: boat does not export it).
	BoatRoomMembers float64 `json:"boat_room_members"`
	// Bookkeeping over the whole run (warm-up, window and drain).
	Calls      int64 `json:"calls"`       // BroadcastRoom calls that returned a seq per body
	CallErrors int64 `json:"call_errors"` // calls that failed
	Broadcast  int64 `json:"broadcast"`   // messages those calls broadcast
	Expected   int64 `json:"expected"`    // broadcast × members of the room
	fanoutCounts
	Kickouts int64 `json:"kickouts"`
	Ended    int64 `json:"streams_ended"`
	// DrainCutOff: messages were still arriving when the wait for them
	// ended (Drain): Missing counts some that were late, not lost.
	DrainCutOff bool `json:"drain_cut_off"`
	// The measured window.
	WindowStart      string      `json:"window_start"`
	WindowSeconds    float64     `json:"window_seconds"`
	CallsPerSec      float64     `json:"calls_per_sec"`
	BroadcastsPerSec float64     `json:"broadcasts_per_sec"` // messages broadcast by calls started in the window
	DeliveredPerSec  float64     `json:"delivered_per_sec"`  // room messages received in the window (messages × members)
	Latency          Percentiles `json:"latency"`            // BroadcastRoom call start → receipt
	// LatencyEvery: one member in LatencyEvery gives latencies.
	LatencyEvery int                `json:"latency_sample_every"`
	CPUSeconds   map[string]float64 `json:"cpu_seconds"`
	// CPU per delivered room message in the window, microseconds: boat
	// alone; boat, station and carrier; and with the backends.
	BoatCPUPerMsgUS     float64 `json:"boat_cpu_per_msg_us"`
	CPUPerMsgUS         float64 `json:"cpu_per_msg_us"`
	CPUPerMsgWithBackUS float64 `json:"cpu_per_msg_with_backends_us"`
	ToolCPUSeconds      float64 `json:"tool_cpu_seconds"`
	LoadAvg             string  `json:"loadavg"`
	// RoomBatchMean is gomsg_boat_room_batch_messages' mean over the
	// window: messages per room frame sent to a session; RoomFrames the
	// frames.
	RoomBatchMean float64 `json:"room_batch_mean"`
	RoomFrames    float64 `json:"room_frames"`
	// BoatDropped is gomsg_boat_broadcast_dropped_total by reason over the
	// whole run.
	BoatDropped map[string]float64 `json:"boat_dropped,omitempty"`
	Membership  *MembershipMemory  `json:"membership_memory,omitempty"`
	Profiles    []string           `json:"profiles,omitempty"`
}

// MembershipMemory is boat's memory for room memberships: the same open
// sessions sampled before and after they joined their rooms (each after a
// GC and two seconds to settle).
type MembershipMemory struct {
	Sessions          int     `json:"sessions"`
	Memberships       int     `json:"memberships"`
	RSSBefore         float64 `json:"rss_before_bytes"`
	RSSAfter          float64 `json:"rss_after_bytes"`
	HeapBefore        float64 `json:"heap_inuse_before_bytes"`
	HeapAfter         float64 `json:"heap_inuse_after_bytes"`
	RSSPerMembership  float64 `json:"rss_per_membership_bytes"`
	HeapPerMembership float64 `json:"heap_per_membership_bytes"`
	Goroutines        float64 `json:"goroutines_added"`
}

func runFanout(ctx context.Context, o Options, rep *Report) error {
	if len(o.Fanout) == 0 {
		return errors.New("fanout: no sizes")
	}
	for _, size := range o.Fanout {
		if size.Rooms < 1 || size.Members < 1 {
			return fmt.Errorf("fanout: %s: want at least one room of one member", size)
		}
		c, _, err := o.NewCluster(ctx)
		if err != nil {
			return err
		}
		res, err := o.fanout(ctx, c, size)
		c.Stop()
		rep.Runs = append(rep.Runs, RunResult{Label: "fanout " + size.String(), Sessions: size.Rooms * size.Members, Fanout: &res})
		if err != nil {
			return err
		}
	}
	return nil
}

// fanout opens size's sessions, measures boat's memory around their joins
// and broadcasts to their rooms.
func (o *Options) fanout(ctx context.Context, c *Cluster, size FanoutSize) (FanoutResult, error) {
	res := FanoutResult{Rooms: size.Rooms, Members: size.Members, Memberships: size.Rooms * size.Members,
		Bodies: max(1, o.Bodies), TargetRate: o.Rate, BoatRoomMembers: -1}
	if o.Rate == 0 {
		res.Window = max(1, o.Window)
	}
	id := runID()
	n := res.Memberships
	every := max(1, n/latencyMembers)
	rooms := make([]*roomLog, size.Rooms)
	for r := range rooms {
		rooms[r] = newRoomLog(fmt.Sprintf("fanout-%s-%d", id, r))
	}
	members := make([]*member, n)
	for i := range members {
		r := i / size.Members
		members[i] = newMember(rooms[r].name, r, i%every == 0)
		members[i].log = rooms[r]
	}
	o.logf("fanout %s: opening %d sessions", size, n)
	p, err := o.openWith(ctx, c, n, true, id, func(i int) *member { return members[i] })
	if err != nil {
		return res, err
	}
	defer p.close()

	boat, hasBoat := c.Boat()
	var before Sample
	if hasBoat {
		if before, err = settle(ctx, boat); err != nil {
			return res, err
		}
	}
	start := time.Now()
	if err := joinAll(ctx, p, o.ConnectTimeout, o.logf); err != nil {
		return res, err
	}
	res.JoinSeconds = time.Since(start).Seconds()
	o.logf("  %d sessions joined %d rooms in %s", n, size.Rooms, time.Since(start).Round(time.Millisecond))
	if hasBoat {
		after, err := settle(ctx, boat)
		if err != nil {
			return res, err
		}
		res.Membership = &MembershipMemory{Sessions: n, Memberships: n,
			RSSBefore: before.RSSBytes, RSSAfter: after.RSSBytes, HeapBefore: before.HeapInuse, HeapAfter: after.HeapInuse,
			RSSPerMembership:  (after.RSSBytes - before.RSSBytes) / float64(n),
			HeapPerMembership: (after.HeapInuse - before.HeapInuse) / float64(n),
			Goroutines:        after.Goroutines - before.Goroutines}
		o.logf("  boat: %.0f B RSS and %.0f B heap per membership, %.0f goroutines added",
			res.Membership.RSSPerMembership, res.Membership.HeapPerMembership, res.Membership.Goroutines)
		if s, err := scrapeSeries(ctx, boat); err == nil {
			if v, ok := s.sum("gomsg_boat_room_members"); ok {
				res.BoatRoomMembers = v
				if int(v) != n {
					o.logf("  warning: boat counts %.0f memberships after %d joins answered OK", v, n)
				}
			}
		}
	}

	label := "fanout-" + size.String()
	if o.Rate > 0 {
		o.logf("%s: %.0f BroadcastRoom calls/s over %d rooms, %d bodies each, for %s", label, o.Rate, size.Rooms, res.Bodies, o.Duration)
	} else {
		o.logf("%s: %d broadcasters as fast as a window of %d messages lets them, %d bodies each, for %s", label, size.Rooms, res.Window, res.Bodies, o.Duration)
	}
	err = runBroadcast(ctx, p, rooms, size.Members, broadcastConfig{PushAddr: c.PushAddr, TLS: c.ClientTLS, APIKey: c.APIKey,
		Rate: o.Rate, Window: res.Window, Bodies: res.Bodies, Warmup: o.Warmup, Duration: o.Duration, Services: c.Services,
		ProfileDir: o.ProfileDir, ProfileName: label, Progress: o.Progress}, &res)
	if err != nil {
		return res, err
	}
	p.close() // every receipt is recorded before tallying
	res.fanoutCounts = tally(members, rooms)
	res.LatencyEvery = every
	if res.DrainCutOff {
		o.logf("  warning: messages were still arriving when the drain ended: missing counts late ones too")
	}
	o.logf("  %.0f broadcasts/s → %.0f delivered/s  p50 %.2fms p99 %.2fms p999 %.2fms  boat %.2fµs/msg  batch %.1f msgs/frame  missing %d (%d msgs) dup %d ooo %d kicked %d",
		res.BroadcastsPerSec, res.DeliveredPerSec, res.Latency.P50, res.Latency.P99, res.Latency.P999, res.BoatCPUPerMsgUS,
		res.RoomBatchMean, res.Missing, res.MissingMessages, res.Duplicates, res.OutOfOrder, res.Kickouts)
	return res, nil
}

// joinAll joins every session of p to its member's room, 128 at a time.
func joinAll(ctx context.Context, p *sessions, timeout time.Duration, logf func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var joined atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(128)
	for _, s := range p.list {
		g.Go(func() error {
			if err := s.join(gctx); err != nil {
				return fmt.Errorf("session %d (%s): %w", s.idx, s.uid, err)
			}
			if k := joined.Add(1); k%1000 == 0 {
				logf("  joined %d/%d", k, len(p.list))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("join rooms (%d of %d joined): %w", joined.Load(), len(p.list), err)
	}
	return nil
}

// broadcastConfig configures the broadcasters of a fanout run.
type broadcastConfig struct {
	PushAddr string
	TLS      *tls.Config
	APIKey   string
	// Rate is BroadcastRoom calls per second over all rooms, room r's k-th
	// call due at (k×rooms + r)/Rate. Without it each room's broadcaster
	// calls as soon as fewer than Window of its messages are on their way
	// (the members' receipts, averaged, tell).
	Rate   float64
	Window int
	Bodies int
	// Warmup broadcasts before the window; Drain bounds the wait for
	// messages in flight after it (it also ends after 3 s without one).
	Warmup, Duration, Drain time.Duration
	Services                []Service
	ProfileDir, ProfileName string
	Progress                io.Writer
}

// refused reports whether a BroadcastRoom error will not go away by
// calling again.
func refused(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented, codes.InvalidArgument, codes.FailedPrecondition:
		return true
	}
	return false
}

// runBroadcast runs one broadcaster per room (each room's calls one after
// another, so that its messages have an order) and fills res's rates,
// latency, CPU and boat metrics.
func runBroadcast(ctx context.Context, p *sessions, rooms []*roomLog, members int, cfg broadcastConfig, res *FanoutResult) error {
	if cfg.Bodies < 1 {
		cfg.Bodies = 1
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 20 * time.Second
	}
	clients, closeClients, err := pushClients(cfg.PushAddr, cfg.TLS, cfg.APIKey, 4)
	if err != nil {
		return err
	}
	defer closeClients()
	t0, winStart, winEnd := p.window(cfg.Warmup, cfg.Duration)

	var calls, callErrs, sent, inWinCalls, inWinMsgs, stalls atomic.Int64
	var firstErr, refusal atomic.Value
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
	}
	pctx, stopBroadcast := context.WithDeadline(ctx, winEnd)
	defer stopBroadcast()
	var wg sync.WaitGroup
	for r, lg := range rooms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := clients[r%len(clients)]
			for k := 0; lg.next+cfg.Bodies <= maxIndex; k++ {
				if interval > 0 {
					due := t0.Add(time.Duration(k*len(rooms)+r) * interval)
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
				} else {
					stalled, err := lg.waitWindow(pctx, members, max(1, cfg.Window), time.Second)
					if err != nil {
						return
					}
					if stalled {
						stalls.Add(1)
					}
				}
				if pctx.Err() != nil {
					return
				}
				now := time.Now()
				first := lg.next
				bodies := make([]*anypb.Any, cfg.Bodies)
				for j := range bodies {
					bodies[j] = encodeBody(now.UnixNano(), first+j)
				}
				lg.next += cfg.Bodies
				// A call already made finishes even when the window closes.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				resp, err := cl.BroadcastRoom(cctx, &pushpb.BroadcastRoomRequest{Rooms: []string{lg.name}, MsgBodies: bodies})
				cancel()
				if err == nil && len(resp.GetSeqs()) != cfg.Bodies {
					err = fmt.Errorf("BroadcastRoom returned %d seqs for %d bodies", len(resp.GetSeqs()), cfg.Bodies)
				}
				if err != nil {
					callErrs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					if refused(err) {
						refusal.CompareAndSwap(nil, err)
						stopBroadcast()
						return
					}
					// Unavailable, or station's --broadcast-rate: not a
					// hot loop of failing calls.
					select {
					case <-time.After(10 * time.Millisecond):
					case <-pctx.Done():
						return
					}
					continue
				}
				for j := range cfg.Bodies {
					lg.ok.set(first + j)
				}
				lg.sentOK += int64(cfg.Bodies)
				calls.Add(1)
				sent.Add(int64(cfg.Bodies))
				if !now.Before(winStart) {
					inWinCalls.Add(1)
					inWinMsgs.Add(int64(cfg.Bodies))
				}
			}
		}()
	}

	// Scrapes (CPU, and the boat's room metrics) and profiles at the
	// window's ends.
	var before, after map[string]Sample
	var seriesBefore, seriesAfter series
	var prof profileSet
	var toolBefore, toolAfter Sample
	self := os.Getpid()
	g := new(errgroup.Group)
	g.Go(func() error {
		if !sleepUntil(pctx, winStart) {
			return nil // refused: reported below
		}
		var err error
		if before, err = ScrapeAll(ctx, cfg.Services); err != nil {
			return err
		}
		seriesBefore = scrapeRoomMetrics(ctx, cfg.Services)
		toolBefore, _ = procSample(self)
		if cfg.ProfileDir != "" {
			prof.start(ctx, cfg.Services, filepath.Join(cfg.ProfileDir, cfg.ProfileName), cfg.Duration)
		}
		if !sleepUntil(ctx, winEnd) {
			return ctx.Err()
		}
		after, err = ScrapeAll(ctx, cfg.Services)
		seriesAfter = scrapeRoomMetrics(ctx, cfg.Services)
		toolAfter, _ = procSample(self)
		return err
	})
	stopProgress := progress(cfg.Progress, func() string {
		return fmt.Sprintf("calls %d (errors %d)  broadcast %d  delivered %d  in-window %d  kicked %d",
			calls.Load(), callErrs.Load(), sent.Load(), p.received.Load(), p.inWindow.Load(), p.kickouts.Load())
	})
	wg.Wait()
	scrapeErr := g.Wait()
	if e, ok := refusal.Load().(error); ok {
		stopProgress()
		return fmt.Errorf("BroadcastRoom refused (does the API key have the scope it needs?): %w", e)
	}
	var expected int64
	for _, lg := range rooms {
		expected += lg.ok.count() * int64(members)
	}
	// Drain: room messages are at most once, so stop also when nothing
	// arrives for 3 s.
	deadline := time.Now().Add(cfg.Drain)
	last, lastAt := p.received.Load(), time.Now()
	for p.received.Load() < expected && time.Now().Before(deadline) && time.Since(lastAt) < 3*time.Second && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		if v := p.received.Load(); v != last {
			last, lastAt = v, time.Now()
		}
	}
	stopProgress()
	res.DrainCutOff = p.received.Load() < expected && time.Since(lastAt) < 3*time.Second
	res.Profiles = prof.wait()
	if scrapeErr != nil {
		return fmt.Errorf("scrape: %w", scrapeErr)
	}

	res.Calls, res.CallErrors, res.Broadcast, res.Expected = calls.Load(), callErrs.Load(), sent.Load(), expected
	res.Kickouts, res.Ended = p.kickouts.Load(), p.ended.Load()
	res.WindowStalls = stalls.Load()
	res.WindowSeconds = cfg.Duration.Seconds()
	res.WindowStart = winStart.UTC().Format("15:04:05.000")
	res.CallsPerSec = float64(inWinCalls.Load()) / res.WindowSeconds
	res.BroadcastsPerSec = float64(inWinMsgs.Load()) / res.WindowSeconds
	inWin := p.inWindow.Load()
	res.DeliveredPerSec = float64(inWin) / res.WindowSeconds
	res.Latency = p.lat.percentiles()
	res.LoadAvg = loadAvg()
	var svc, all float64
	res.CPUSeconds, svc, all = cpuDeltas(before, after)
	res.ToolCPUSeconds = toolAfter.CPUSeconds - toolBefore.CPUSeconds
	if inWin > 0 {
		res.BoatCPUPerMsgUS = res.CPUSeconds["boat"] / float64(inWin) * 1e6
		res.CPUPerMsgUS = svc / float64(inWin) * 1e6
		res.CPUPerMsgWithBackUS = all / float64(inWin) * 1e6
	}
	res.RoomBatchMean, res.RoomFrames = histogramMean(seriesBefore, seriesAfter, "gomsg_boat_room_batch_messages")
	res.BoatDropped = seriesAfter.byLabel("gomsg_boat_broadcast_dropped_total", "reason")
	if res.Calls == 0 {
		if e, ok := firstErr.Load().(error); ok {
			return fmt.Errorf("no BroadcastRoom call succeeded: %w", e)
		}
	}
	return nil
}

// scrapeRoomMetrics reads every /metrics page of svcs into one set (the
// boat's room metrics appear on the boat's; in-process, on the one page);
// a page that cannot be read is left out.
func scrapeRoomMetrics(ctx context.Context, svcs []Service) series {
	out := series{}
	for _, s := range svcs {
		if s.OpsAddr == "" {
			continue
		}
		page, err := scrapeSeries(ctx, s)
		if err != nil {
			continue
		}
		for k, v := range page {
			out[k] += v
		}
	}
	return out
}

// histogramMean is the mean of histogram name's observations between two
// scrapes, and how many there were.
func histogramMean(before, after series, name string) (mean, count float64) {
	s1, _ := after.sum(name + "_sum")
	s0, _ := before.sum(name + "_sum")
	c1, _ := after.sum(name + "_count")
	c0, _ := before.sum(name + "_count")
	if count = c1 - c0; count > 0 {
		mean = (s1 - s0) / count
	}
	return mean, count
}

// fanoutMarkdown adds the fanout runs' tables.
func fanoutMarkdown(b *strings.Builder, runs []RunResult) {
	var fs []RunResult
	for _, run := range runs {
		if run.Fanout != nil {
			fs = append(fs, run)
		}
	}
	if len(fs) == 0 {
		return
	}
	b.WriteString("Latency is BroadcastRoom call start → receipt by a member (one member in `every` sampled); delivered/s counts room messages received in the window (messages × members); missing counts (message, member) pairs a successful call broadcast and the member never received, `msgs` the messages some member missed; out-of-order counts first receipts of a message older than one the member had.\n\n")
	b.WriteString("| run | rooms × members | rate | calls | broadcasts/s | delivered/s | p50 ms | p99 ms | p999 ms | every | missing (msgs) | dup | out of order | kickouts | call errors | msgs/frame | load avg |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range fs {
		f := run.Fanout
		rate := fmt.Sprintf("max, window %d", f.Window)
		if f.TargetRate > 0 {
			rate = fmt.Sprintf("%.0f calls/s", f.TargetRate)
		}
		missing := fmt.Sprintf("%d (%d)", f.Missing, f.MissingMessages)
		if f.DrainCutOff {
			missing += " still arriving"
		}
		fmt.Fprintf(b, "| %s | %d × %d | %s | %d | %.0f | %.0f | %.2f | %.2f | %.2f | %d | %s | %d | %d | %d | %d | %.1f | %s |\n",
			run.Label, f.Rooms, f.Members, rate, f.Calls, f.BroadcastsPerSec, f.DeliveredPerSec, f.Latency.P50, f.Latency.P99,
			f.Latency.P999, f.LatencyEvery, missing, f.Duplicates, f.OutOfOrder, f.Kickouts, f.CallErrors,
			f.RoomBatchMean, f.LoadAvg)
	}
	b.WriteString("\n| run | CPU s boat | station | carrier | backends | boat µs/msg | services µs/msg | +backends µs/msg | tool CPU s | boat RSS/membership | boat heap/membership | goroutines added by joins | join s | boat dropped |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, run := range fs {
		f := run.Fanout
		rss, heap, gor := "—", "—", "—"
		if m := f.Membership; m != nil {
			rss, heap, gor = fmt.Sprintf("%.0f B", m.RSSPerMembership), fmt.Sprintf("%.0f B", m.HeapPerMembership), fmt.Sprintf("%.0f", m.Goroutines)
		}
		dropped := "0"
		if len(f.BoatDropped) > 0 {
			dropped = fmt.Sprint(f.BoatDropped)
		}
		cpu := f.CPUSeconds
		fmt.Fprintf(b, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %.1f | %s |\n",
			run.Label, cpu["boat"], cpu["station"], cpu["carrier"], cpu["backends"]+cpu["redis"], f.BoatCPUPerMsgUS, f.CPUPerMsgUS,
			f.CPUPerMsgWithBackUS, f.ToolCPUSeconds, rss, heap, gor, f.JoinSeconds, dropped)
	}
	b.WriteString("\n")
}
