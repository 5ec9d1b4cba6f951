package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gomsg/gomsg/internal/bench"
)

// The systems, in the order each round runs them.
const (
	GomsgGRPC          = "gomsg-grpc"
	GomsgWS            = "gomsg-ws"
	GomsgMQTT          = "gomsg-mqtt"
	GomsgNATS          = "gomsg-nats"
	CentrifugoMemory   = "centrifugo-memory"
	CentrifugoRedis    = "centrifugo-redis"
	CentrifugoRecovery = "centrifugo-recovery"
	Mosquitto          = "mosquitto"
)

// AllSystems is every system, in running order.
var AllSystems = []string{GomsgGRPC, GomsgWS, GomsgMQTT, GomsgNATS, CentrifugoMemory, CentrifugoRedis, CentrifugoRecovery, Mosquitto}

// Step kinds.
const (
	KindThroughput = "throughput"
	KindLatency    = "latency"
	KindIdle       = "idle"
)

// Config is one comparison.
type Config struct {
	Systems []string `json:"systems"`
	// Sessions of the throughput and latency steps; IdleSessions of the
	// idle step (a fresh process, one connection per session); 0 skips it.
	Sessions     int           `json:"sessions"`
	IdleSessions int           `json:"idle_sessions"`
	Warmup       time.Duration `json:"warmup_ns"`
	Duration     time.Duration `json:"window_ns"`
	Concurrency  int           `json:"concurrency"`
	Rounds       int           `json:"rounds"`
	// GomsgOffline pushes gomsg's messages with NEED_ACK|NEED_OFFLINE (the
	// guarantee of Mosquitto's persistent sessions) instead of NEED_ACK.
	GomsgOffline bool          `json:"gomsg_offline"`
	StepTimeout  time.Duration `json:"step_timeout_ns"`
	// Binaries: gomsg, redis-server, centrifugo and mosquitto.
	Gomsg, RedisServer, Centrifugo, Mosquitto string    `json:"-"`
	Out                                       string    `json:"-"`
	Command                                   string    `json:"-"`
	Progress                                  io.Writer `json:"-"`
}

// Step is one measurement: a fresh system, its sessions, one load run or
// one idle reading.
type Step struct {
	System  string              `json:"system"`
	Kind    string              `json:"kind"`
	Round   int                 `json:"round,omitempty"`
	Seconds float64             `json:"seconds"`
	Error   string              `json:"error,omitempty"`
	Load    *bench.LoadResult   `json:"load,omitempty"`
	Memory  *bench.MemorySample `json:"memory,omitempty"`
	// Report is the raw output of the step, relative to the output
	// directory.
	Report string `json:"report"`
}

// Comparison is what one invocation measured.
type Comparison struct {
	Date     string            `json:"date"`
	Command  string            `json:"command"`
	Machine  bench.Machine     `json:"machine"`
	LoadAvg  [2]string         `json:"loadavg_start_end"`
	Versions map[string]string `json:"versions"`
	Config   Config            `json:"config"`
	Steps    []Step            `json:"steps"`
}

func (c *Config) logf(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	seen := map[string]bool{}
	for _, s := range c.Systems {
		if !strings.Contains(" "+strings.Join(AllSystems, " ")+" ", " "+s+" ") {
			return fmt.Errorf("systems: %q is not one of %s", s, strings.Join(AllSystems, ", "))
		}
		if seen[s] {
			return fmt.Errorf("systems: %s twice", s)
		}
		seen[s] = true
	}
	switch {
	case len(c.Systems) == 0:
		return errors.New("systems: none")
	case c.Sessions < 1 || c.IdleSessions < 0:
		return fmt.Errorf("sessions %d, idle-sessions %d: want ≥ 1 and ≥ 0", c.Sessions, c.IdleSessions)
	case c.Duration <= 0 || c.Warmup < 0 || c.Concurrency < 1 || c.Rounds < 1:
		return errors.New("duration, concurrency and rounds must be positive, warmup not negative")
	}
	return nil
}

