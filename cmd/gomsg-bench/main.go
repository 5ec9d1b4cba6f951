// Command gomsg-bench measures a gomsg cluster — acked deliveries per
// second, end-to-end latency, boat memory per session, CPU per message — next
// to baselines measured in the same run. See BENCHMARKS.md.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/bench"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/buildinfo"
)

const usage = `gomsg-bench — load tool and benchmarks for gomsg

Usage:
  gomsg-bench throughput [flags]   as fast as it can, 1,000 sessions (default)
  gomsg-bench latency    [flags]   fixed rate: half of the measured saturation
  gomsg-bench idle       [flags]   boat memory per idle session vs a bare gRPC floor
  gomsg-bench scaling    [flags]   throughput, p99, memory at 10,000 and 50,000 sessions
  gomsg-bench fanout     [flags]   room broadcasts: 1 room × 10,000 members, 100 rooms × 100
  gomsg-bench disconnect --spawn [flags]   100,000 sessions leave one boat at once (drain, kill): Redis
                                   clean-up time and work, other users' p99 on a second boat, no stored message lost
  gomsg-bench peers      [flags]   gomsg (gRPC, WebSocket, MQTT) vs Centrifugo (memory, Redis, Redis + recovery) and
                                   Mosquitto (MQTT 5, QoS 1, persistent sessions), alternating rounds, one table;
                                   run inside a gomsg checkout (it builds the bench/peers module)
  gomsg-bench floor-server --addr A --ops-addr B   the bare gRPC floor (started by idle)
  gomsg-bench version

With --spawn the tool starts the cluster itself (gomsg dev --services none,
boat, station, carrier as separate processes); without it, give the running
cluster's addresses. throughput and idle with --spawn --compare-tls measure
the same load on a plaintext and a TLS cluster, side by side. --transport ws
opens the device sessions over boat's WebSocket (/v1/connect) instead of the
gRPC stream. Run "gomsg-bench <scenario> -h" for the flags.
`

func main() {
	bench.RunHolderIfAsked()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "floor-server":
		err = runFloor(ctx, args)
	case "peers":
		err = runPeers(ctx, args)
	case bench.ScenarioThroughput, bench.ScenarioLatency, bench.ScenarioIdle, bench.ScenarioScaling, bench.ScenarioFanout, bench.ScenarioDisconnect:
		err = runScenario(ctx, cmd, args)
	case "version", "-version", "--version":
		fmt.Println("gomsg-bench", buildinfo.Read())
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "gomsg-bench: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "gomsg-bench %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func runFloor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floor-server", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7400", "listen address of the bare gRPC server")
	opsAddr := fs.String("ops-addr", "127.0.0.1:7490", "listen address of /metrics and /debug/pprof/")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	return bench.RunFloorServer(ctx, *addr, *opsAddr, log)
}

var defaultSessions = map[string]string{
	bench.ScenarioThroughput: "1000",
	bench.ScenarioLatency:    "1000",
	bench.ScenarioIdle:       "10000,50000",
	bench.ScenarioScaling:    "10000,50000",
	bench.ScenarioDisconnect: "100000",
}

