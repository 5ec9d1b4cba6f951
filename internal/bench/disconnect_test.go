package bench

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
	sessionstore "github.com/gomsg/gomsg/internal/session"
)

// boatWatch polls a cluster's Redis on its own, as fast as it can, for any
// session of one boat (its index, or a user's session hash naming it), and
// remembers when it last saw one: a tool that declared Redis clear before
// then stopped polling too early.
type boatWatch struct {
	mu       sync.Mutex
	lastSeen time.Time // start of the last round that found a session
	seen     int       // rounds that found one
	clear    int       // rounds that found none, after one that found some
	lastErr  error
}

func watchBoat(ctx context.Context, addr, boatID string) *boatWatch {
	w := &boatWatch{}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	keys := rkeys.Standalone
	go func() {
		defer rdb.Close()
		for ctx.Err() == nil {
			start := time.Now()
			found, err := boatHeld(ctx, rdb, keys, boatID)
			w.mu.Lock()
			switch {
			case err != nil:
				w.lastErr = err
			case found:
				w.lastSeen = start
				w.seen++
			case w.seen > 0:
				w.clear++
			}
			w.mu.Unlock()
			if err != nil {
				time.Sleep(10 * time.Millisecond) // Redis is not up, or stopped
			}
		}
	}()
	return w
}

// boatHeld reports whether Redis holds any session of boatID.
func boatHeld(ctx context.Context, rdb *redis.Client, keys rkeys.Layout, boatID string) (bool, error) {
	n, err := rdb.SCard(ctx, keys.BoatSessions(boatID)).Result()
	if err != nil || n > 0 {
		return n > 0, err
	}
	iter := rdb.Scan(ctx, 0, "msg/u:*/ss", 1000).Iterator()
	for iter.Next(ctx) {
		vals, err := rdb.HVals(ctx, iter.Val()).Result()
		if err != nil {
			return false, err
		}
		for _, v := range vals {
			if _, b, _ := sessionstore.ParseValue(v); b == boatID {
				return true, nil
			}
		}
	}
	return false, iter.Err()
}