// Run runs the comparison: Rounds alternating rounds of throughput (each
// system in turn), then Rounds of latency at half of each system's own
// saturation (the mean of its throughput rounds), then one idle step per
// system. A step that fails is recorded and the others go on; Run returns
// an error naming the failed steps after writing everything.
func Run(ctx context.Context, cfg Config) (*Comparison, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = 5 * time.Minute
	}
	cmp := &Comparison{Date: time.Now().UTC().Format(time.RFC3339), Command: cfg.Command, Machine: bench.DescribeMachine(),
		Config: cfg, Versions: versions(ctx, cfg)}
	cmp.LoadAvg[0] = bench.LoadAvg()
	var failed []string
	record := func(s Step) {
		cmp.Steps = append(cmp.Steps, s)
		if s.Error != "" {
			failed = append(failed, fmt.Sprintf("%s %s #%d: %s", s.System, s.Kind, s.Round, s.Error))
			cfg.logf("  FAILED: %s", s.Error)
		}
	}
	for r := 1; r <= cfg.Rounds; r++ {
		for _, sys := range cfg.Systems {
			record(cfg.step(ctx, sys, KindThroughput, r, 0))
		}
	}
	for r := 1; r <= cfg.Rounds; r++ {
		for _, sys := range cfg.Systems {
			sat, ok := mean(cmp.Steps, sys, KindThroughput, func(l *bench.LoadResult) float64 { return l.DeliveriesPerSec })
			if !ok || sat.mean <= 0 {
				continue
			}
			record(cfg.step(ctx, sys, KindLatency, r, sat.mean/2))
		}
	}
	if cfg.IdleSessions > 0 {
		for _, sys := range cfg.Systems {
			record(cfg.step(ctx, sys, KindIdle, 0, 0))
		}
	}
	cmp.LoadAvg[1] = bench.LoadAvg()
	if err := cmp.write(cfg.Out); err != nil {
		return cmp, err
	}
	if len(failed) > 0 {
		return cmp, fmt.Errorf("%d step(s) failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	return cmp, nil
}

// step runs one measurement bounded by StepTimeout and writes its JSON.
func (cfg *Config) step(ctx context.Context, sys, kind string, round int, rate float64) Step {
	name := kind
	if round > 0 {
		name += "-" + strconv.Itoa(round)
	}
	st := Step{System: sys, Kind: kind, Round: round, Report: filepath.Join(sys, name+".json")}
	dir := filepath.Join(cfg.Out, sys, name)
	if rate > 0 {
		cfg.logf("== %s %s (round %d, %.0f/s: half its saturation)", sys, kind, round, rate)
	} else {
		cfg.logf("== %s %s %s", sys, kind, map[bool]string{true: "(round " + strconv.Itoa(round) + ")"}[round > 0])
	}
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, cfg.StepTimeout)
	defer cancel()
	var err error
	if strings.HasPrefix(sys, "gomsg") {
		err = cfg.gomsgStep(sctx, &st, dir, rate)
	} else {
		err = cfg.peerStep(sctx, &st, dir, rate)
	}
	st.Seconds = time.Since(start).Seconds()
	if err != nil {
		st.Error = err.Error()
	}
	if b, jerr := json.MarshalIndent(st, "", "  "); jerr == nil {
		_ = os.MkdirAll(filepath.Join(cfg.Out, sys), 0o755)
		_ = os.WriteFile(filepath.Join(cfg.Out, st.Report), append(b, '\n'), 0o644)
	}
	return st
}

// gomsgStep is gomsg-bench's own scenario on a fresh spawned cluster (the
// backends process, redis-server, station, carrier, boat), its report
// written in full under dir.
func (cfg *Config) gomsgStep(ctx context.Context, st *Step, dir string, rate float64) error {
	transport := bench.TransportGRPC
	switch st.System {
	case GomsgWS:
		transport = bench.TransportWS
	case GomsgMQTT:
		transport = bench.TransportMQTT
	}
	queue := ""
	if st.System == GomsgNATS {
		queue = "nats"
	}
	o := bench.Options{Scenario: st.Kind, Transport: transport, Sessions: []int{cfg.Sessions}, StreamsPerConn: 1,
		SourceSpread: 16, Warmup: cfg.Warmup, Duration: cfg.Duration, Concurrency: cfg.Concurrency, Rate: rate,
		Offline: cfg.GomsgOffline && st.Kind != KindIdle, Progress: cfg.Progress, Command: cfg.Command,
		NewCluster: func(ctx context.Context) (*bench.Cluster, bool, error) {
			c, err := bench.Spawn(ctx, bench.SpawnConfig{Gomsg: cfg.Gomsg, RedisServer: cfg.RedisServer, Queue: queue,
				LogDir: filepath.Join(dir, "logs"), Pprof: true})
			return c, true, err
		}}
	if st.Kind == KindIdle {
		o.Sessions = []int{cfg.IdleSessions}
	}
	rep, err := bench.Run(ctx, o)
	if rep != nil {
		_, _, _ = rep.Write(dir)
		if n := len(rep.Runs); n > 0 {
			st.Load, st.Memory = rep.Runs[n-1].Load, rep.Runs[n-1].Memory
		}
	}
	return err
}

