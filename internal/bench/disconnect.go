package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// How the disconnect scenario makes boat A's sessions leave.
const (
	DisconnectDrain = "drain" // SIGTERM: the boat drains
	DisconnectKill  = "kill"  // SIGKILL, then the boat starts again on the same address
)

// DisconnectOptions configure the disconnect scenario: Options.Sessions[0]
// sessions on boat A leave at once while Others sessions on boat B take a
// paced load.
type DisconnectOptions struct {
	// Modes are run in order, each on a fresh cluster.
	Modes []string
	// Others are the sessions on boat B; Rate the pushes per second to
	// them, spread evenly.
	Others int
	Rate   float64
	// Held boat A sessions each hold one NEED_ACK|NEED_OFFLINE message
	// they received and never ACK when the boat goes; Stored more boat A
	// users are each pushed one once their stream has ended. Both groups
	// connect again (to boat B) after Redis is clear and must get them.
	Held   int
	Stored int
	// Quiet is the window before the disconnect the others' latency is
	// compared with.
	Quiet time.Duration
	// Timeout bounds the wait for Redis to hold none of boat A's sessions
	// (and for the stored messages on reconnect); Poll is how often Redis
	// is polled.
	Timeout time.Duration
	Poll    time.Duration
	// Isolate holds boat A's sessions in a process of their own, run at
	// the lowest CPU priority (nice 19), as the cluster runs boat A
	// (SpawnConfig.NiceFirstBoat): on one machine the others then measure
	// what the leaving costs the parts they share with boat A (station,
	// carrier, Redis, the queue), not a wait for a core while 100,000
	// streams end on both sides, which production's separate machines do
	// not share.
	Isolate bool
}

func (d *DisconnectOptions) defaults(n int) {
	if len(d.Modes) == 0 {
		d.Modes = []string{DisconnectDrain, DisconnectKill}
	}
	if d.Others <= 0 {
		d.Others = 200
	}
	if d.Rate <= 0 {
		d.Rate = float64(d.Others)
	}
	if d.Held < 0 {
		d.Held = 0
	}
	if d.Stored < 0 {
		d.Stored = 0
	}
	if d.Quiet <= 0 {
		d.Quiet = 5 * time.Second
	}
	if d.Timeout <= 0 {
		d.Timeout = 2 * time.Minute
	}
	if d.Poll <= 0 {
		d.Poll = 20 * time.Millisecond
	}
}

func (d *DisconnectOptions) validate(n int) error {
	for _, m := range d.Modes {
		if m != DisconnectDrain && m != DisconnectKill {
			return fmt.Errorf("mode: %q, want %s, %s or both", m, DisconnectDrain, DisconnectKill)
		}
	}
	if d.Held+d.Stored > n {
		return fmt.Errorf("held %d + stored %d: more than the %d sessions on boat A", d.Held, d.Stored, n)
	}
	return nil
}