// TestDisconnectSpawn runs the disconnect scenario small against spawned
// processes, drain then kill (a fresh cluster each; the boats keep their
// default lease, since boat A at nice 19 beside other test packages can go
// seconds without CPU, and a short lease would then lapse and refuse
// sessions; the restarted boat takes its crashed run's id over at once
// whatever the lease): every boat A session was
// recorded before and none is left after; Redis was clear no earlier than an
// independent watcher last saw one of them; the other users on boat B got
// every message exactly once, in the quiet window and during the
// disconnect; every message that had to be stored (held un-ACKed when the
// boat went, or pushed after the session ended) reached its user when it
// connected again; and the report shows it with its targets.
func TestDisconnectSpawn(t *testing.T) {
	rs, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found on PATH (run scripts/test.sh, which installs it): %v", err)
	}
	dir := t.TempDir()
	bin, err := BuildGomsg(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	const sessions, others, held, stored = 300, 20, 20, 20
	watchCtx, stopWatches := context.WithCancel(t.Context())
	defer stopWatches()
	var watches []*boatWatch
	stopWatch := func() {}
	spawned := 0
	// The drain with boat A's sessions in the tool's process, the kill with
	// them and boat A isolated at nice 19.
	var runs []RunResult
	var md strings.Builder
	for _, mode := range []string{DisconnectDrain, DisconnectKill} {
		rep, err := Run(t.Context(), Options{
			Scenario: ScenarioDisconnect, Sessions: []int{sessions}, StreamsPerConn: 2, SourceSpread: 4,
			ConnectTimeout: 30 * time.Second,
			Disconnect: DisconnectOptions{Modes: []string{mode}, Others: others, Rate: 40,
				Held: held, Stored: stored, Quiet: time.Second, Timeout: time.Minute, Isolate: mode == DisconnectKill},
			NewCluster: func(ctx context.Context) (*Cluster, bool, error) {
				spawned++
				// The previous cluster is stopped: so is its watcher.
				stopWatch()
				var wctx context.Context
				wctx, stopWatch = context.WithCancel(watchCtx)
				c, err := Spawn(ctx, SpawnConfig{Gomsg: bin, RedisServer: rs, LogDir: filepath.Join(dir, "logs", string(rune('0'+spawned))),
					Boats: 2, NiceFirstBoat: mode == DisconnectKill})
				if err == nil {
					watches = append(watches, watchBoat(wctx, c.RedisAddr, c.Boats[0].ID))
				}
				return c, true, err
			},
			Command: "go test ./internal/bench -run TestDisconnectSpawn",
		})
		if err != nil {
			t.Fatalf("%s: run: %v", mode, err)
		}
		runs = append(runs, rep.Runs...)
		md.WriteString(rep.Markdown())
	}
	stopWatches()
	if len(runs) != 2 || len(watches) != 2 {
		t.Fatalf("%d runs on %d clusters, want 2 and 2", len(runs), len(watches))
	}
	for i, mode := range []string{DisconnectDrain, DisconnectKill} {
		d := runs[i].Disconnect
		if d == nil || d.Mode != mode {
			t.Fatalf("run %d: %+v, want the %s disconnect", i, runs[i], mode)
		}
		if isolated := mode == DisconnectKill; d.Isolated != isolated {
			t.Errorf("%s: isolated %v, want %v", mode, d.Isolated, isolated)
		} else if want := map[bool]int{false: 0, true: 19}[isolated]; d.BoatANice != want || d.HolderNice != want {
			t.Errorf("%s: boat A ran at nice %d and its sessions' holder at %d, want %d each", mode, d.BoatANice, d.HolderNice, want)
		}
		if d.Sessions != sessions || d.RecordedBefore != sessions {
			t.Errorf("%s: sessions %d, recorded before %d; want %d each", mode, d.Sessions, d.RecordedBefore, sessions)
		}
		if !d.Cleared || d.ClearSeconds <= 0 || d.LeftIndex != 0 || d.LeftHashes != 0 || d.HashLeft != 0 {
			t.Errorf("%s: cleared %v after %.3f s, left %d in the index and %d in hashes (%d when the index emptied); want cleared, nothing left",
				mode, d.Cleared, d.ClearSeconds, d.LeftIndex, d.LeftHashes, d.HashLeft)
		}
		w := watches[i]
		w.mu.Lock()
		lastSeen, seen, clear := w.lastSeen, w.seen, w.clear
		w.mu.Unlock()
		if seen == 0 || clear == 0 {
			t.Errorf("%s: the watcher saw boat A's sessions in %d rounds and then none in %d; want both > 0", mode, seen, clear)
		}
		if cleared := time.Unix(0, d.ClearedAt); !lastSeen.Before(cleared) {
			t.Errorf("%s: the tool found Redis clear at %s, but a session was still there at %s (%s later): it stopped polling too early",
				mode, cleared.Format("15:04:05.000"), lastSeen.Format("15:04:05.000"), lastSeen.Sub(cleared))
		}
		if mode == DisconnectKill && (d.RestartUpSeconds <= 0 || d.RestartServingSeconds < d.RestartUpSeconds) {
			t.Errorf("kill: restarted boat up after %v s, serving after %v s; want 0 < up ≤ serving", d.RestartUpSeconds, d.RestartServingSeconds)
		}
		if mode == DisconnectDrain && d.ExitSeconds <= 0 {
			t.Errorf("drain: boat exited after %v s, want > 0", d.ExitSeconds)
		}
		// A drained boat exits once its streams are done, so its devices'
		// streams ended before (the second allows for the tool's view).
		if d.DevicesEndedSeconds <= 0 || mode == DisconnectDrain && d.DevicesEndedSeconds > d.ExitSeconds+1 {
			t.Errorf("%s: every device's stream ended %v s after the signal (boat exited after %v s); want > 0, and by the exit", mode, d.DevicesEndedSeconds, d.ExitSeconds)
		}
		o := d.Others
		if o.Sessions != others || o.Pushed == 0 || o.PushErrors != 0 || o.Delivered != o.Pushed || o.Missing != 0 || o.Duplicates != 0 || o.Unexpected != 0 || o.Kickouts != 0 {
			t.Errorf("%s: others %+v; want %d sessions, delivered = pushed > 0, no errors, loss, duplicates or kickouts", mode, o, others)
		}
		if o.Quiet.Count == 0 || o.Span.Count == 0 || o.SpanSeconds < 1 {
			t.Errorf("%s: others' latency samples quiet %d, span %d over %.2f s; want both > 0, span ≥ 1 s", mode, o.Quiet.Count, o.Span.Count, o.SpanSeconds)
		}
		sliced := 0
		for _, s := range o.SpanSlices {
			sliced += s.Total.Count
		}
		if sliced != o.Span.Count || o.SpanStages.ToStation.Count != o.Span.Count || o.SpanStages.ToStation.Max > o.Span.Max ||
			o.SpanStages.AfterStation.Max > o.Span.Max {
			t.Errorf("%s: span %+v, its stages %+v, its slices hold %d messages; want the same messages, no part above the total",
				mode, o.Span, o.SpanStages, sliced)
		}
		st := d.Stored
		if st.Held != held || st.HeldReceived != held || st.Stored != stored || st.Pushed != held+stored || st.PushErrors != 0 {
			t.Errorf("%s: stored %+v; want %d held (all received), %d stored, %d pushed", mode, st, held, stored, held+stored)
		}
		if st.Reconnected != held+stored || st.Received != held+stored || st.Lost != 0 || st.Unexpected != 0 || st.WrongTarget != 0 {
			t.Errorf("%s: reconnected %d, received back %d, lost %d, unexpected %d, wrong target %d; want %d, %d, 0, 0, 0",
				mode, st.Reconnected, st.Received, st.Lost, st.Unexpected, st.WrongTarget, held+stored, held+stored)
		}
		rr := d.Redis
		if !rr.CountsRead || rr.Commands <= rr.Tool || rr.Tool < int64(d.Polls) || !rr.CPUSampled || rr.PeakCPUPct < rr.SpanCPUPct {
			t.Errorf("%s: redis %+v (polls %d); want counts read, more commands than the poller's own (≥ polls), CPU sampled, peak ≥ mean", mode, rr, d.Polls)
		}
	}
	for _, want := range []string{"| drain | 300 | 300 | ", "| kill (isolated) | 300 | 300 | ", "| drain | 20 | 40/s | ",
		"Redis clear of the boat's sessions, kill (isolated), 300 sessions", "stored messages lost, drain, 300 sessions | 0 | 0 of 40 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// TestCPUSamplerBetween checks the span's mean and peak CPU share from
// known samples: the interval samples bracketing the span, the peak the
// busiest of them.
func TestCPUSamplerBetween(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	s := &cpuSampler{}
	// CPU seconds at 0, 1, 2, 3, 4 s: busy 10 %, 50 %, 20 %, 100 %.
	for i, cpu := range []float64{0, 0.1, 0.6, 0.8, 1.8} {
		s.t = append(s.t, t0.Add(time.Duration(i)*time.Second))
		s.cpu = append(s.cpu, cpu)
	}
	avg, peak, ok := s.between(t0.Add(1500*time.Millisecond), t0.Add(2500*time.Millisecond))
	// Bracketed by the samples at 1 s and 3 s: 0.7 s over 2 s.
	if !ok || !near(avg, 35) || !near(peak, 50) {
		t.Errorf("between 1.5 s and 2.5 s: avg %v, peak %v, ok %v; want 35, 50, true", avg, peak, ok)
	}
	if avg, peak, ok = s.between(t0, t0.Add(4*time.Second)); !ok || !near(avg, 45) || !near(peak, 100) {
		t.Errorf("between 0 and 4 s: avg %v, peak %v, ok %v; want 45, 100, true", avg, peak, ok)
	}
	if _, _, ok = s.between(t0.Add(3500*time.Millisecond), t0.Add(5*time.Second)); ok {
		t.Error("a span past the last sample gave a figure")
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestTopCommands orders Redis's command counts by calls in the span, the
// tool's own taken out.
func TestTopCommands(t *testing.T) {
	t.Parallel()
	a := redisCounts{calls: map[string]int64{"hdel": 10, "scard": 5, "get": 7}}
	b := redisCounts{calls: map[string]int64{"hdel": 110, "scard": 205, "get": 7, "srem": 100, "hmget": 40}}
	got := topCommands(a, b, 2, map[string]int64{"scard": 200})
	want := []CommandCount{{"hdel", 100}, {"srem", 100}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("top = %v, want %v", got, want)
	}
}
