// Command peers runs gomsg side by side with Centrifugo and Mosquitto on
// one machine, in one invocation, and prints one Markdown table. It is
// `gomsg-bench peers`; it lives in a module of its own so that the peers'
// client libraries (centrifuge-go, paho.golang) stay out of gomsg's module
// and of the device SDK's. gomsg is measured with gomsg-bench's own
// scenarios (internal/bench); the peers with the same sessions, windows,
// callers and definitions.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gomsg/gomsg/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "gomsg-bench peers: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `gomsg-bench peers — gomsg vs Centrifugo and Mosquitto, side by side

Runs, in alternating rounds, gomsg (device sessions over gRPC, over
WebSocket and over MQTT 5; and over gRPC with NATS JetStream as its queue),
Centrifugo %s (memory engine, Redis engine, Redis engine with
history and recovery) and Mosquitto 2 (MQTT 5, QoS 1, persistent sessions),
each a fresh private instance on free loopback ports: throughput rounds, then
latency rounds at half of each system's own saturation, then memory per idle
session. Prints one Markdown table; raw JSON per step in --out.

Centrifugo is built into %s when missing (a few minutes, once);
mosquitto is Debian's package (installed when missing, as root; its own
service on port 1883 is never used).

Flags:
`, CentrifugoVersion, must(centrifugoCache()))
		fs.PrintDefaults()
	}
	systems := fs.String("systems", strings.Join(AllSystems, ","), "systems to run, comma-separated, in this order each round")
	sessions := fs.Int("sessions", 1000, "sessions of the throughput and latency steps (one connection each)")
	idle := fs.Int("idle-sessions", 10000, "sessions of the idle step (a fresh process each); 0 skips it")
	dur := fs.Duration("duration", 20*time.Second, "measured window of each load step")
	warm := fs.Duration("warmup", 2*time.Second, "publishing before the window")
	conc := fs.Int("concurrency", 64, "concurrent publishers when saturated (paced: at least 256)")
	rounds := fs.Int("rounds", 2, "alternating rounds of throughput, then of latency")
	offline := fs.Bool("gomsg-offline", true, "push gomsg's messages with NEED_ACK|NEED_OFFLINE (the guarantee of Mosquitto's persistent sessions); false: NEED_ACK alone")
	stepTimeout := fs.Duration("step-timeout", 5*time.Minute, "bound of each step")
	out := fs.String("out", "bench-results/peers", "directory for comparison.json, table.md and every step's raw output")
	gomsgBin := fs.String("gomsg", "", "gomsg binary (default: built from the checkout --root names)")
	root := fs.String("root", ".", "the gomsg checkout to build gomsg from")
	redisBin := fs.String("redis-server", "", "redis-server binary (default: from PATH)")
	cent := fs.String("centrifugo", "", "Centrifugo v6 binary (default: the cached install of "+CentrifugoVersion+", built when missing)")
	mosq := fs.String("mosquitto", "", "mosquitto 2 binary (default: from PATH or /usr/sbin; installed from Debian's package when missing)")
	install := fs.Bool("install", true, "install Centrifugo and mosquitto when missing")
	installOnly := fs.Bool("install-only", false, "install Centrifugo (and mosquitto when missing) and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }
	cfg := Config{Systems: strings.Split(*systems, ","), Sessions: *sessions, IdleSessions: *idle, Warmup: *warm, Duration: *dur,
		Concurrency: *conc, Rounds: *rounds, GomsgOffline: *offline, StepTimeout: *stepTimeout, Out: *out,
		Command: "gomsg-bench peers " + strings.Join(args, " "), Progress: os.Stderr}
	if err := cfg.Validate(); err != nil {
		return err
	}
	var needGomsg, needCentrifugo, needMosquitto bool
	for _, s := range cfg.Systems {
		switch {
		case strings.HasPrefix(s, "gomsg"):
			needGomsg = true
		case s == Mosquitto:
			needMosquitto = true
		default:
			needCentrifugo = true
		}
	}
	var err error
	if needCentrifugo || *installOnly {
		if cfg.Centrifugo, err = findCentrifugo(ctx, *cent, *install || *installOnly, logf); err != nil {
			return err
		}
	}
	if needMosquitto || *installOnly {
		if cfg.Mosquitto, err = findMosquitto(ctx, *mosq, *install || *installOnly, logf); err != nil {
			return err
		}
	}
	if *installOnly {
		logf("centrifugo: %s\nmosquitto: %s", cfg.Centrifugo, cfg.Mosquitto)
		return nil
	}
	if cfg.RedisServer = *redisBin; cfg.RedisServer == "" {
		if cfg.RedisServer, err = exec.LookPath("redis-server"); err != nil {
			return errors.New("redis-server is not on PATH (gomsg and Centrifugo's Redis engine each start a private one): apt-get install redis-server")
		}
	}
	if needGomsg {
		if cfg.Gomsg = *gomsgBin; cfg.Gomsg == "" {
			tmp, err := os.MkdirTemp("", "gomsg-peers-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			logf("building ./cmd/gomsg …")
			if cfg.Gomsg, err = BuildGomsg(ctx, *root, tmp); err != nil {
				return err
			}
		}
	}
	nofile, err := bench.RaiseNoFile()
	if err != nil {
		return err
	}
	if need := max(cfg.Sessions, cfg.IdleSessions) + 1000; uint64(need) > nofile {
		return fmt.Errorf("open-files limit %d: %d sessions need %d", nofile, max(cfg.Sessions, cfg.IdleSessions), need)
	}
	cmp, err := Run(ctx, cfg)
	if cmp != nil {
		fmt.Print("\n" + cmp.Markdown())
		abs, _ := filepath.Abs(cfg.Out)
		logf("wrote %s (comparison.json, table.md, one JSON per step and each step's raw output)", abs)
	}
	return err
}

func must(s string, err error) string {
	if err != nil {
		return "(no cache directory: " + err.Error() + ")"
	}
	return s
}