// DisconnectResult is what one mass disconnect measured.
type DisconnectResult struct {
	Mode string `json:"mode"`
	// Isolated: boat A and its sessions' holder were asked to run at nice
	// 19; BoatANice and HolderNice are what /proc said they ran at when
	// the signal was sent.
	Isolated   bool `json:"isolated,omitempty"`
	BoatANice  int  `json:"boat_a_nice"`
	HolderNice int  `json:"holder_nice"`
	// Sessions held by boat A, and recorded in Redis (its index) when it
	// went.
	Sessions       int   `json:"sessions"`
	RecordedBefore int64 `json:"recorded_before"`
	// Start is when the signal was sent (unix ns); ClearedAt when a poll
	// first answered that Redis held none of boat A's sessions: its index
	// empty and none of their users' hashes naming the boat.
	Start        int64   `json:"start_unix_ns"`
	ClearedAt    int64   `json:"cleared_at_unix_ns,omitempty"`
	Cleared      bool    `json:"cleared"`
	ClearSeconds float64 `json:"clear_seconds"`
	// IndexEmptySeconds is when the index was first seen empty; HashLeft
	// the hash entries still naming the boat then (the index is kept a
	// superset of them, so 0).
	IndexEmptySeconds float64 `json:"index_empty_seconds"`
	HashLeft          int     `json:"hash_entries_left_at_index_empty"`
	// Left* are what the last poll found when Redis was not clear within
	// the timeout.
	LeftIndex  int64 `json:"left_in_index"`
	LeftHashes int   `json:"left_in_hashes"`
	Polls      int   `json:"polls"`
	PollMS     int64 `json:"poll_interval_ms"`
	// Kill: from the SIGKILL until the restarted process's ops server was
	// up (/readyz), and until its client stream served again (gRPC health
	// SERVING: registered once the killed run's lease expired, and its
	// sessions cleared).
	RestartUpSeconds      float64 `json:"restart_up_seconds,omitempty"`
	RestartServingSeconds float64 `json:"restart_serving_seconds,omitempty"`
	ExitSeconds           float64 `json:"exit_seconds,omitempty"` // drain: until the boat exited
	// DevicesEndedSeconds is until every boat A session's stream had
	// ended on the device's side: kicked (drain), or its connection broken
	// (kill) — when the last device knew to connect elsewhere.
	DevicesEndedSeconds float64          `json:"devices_ended_seconds"`
	Redis               DisconnectRedis  `json:"redis"`
	Others              DisconnectOthers `json:"others"`
	Stored              DisconnectStored `json:"stored"`
	LoadAvg             string           `json:"loadavg"`
	// Profiles: with --profile-dir, every service but boat A, CPU over
	// the span's first seconds (spanProfile) and heap at their end.
	Profiles []string `json:"profiles,omitempty"`
}

// DisconnectRedis is Redis's work from the disconnect until it was clear.
type DisconnectRedis struct {
	// CountsRead: INFO answered (redis-server does; miniredis does not).
	CountsRead bool `json:"counts_read"`
	// Commands is total_commands_processed's rise; Tool the poller's own
	// commands in it; Background the quiet window's rate over the same
	// time (the others' load); Attributed = Commands − Tool − Background.
	// Top are the commands called most, without the poller's own.
	Commands   int64          `json:"commands"`
	Tool       int64          `json:"tool_commands"`
	Background int64          `json:"background_commands_estimate"`
	Attributed int64          `json:"attributed_commands"`
	Top        []CommandCount `json:"top_commands,omitempty"`
	// CPU of redis-server (100 = one core), sampled every 100 ms from
	// /proc: the quiet window's mean, the span's mean and its peak.
	CPUSampled     bool    `json:"cpu_sampled"`
	QuietCPUPct    float64 `json:"quiet_cpu_pct"`
	SpanCPUPct     float64 `json:"span_cpu_pct"`
	PeakCPUPct     float64 `json:"peak_cpu_pct"`
	CPUSampleEvery string  `json:"cpu_sample_every"`
}

// DisconnectOthers is the paced load on boat B's sessions.
type DisconnectOthers struct {
	Sessions   int     `json:"sessions"`
	Rate       float64 `json:"rate"`
	Pushed     int64   `json:"pushed"`
	PushErrors int64   `json:"push_errors"`
	Delivered  int64   `json:"delivered"`
	Missing    int64   `json:"missing"`
	Duplicates int64   `json:"duplicates"`
	Unexpected int64   `json:"unexpected"`
	Kickouts   int64   `json:"kickouts"`
	// Latencies of the messages sent in the quiet window and in the span
	// (from the disconnect until Redis was clear, at least 1 s).
	Quiet       Percentiles `json:"quiet_latency"`
	Span        Percentiles `json:"span_latency"`
	SpanSeconds float64     `json:"span_seconds"`
	// The same split at station's accept timestamp, and the span in
	// slices of half a second: which part of the path the slow messages
	// waited in, and when in the span they were sent.
	QuietStages Stages  `json:"quiet_stages"`
	SpanStages  Stages  `json:"span_stages"`
	SpanSlices  []Slice `json:"span_slices"`
}