// peer starts a fresh instance of a peer system in dir.
func (cfg *Config) peer(ctx context.Context, sys, dir string) (peer, string, error) {
	switch sys {
	case Mosquitto:
		m, err := startMosquitto(ctx, mosquittoConfig{Bin: cfg.Mosquitto, Dir: dir})
		return m, "at least once: MQTT 5 QoS 1, persistent sessions (PUBACKed on receipt)", err
	case CentrifugoMemory, CentrifugoRedis, CentrifugoRecovery:
		c := centrifugoConfig{Bin: cfg.Centrifugo, RedisServer: cfg.RedisServer, Engine: "memory", Dir: dir}
		g := "at most once"
		if sys != CentrifugoMemory {
			c.Engine = "redis"
		}
		if sys == CentrifugoRecovery {
			c.Recovery, g = true, "at most once, recovery from history (100 per channel, 5 min)"
		}
		s, err := startCentrifugo(ctx, c)
		return s, g, err
	}
	return nil, "", fmt.Errorf("unknown system %q", sys)
}

func (cfg *Config) peerStep(ctx context.Context, st *Step, dir string, rate float64) error {
	sys, guarantee, err := cfg.peer(ctx, st.System, dir)
	if err != nil {
		return err
	}
	defer sys.stop()
	if st.Kind == KindIdle {
		ms, err := idleMemory(ctx, sys, cfg.IdleSessions, 16)
		st.Memory = &ms
		if err == nil {
			cfg.logf("  %s: %.0f B RSS per idle session (%d sessions)", ms.Process, ms.RSSPerSession, ms.Sessions)
		}
		return err
	}
	p, err := sys.openPool(ctx, cfg.Sessions, 16)
	if err != nil {
		return err
	}
	defer p.closeAll()
	conc := cfg.Concurrency
	if rate > 0 {
		// Paced callers only wait for their due time: more of them keep
		// the rate when single calls are slow (as gomsg-bench does).
		conc = max(conc, 256)
	}
	res, err := runLoad(ctx, sys, p, loadConfig{Rate: rate, Concurrency: conc, Conns: 4, Warmup: cfg.Warmup, Duration: cfg.Duration,
		Progress: cfg.Progress}, guarantee)
	st.Load = &res
	if err == nil {
		cfg.logf("  %.0f delivered/s  p50 %.2fms p99 %.2fms  cpu %.1fµs/msg (with backends %.1f)  missing %d dup %d  errors %d  disconnects %d",
			res.DeliveriesPerSec, res.Latency.P50, res.Latency.P99, res.CPUPerMsgUS, res.CPUPerMsgWithBackUS,
			res.Missing, res.Duplicates, res.PushErrors, res.Ended)
	}
	return err
}

// versions names what was measured.
func versions(ctx context.Context, cfg Config) map[string]string {
	v := map[string]string{}
	for _, s := range cfg.Systems {
		switch {
		case strings.HasPrefix(s, "gomsg"):
			v["gomsg"] = versionLine(ctx, cfg.Gomsg, "version")
		case s == Mosquitto:
			v["mosquitto"] = versionLine(ctx, cfg.Mosquitto, "-h")
		default:
			v["centrifugo"] = versionLine(ctx, cfg.Centrifugo, "version")
		}
	}
	if cfg.RedisServer != "" {
		// "Redis server v=7.0.15 sha=… malloc=… bits=64 build=…"
		f := strings.Fields(versionLine(ctx, cfg.RedisServer, "--version"))
		v["redis"] = strings.Join(f[:min(3, len(f))], " ")
	}
	return v
}

// write saves comparison.json and table.md in dir.
func (c *Comparison) write(dir string) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "comparison.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "table.md"), []byte(c.Markdown()), 0o644)
}

// BuildGomsg builds the gomsg binary from the checkout at root into dir,
// stamped with the checkout's commit (+dirty with local changes) as
// `make build` stamps it, so that the report names what was measured.
func BuildGomsg(ctx context.Context, root, dir string) (string, error) {
	out := filepath.Join(dir, "gomsg")
	var ldflags string
	if rev, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		commit := strings.TrimSpace(string(rev))
		if st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			commit += "+dirty"
		}
		ldflags = "-X github.com/gomsg/gomsg/internal/buildinfo.commit=" + commit
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-ldflags", ldflags, "-o", out, "./cmd/gomsg")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/gomsg in %s: %w\n%s", root, err, b)
	}
	return out, nil
}