func runScenario(ctx context.Context, scenario string, args []string) error {
	fs := flag.NewFlagSet(scenario, flag.ContinueOnError)
	spawn := fs.Bool("spawn", false, "start the cluster as separate processes (a fresh one per measured size)")
	gomsgBin := fs.String("gomsg", "", "gomsg binary for --spawn (default: go build ./cmd/gomsg)")
	redisBin := fs.String("redis-server", "auto", "with --spawn: redis-server binary for the cluster's Redis; auto: from PATH if there; embedded: gomsg dev's miniredis")
	sessionsFlag := fs.String("sessions", defaultSessions[scenario], "session counts, comma-separated")
	spc := fs.Int("streams-per-conn", 0, "session streams per client connection (0: 1, or the fewest that fit the open-files limit)")
	spread := fs.Int("source-spread", 16, "source addresses 127.0.0.2… to spread client connections over")
	dur := fs.Duration("duration", 20*time.Second, "measured window of each load run")
	warm := fs.Duration("warmup", 2*time.Second, "pushing before the window")
	baseDur := fs.Duration("baseline-duration", 5*time.Second, "each baseline's measured time; 0 skips baselines")
	conc := fs.Int("concurrency", 64, "concurrent Push callers (and baseline callers)")
	rate := fs.Float64("rate", 0, "latency: pushes per second (0: half the measured saturation); fanout: BroadcastRoom calls per second over all rooms (0: each room's broadcaster as fast as --window lets it); disconnect: pushes per second to the others (0: one per session a second)")
	window := fs.Int("window", 8, "fanout without --rate: messages a room's broadcaster lets be on their way to its members (averaged over them) before its next call")
	rooms := fs.String("rooms", "1,100", "fanout: rooms of each size, comma-separated, paired with --members")
	members := fs.String("members", "10000,100", "fanout: members per room of each size, comma-separated, paired with --rooms")
	bodies := fs.Int("bodies", 1, "fanout: messages (bodies) per BroadcastRoom call")
	profDir := fs.String("profile-dir", "", "capture CPU and heap profiles of every service into this directory (spawned services run with --pprof)")
	out := fs.String("out", "bench-results", "directory for <scenario>.json, <scenario>.md and logs")
	// A running cluster.
	clientAddr := fs.String("client-addr", "127.0.0.1:7100", "boat's client stream address")
	wsAddr := fs.String("ws-addr", "127.0.0.1:7180", "boat's WebSocket address (--transport ws)")
	mqttAddr := fs.String("mqtt-addr", "127.0.0.1:7183", "boat's MQTT address (--transport mqtt)")
	pushAddr := fs.String("push-addr", "127.0.0.1:7200", "station's Push API (gRPC) address")
	redisAddr := fs.String("redis-addr", "127.0.0.1:7301", "the cluster's Redis (for the Redis baseline)")
	brokers := fs.String("kafka-brokers", "127.0.0.1:7302", "the cluster's Kafka brokers (for the Kafka baseline)")
	secret := fs.String("jwt-secret", app.DevJWTSecret, "HS256 secret of device tokens")
	key := fs.String("api-key", app.DevAPIKey, "Push API key with the push scope, and broadcast for fanout (a spawned cluster gets a random one)")
	platform := fs.String("platform", "ios", "platform of the sessions")
	opsList := fs.String("ops", "boat=127.0.0.1:7290", "name=ops-addr of each process to read /metrics from, comma-separated; one must be named boat")
	floor := fs.Bool("floor", true, "idle: also measure the bare gRPC floor server")
	compareTLS := fs.Bool("compare-tls", false, "throughput, idle with --spawn: run on a plaintext and on a TLS cluster (every listener TLS, internal mTLS; certificates made in <out>/tls) and report both side by side; no baselines or floor")
	rounds := fs.Int("rounds", 1, "compare-tls: rounds of plaintext then TLS")
	stuck := fs.Int("stuck-clients", 0, "throughput, latency: this many sessions read their messages but never ACK them; the report gives the other sessions' figures apart")
	stuckReconnect := fs.Bool("stuck-reconnect", true, "with --stuck-clients: a stuck session connects again when boat kicks it out after ack-wait, so it stays stuck for the whole run")
	offline := fs.Bool("offline", false, "throughput, latency, scaling, disconnect (its load on the other boat): push NEED_ACK|NEED_OFFLINE (kept for a session that is not there, like a broker's persistent session) instead of NEED_ACK alone")
	mode := fs.String("mode", "both", "disconnect: how boat A's sessions leave: drain (SIGTERM), kill (SIGKILL, then restarted on the same address) or both (a fresh cluster each)")
	others := fs.Int("others", 200, "disconnect: sessions on boat B taking a paced load (--rate pushes/s, 0: one per session a second)")
	held := fs.Int("held", 1000, "disconnect: boat A sessions holding a NEED_ACK|NEED_OFFLINE message they never ACK when the boat goes")
	stored := fs.Int("stored", 1000, "disconnect: boat A users pushed a NEED_ACK|NEED_OFFLINE message once their session is gone")
	quiet := fs.Duration("quiet", 5*time.Second, "disconnect: the others' quiet window before the disconnect")
	clearTimeout := fs.Duration("clear-timeout", 2*time.Minute, "disconnect: how long to wait for Redis to hold none of boat A's sessions")
	queueKind := fs.String("queue", "kafka", "with --spawn: the services' queue, kafka (gomsg dev's embedded broker) or nats (its embedded nats-server with JetStream); docs/queue.md")
	isolate := fs.Bool("isolate", false, "disconnect: run boat A and the process holding its sessions at nice 19, as if on machines of their own; the others then measure what the leaving costs the parts they share (station, carrier, Redis, the queue, boat B), not a wait for one of this machine's cores")
	leaseTTL := fs.Duration("lease-ttl", 0, "with --spawn: the boats' etcd lease TTL (0: boat's default)")
	transport := fs.String("transport", bench.TransportGRPC, "what the device sessions connect over: grpc (the Msg/Loop stream) ws (WebSocket at "+boat.WSPath+", one connection per session; idle then has no floor) or mqtt (MQTT 5, one connection per session, no rooms)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *transport != bench.TransportGRPC && *transport != bench.TransportWS && *transport != bench.TransportMQTT {
		return fmt.Errorf("transport: %q, want %s, %s or %s", *transport, bench.TransportGRPC, bench.TransportWS, bench.TransportMQTT)
	}
	if *compareTLS && scenario != bench.ScenarioThroughput && scenario != bench.ScenarioIdle {
		return fmt.Errorf("compare-tls: only throughput and idle, not %s", scenario)
	}
	if *compareTLS && !*spawn {
		return errors.New("compare-tls: needs --spawn (the tool starts both clusters)")
	}
	if *rounds < 1 || (*rounds > 1 && !*compareTLS) {
		return fmt.Errorf("rounds: %d: a positive count, more than 1 only with --compare-tls", *rounds)
	}
	if scenario == bench.ScenarioDisconnect && !*spawn {
		return errors.New("needs --spawn (the tool stops, kills and restarts a boat it started)")
	}
	var sizes []int
	var fanout []bench.FanoutSize
	var err error
	if scenario == bench.ScenarioFanout {
		// Sessions are rooms × members.
		if fanout, err = fanoutSizes(*rooms, *members); err != nil {
			return err
		}
		if *bodies < 1 || *window < 1 {
			return fmt.Errorf("bodies %d, window %d: want at least 1 each", *bodies, *window)
		}
		for _, f := range fanout {
			sizes = append(sizes, f.Rooms*f.Members)
		}
	} else if sizes, err = counts("sessions", *sessionsFlag); err != nil {
		return err
	}
	nofile, err := bench.RaiseNoFile()
	if err != nil {
		return fmt.Errorf("raise open-files limit: %w", err)
	}
	maxN := 0
	for _, n := range sizes {
		maxN = max(maxN, n)
	}
	streams := *spc
	if *transport == bench.TransportWS || *transport == bench.TransportMQTT {
		// One connection per session: the tool's fd and boat's each.
		if streams > 1 {
			return fmt.Errorf("streams-per-conn: %d, want 1 with --transport %s (one session per connection)", streams, *transport)
		}
		if room := int(nofile) - 1000; maxN > room {
			return fmt.Errorf("transport %s: %d sessions need %d open files (one per connection, plus 1,000), the limit is %d", *transport, maxN, maxN+1000, nofile)
		}
		streams = 1
	}
	if streams == 0 {
		// The tool holds one fd per connection and the boat (or the floor
		// server) another; keep 1,000 for everything else.
		room := int(nofile) - 1000
		streams = max(1, (maxN+room-1)/room)
		if streams > 1 {
			fmt.Fprintf(os.Stderr, "open-files limit %d: %d sessions need %d streams per connection\n", nofile, maxN, streams)
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	log, err := zap.NewDevelopment(zap.IncreaseLevel(zap.WarnLevel))
	if err != nil {
		return err
	}
	o := bench.Options{
		Scenario: scenario, Transport: *transport, Sessions: sizes, StreamsPerConn: streams, SourceSpread: *spread,
		Warmup: *warm, Duration: *dur, BaselineDuration: *baseDur, Concurrency: *conc, Rate: *rate,
		ProfileDir: *profDir, Command: "gomsg-bench " + scenario + " " + strings.Join(args, " "),
		Progress: os.Stderr, Log: log, CompareTLS: *compareTLS, Rounds: *rounds,
		StuckClients: *stuck, StuckReconnect: *stuckReconnect, Offline: *offline, Fanout: fanout, Bodies: *bodies, Window: *window,
	}
	if scenario == bench.ScenarioDisconnect {
		modes := []string{*mode}
		if *mode == "both" {
			modes = []string{bench.DisconnectDrain, bench.DisconnectKill}
		}
		o.Disconnect = bench.DisconnectOptions{Modes: modes, Others: *others, Rate: *rate, Held: *held, Stored: *stored,
			Quiet: *quiet, Timeout: *clearTimeout, Isolate: *isolate}
	}
	logDir := filepath.Join(*out, "logs")
	if *spawn {
		bin := *gomsgBin
		if bin == "" {
			tmp, err := os.MkdirTemp("", "gomsg-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			fmt.Fprintln(os.Stderr, "building ./cmd/gomsg …")
			if bin, err = bench.BuildGomsg(ctx, tmp); err != nil {
				return err
			}
		}
		rs := *redisBin
		switch rs {
		case "auto":
			rs, _ = exec.LookPath("redis-server")
		case "embedded":
			rs = ""
		}
		if *queueKind != "kafka" && *queueKind != "nats" {
			return fmt.Errorf("queue: %q, want kafka or nats", *queueKind)
		}
		sc := bench.SpawnConfig{Gomsg: bin, RedisServer: rs, LogDir: logDir, Secret: *secret, Pprof: true, BoatLeaseTTL: *leaseTTL, Queue: *queueKind}
		if scenario == bench.ScenarioDisconnect {
			sc.Boats, sc.NiceFirstBoat = 2, *isolate
		}
		o.NewCluster = func(ctx context.Context) (*bench.Cluster, bool, error) {
			fmt.Fprintln(os.Stderr, "starting cluster: backends, station, carrier, boat …")
			c, err := bench.Spawn(ctx, sc)
			return c, true, err
		}
		if *compareTLS {
			certs, err := bench.MakeCerts(filepath.Join(*out, "tls"))
			if err != nil {
				return fmt.Errorf("compare-tls: make certificates: %w", err)
			}
			tc := sc
			tc.TLS = certs
			o.TLSCluster = func(ctx context.Context) (*bench.Cluster, bool, error) {
				fmt.Fprintln(os.Stderr, "starting TLS cluster: backends, station, carrier, boat …")
				c, err := bench.Spawn(ctx, tc)
				return c, true, err
			}
		}
	} else {
		c := &bench.Cluster{ClientAddr: *clientAddr, WSAddr: *wsAddr, MQTTAddr: *mqttAddr, PushAddr: *pushAddr, RedisAddr: *redisAddr,
			KafkaBrokers: strings.Split(*brokers, ","), Secret: *secret, APIKey: *key, Platform: *platform}
		for _, kv := range strings.Split(*opsList, ",") {
			name, addr, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				return fmt.Errorf("ops: %q is not name=addr", kv)
			}
			c.Services = append(c.Services, bench.Service{Name: name, OpsAddr: addr})
		}
		o.NewCluster = func(context.Context) (*bench.Cluster, bool, error) { return c, false, nil }
	}
	if *floor {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		o.SpawnFloor = func(ctx context.Context) (func(), string, bench.Service, error) {
			return bench.SpawnFloor(ctx, self, logDir)
		}
	}
	rep, err := bench.Run(ctx, o)
	if rep != nil {
		if j, m, werr := rep.Write(*out); werr == nil {
			fmt.Print("\n" + rep.Markdown())
			fmt.Fprintf(os.Stderr, "wrote %s and %s\n", j, m)
		}
	}
	return err
}

// counts parses a comma-separated list of positive counts.
func counts(flagName, v string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive count", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// fanoutSizes pairs --rooms and --members.
func fanoutSizes(rooms, members string) ([]bench.FanoutSize, error) {
	rs, err := counts("rooms", rooms)
	if err != nil {
		return nil, err
	}
	ms, err := counts("members", members)
	if err != nil {
		return nil, err
	}
	if len(rs) != len(ms) {
		return nil, fmt.Errorf("rooms %q and members %q: want as many sizes in each", rooms, members)
	}
	out := make([]bench.FanoutSize, len(rs))
	for i := range rs {
		out[i] = bench.FanoutSize{Rooms: rs[i], Members: ms[i]}
	}
	return out, nil
}

// runPeers builds and runs the side-by-side comparison, which lives in the
// checkout's bench/peers module: the peers' client libraries stay out of
// this module and of the device SDK's. Run it inside a gomsg checkout.
func runPeers(ctx context.Context, args []string) error {
	root, err := checkoutRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "gomsg-peers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "gomsg-peers")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(root, "bench", "peers")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build bench/peers: %w\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--root", root}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Interrupted, the comparison stops its processes and writes what it
	// has; the signal reaches it from the terminal.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.ExitCode())
	}
	return err
}

// checkoutRoot is the gomsg checkout the working directory is in: the
// nearest directory up with bench/peers/go.mod.
func checkoutRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, "bench", "peers", "go.mod")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("peers: %s is not inside a gomsg checkout (no bench/peers/go.mod above it); run it from the repository", dir)
		}
		d = up
	}
}