// DisconnectStored is the messages that had to be stored for boat A's
// users, and what their reconnected sessions received.
type DisconnectStored struct {
	// Held: sessions that received one message and never ACKed it before
	// the disconnect; HeldReceived of them got it.
	Held         int   `json:"held"`
	HeldReceived int64 `json:"held_received"`
	// Stored: users pushed one message after their stream ended.
	Stored     int   `json:"stored"`
	Pushed     int64 `json:"pushed"` // both groups' messages Push accepted
	PushErrors int64 `json:"push_errors"`
	// Reconnected sessions (held + stored users, to boat B), the messages
	// they got back of those pushed, and the ones never got (lost).
	Reconnected int   `json:"reconnected"`
	Received    int64 `json:"received"`
	Lost        int64 `json:"lost"`
	Duplicates  int64 `json:"duplicates"`
	Unexpected  int64 `json:"unexpected"`
	WrongTarget int64 `json:"wrong_target"`
	// Seconds from the reconnect until the last arrived.
	ReplaySeconds float64 `json:"replay_seconds"`
}

func runDisconnect(ctx context.Context, o Options, rep *Report) error {
	if len(o.Sessions) != 1 {
		return fmt.Errorf("%s: want one session count, got %v", o.Scenario, o.Sessions)
	}
	if o.Transport != TransportGRPC {
		return fmt.Errorf("%s: sessions over grpc only", o.Scenario)
	}
	n := o.Sessions[0]
	d := o.Disconnect
	d.defaults(n)
	if err := d.validate(n); err != nil {
		return err
	}
	for _, mode := range d.Modes {
		c, _, err := o.NewCluster(ctx)
		if err != nil {
			return err
		}
		res, err := disconnectOnce(ctx, &o, d, c, mode, n)
		c.Stop()
		if res != nil {
			rep.Runs = append(rep.Runs, RunResult{Label: "disconnect " + mode, Sessions: n, Disconnect: res})
		}
		if err != nil {
			return fmt.Errorf("%s: %w", mode, err)
		}
	}
	return nil
}

// holdSessions opens boat A's n sessions, in the tool's process or, with
// d.Isolate, in a holder process at nice 19.
func holdSessions(ctx context.Context, o *Options, d DisconnectOptions, c *Cluster, boatA SpawnedBoat, prefix string, n int, opts uint32) (holder, error) {
	start := time.Now()
	if d.Isolate {
		if c.ClientTLS != nil {
			return nil, errors.New("isolate: boat A's sessions are held in another process over plaintext only")
		}
		return startHolder(ctx, holdConfig{ClientAddr: boatA.ClientAddr, Secret: c.Secret, Platform: c.Platform, UIDPrefix: prefix,
			N: n, StreamsPerConn: o.StreamsPerConn, SourceSpread: o.SourceSpread, Held: d.Held, WantOptions: opts,
			Timeout: o.ConnectTimeout, EndedFrom: d.Held, EndedTo: d.Held + d.Stored}, o.logf)
	}
	p, err := openSessions(ctx, openConfig{ClientAddr: boatA.ClientAddr, TLS: c.ClientTLS, Secret: c.Secret, Platform: c.Platform,
		UIDPrefix: prefix, N: n, StreamsPerConn: o.StreamsPerConn, SourceSpread: o.SourceSpread, Timeout: o.ConnectTimeout,
		WaitReady: true, Stuck: d.Held, WantOptions: opts,
		Progress: func(k int) { o.logf("  opened %d/%d sessions (%.0f/s)", k, n, float64(k)/time.Since(start).Seconds()) }})
	if err != nil {
		return nil, err
	}
	return newLocalHolder(p), nil
}

func disconnectOnce(ctx context.Context, o *Options, d DisconnectOptions, c *Cluster, mode string, n int) (*DisconnectResult, error) {
	if len(c.Boats) < 2 {
		return nil, errors.New("needs a cluster of two spawned boats (--spawn)")
	}
	boatA, boatB := c.Boats[0], c.Boats[1]
	res := &DisconnectResult{Mode: mode, Sessions: n, PollMS: d.Poll.Milliseconds(), Isolated: d.Isolate}
	rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddr})
	defer rdb.Close()
	keys := rkeys.Standalone
	run := runID()
	storeOpts := uint32(msgpb.Option_NEED_ACK | msgpb.Option_NEED_OFFLINE)
	loadOpts := uint32(msgpb.Option_NEED_ACK)
	if o.Offline {
		loadOpts = storeOpts
	}

	o.logf("disconnect %s: %d sessions on %s (%d holding a message they never ACK), %d others on %s", mode, n, boatA.ID, d.Held, d.Others, boatB.ID)
	start := time.Now()
	a, err := holdSessions(ctx, o, d, c, boatA, "dis-"+run+"-a-", n, storeOpts)
	if err != nil {
		return nil, fmt.Errorf("boat A sessions: %w", err)
	}
	defer a.close()
	b, err := openSessions(ctx, openConfig{ClientAddr: boatB.ClientAddr, TLS: c.ClientTLS, Secret: c.Secret, Platform: c.Platform,
		UIDPrefix: "dis-" + run + "-b-", N: d.Others, StreamsPerConn: 1, SourceSpread: o.SourceSpread, Timeout: o.ConnectTimeout,
		WaitReady: true, WantOptions: loadOpts, Timed: true})
	if err != nil {
		return nil, fmt.Errorf("boat B sessions: %w", err)
	}
	defer b.close()
	o.logf("  sessions open in %s", time.Since(start).Round(time.Millisecond))

	// Every boat A session is recorded before it goes.
	index := keys.BoatSessions(boatA.ID)
	if err := pollUntil(ctx, 30*time.Second, func() (bool, error) {
		v, err := rdb.SCard(ctx, index).Result()
		res.RecordedBefore = v
		return v >= int64(n), err
	}); err != nil {
		return res, fmt.Errorf("boat A's sessions recorded in Redis: %d of %d: %w", res.RecordedBefore, n, err)
	}

	clients, closeClients, err := pushClients(c.PushAddr, c.ClientTLS, c.APIKey, 4)
	if err != nil {
		return res, err
	}
	defer closeClients()
	var sampler *cpuSampler
	if pid := redisPid(c); pid > 0 {
		sampler = startCPUSampler(pid, 100*time.Millisecond)
		defer sampler.close()
	}

	// The others' load, a second to settle, then the quiet window.
	load := startOthersLoad(ctx, b, clients, c.Platform, d.Rate, loadOpts)
	loadEnded := false
	defer func() {
		if !loadEnded {
			load.end()
		}
	}()
	if !sleepUntil(ctx, time.Now().Add(time.Second)) {
		return res, ctx.Err()
	}
	quietFrom := time.Now()
	quietCounts, quietErr := readRedisCounts(ctx, rdb)
	o.logf("  quiet window: %s, others at %.0f pushes/s", d.Quiet, d.Rate)
	if !sleepUntil(ctx, quietFrom.Add(d.Quiet)) {
		return res, ctx.Err()
	}
	quietTo := time.Now()
	quietEnd, quietEndErr := readRedisCounts(ctx, rdb)

	// The held messages: received, never ACKed, when the boat goes.
	st := &res.Stored
	st.Held, st.Stored = d.Held, d.Stored
	want := make(map[int64]int32) // seq → boat A index of its user
	var wantMu sync.Mutex
	heldSeqs, err := pushEach(ctx, clients, a.uid, 0, d.Held, c.Platform, storeOpts, nil)
	for seq, t := range heldSeqs {
		want[seq] = t
	}
	st.Pushed += int64(len(heldSeqs))
	if err != nil {
		return res, fmt.Errorf("push the held messages: %w", err)
	}
	if err := pollUntil(ctx, 10*time.Second, func() (bool, error) {
		return a.stuckReceived() >= int64(d.Held), nil
	}); err != nil {
		return res, fmt.Errorf("held sessions received %d of %d messages: %w", a.stuckReceived(), d.Held, err)
	}
	st.HeldReceived = a.stuckReceived()

	// The disconnect.
	// Read from /proc: an isolated run must show it was.
	var niceA, niceH error
	res.BoatANice, niceA = procNice(c.boatPid(0))
	res.HolderNice, niceH = procNice(a.pid())
	if err := errors.Join(niceA, niceH); err != nil && d.Isolate {
		return res, fmt.Errorf("isolate: the priorities of boat A and its sessions: %w", err)
	}
	before, countsErr := readRedisCounts(ctx, rdb)
	t0 := time.Now()
	res.Start = t0.UnixNano()
	sig := syscall.SIGTERM
	if mode == DisconnectKill {
		sig = syscall.SIGKILL
	}
	o.logf("  %s: %s to %s", mode, sig, boatA.ID)
	if err := c.signalBoat(0, sig); err != nil {
		return res, err
	}
	var prof *profileSet
	if o.ProfileDir != "" {
		prof = &profileSet{}
		others := slices.DeleteFunc(slices.Clone(c.Services), func(s Service) bool { return s.Name == boatA.Name })
		prof.start(ctx, others, filepath.Join(o.ProfileDir, "disconnect-"+mode), spanProfile+time.Second)
		defer func() { res.Profiles = prof.wait() }()
	}
	g, gctx := errgroup.WithContext(ctx)
	// The goroutines write res: every return waits for them.
	waited := false
	defer func() {
		if !waited {
			_ = g.Wait()
		}
	}()
	g.Go(func() error {
		if err := c.waitBoat(0, time.Minute); err != nil {
			return err
		}
		if mode == DisconnectDrain {
			res.ExitSeconds = time.Since(t0).Seconds()
			return nil
		}
		// Killed: start it again on the same address; it waits for its
		// previous registration to expire, then clears its sessions.
		up, err := c.restartBoat(gctx, 0)
		if !up.IsZero() {
			res.RestartUpSeconds = up.Sub(t0).Seconds()
		}
		if err != nil {
			return fmt.Errorf("restart: %w", err)
		}
		res.RestartServingSeconds = time.Since(t0).Seconds()
		return nil
	})
	// Users pushed a message once their stream has ended.
	g.Go(func() error {
		seqs, err := pushEach(gctx, clients, a.uid, d.Held, d.Held+d.Stored, c.Platform, storeOpts, func(i int) bool {
			select {
			case <-a.ended(i):
				return true
			case <-time.After(time.Until(t0.Add(d.Timeout))):
				return false
			case <-gctx.Done():
				return false
			}
		})
		wantMu.Lock()
		for seq, t := range seqs {
			want[seq] = t
		}
		st.Pushed += int64(len(seqs))
		wantMu.Unlock()
		return err
	})
	uids := make([]string, n)
	for i := range uids {
		uids[i] = a.uid(i)
	}
	w := &clearWatch{rdb: rdb, keys: keys, boatID: boatA.ID, uids: uids, interval: d.Poll}
	werr := w.run(ctx, t0.Add(d.Timeout))
	after, afterErr := readRedisCounts(ctx, rdb)
	res.Polls, res.HashLeft, res.LeftIndex, res.LeftHashes = w.polls, w.hashLeft, w.leftIndex, w.leftHashes
	if !w.indexEmptyAt.IsZero() {
		res.IndexEmptySeconds = w.indexEmptyAt.Sub(t0).Seconds()
	}
	end := time.Now()
	if w.cleared {
		res.Cleared, res.ClearedAt, res.ClearSeconds = true, w.clearedAt.UnixNano(), w.clearedAt.Sub(t0).Seconds()
		end = w.clearedAt
		o.logf("  Redis holds none of %s's sessions after %.3f s (%d polls)", boatA.ID, res.ClearSeconds, w.polls)
	} else {
		o.logf("  Redis still holds %d index members, %d hash entries of %s after %s", w.leftIndex, w.leftHashes, boatA.ID, d.Timeout)
	}
	if werr != nil {
		return res, werr
	}

	// Redis's work in the span.
	rr := &res.Redis
	if quietErr == nil && quietEndErr == nil && countsErr == nil && afterErr == nil {
		rr.CountsRead = true
		rr.Commands = after.total - before.total
		rr.Tool = w.commands + 1 // and the INFO after
		quietRate := float64(quietEnd.total-quietCounts.total-1) / quietEnd.at.Sub(quietCounts.at).Seconds()
		rr.Background = int64(quietRate * after.at.Sub(before.at).Seconds())
		rr.Attributed = rr.Commands - rr.Tool - rr.Background
		rr.Top = topCommands(before, after, 8, map[string]int64{"scard": int64(w.polls), "hgetall": w.hgetalls, "info": 1})
	}
	spanTo := end
	if spanTo.Sub(t0) < time.Second {
		spanTo = t0.Add(time.Second)
	}
	// The load goes on a second past the span, for the messages sent in
	// it to arrive.
	if !sleepUntil(ctx, spanTo.Add(time.Second)) {
		return res, ctx.Err()
	}
	if sampler != nil {
		if avg, _, ok := sampler.between(quietFrom, quietTo); ok {
			rr.QuietCPUPct = avg
		}
		if avg, peak, ok := sampler.between(t0, end); ok {
			rr.CPUSampled, rr.SpanCPUPct, rr.PeakCPUPct = true, avg, peak
			rr.CPUSampleEvery = "100ms"
		}
	}
	records := load.end()
	loadEnded = true
	waited = true
	if err := g.Wait(); err != nil {
		return res, err
	}
	select {
	case <-a.allEnded():
		res.DevicesEndedSeconds = a.allEndedAt().Sub(t0).Seconds()
	case <-time.After(time.Until(t0.Add(d.Timeout))):
		return res, fmt.Errorf("not every boat A session's stream ended within %s of the %s", d.Timeout, mode)
	case <-ctx.Done():
		return res, ctx.Err()
	}

	// The others: every message received once.
	oth := &res.Others
	oth.Sessions, oth.Rate, oth.Pushed, oth.PushErrors = d.Others, d.Rate, load.pushed.Load(), load.errs.Load()
	_ = pollUntil(ctx, 20*time.Second, func() (bool, error) { return b.received.Load() >= oth.Pushed, nil })
	var lr LoadResult
	lr.checkGroup(b, records)
	oth.Delivered, oth.Missing, oth.Duplicates, oth.Unexpected = lr.Delivered, lr.Missing, lr.Duplicates, lr.Unexpected
	oth.Kickouts = b.kickouts.Load()
	oth.QuietStages = b.timed.stagesBetween(quietFrom, quietTo)
	oth.SpanStages = b.timed.stagesBetween(t0, spanTo)
	oth.Quiet, oth.Span = oth.QuietStages.Total, oth.SpanStages.Total
	oth.SpanSlices = b.timed.sliced(t0, spanTo, spanSlice)
	oth.SpanSeconds = spanTo.Sub(t0).Seconds()
	o.logf("  others: quiet p50 %.2f p99 %.2f ms (%d), span p50 %.2f p99 %.2f ms (%d); pushed %d, missing %d, dup %d",
		oth.Quiet.P50, oth.Quiet.P99, oth.Quiet.Count, oth.Span.P50, oth.Span.P99, oth.Span.Count, oth.Pushed, oth.Missing, oth.Duplicates)
	o.logf("  others' p99 up to station / after it: quiet %.2f / %.2f ms, span %.2f / %.2f ms; span p99 by %s slice: %s",
		oth.QuietStages.ToStation.P99, oth.QuietStages.AfterStation.P99, oth.SpanStages.ToStation.P99, oth.SpanStages.AfterStation.P99,
		spanSlice, slicesLine(oth.SpanSlices))

	// The stored messages: boat A's users connect again, to boat B.
	if err := checkStored(ctx, o, c, boatB, a, d, want, storeOpts, st); err != nil {
		return res, err
	}
	res.LoadAvg = loadAvg()
	return res, nil
}
