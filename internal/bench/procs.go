package bench

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/auth"
)

// child is a process the tool started.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan error
}

func startChild(name, logDir string, bin string, args ...string) (*child, error) {
	cmd := exec.Command(bin, args...)
	dieWithParent(cmd)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { c.done <- cmd.Wait(); _ = f.Close() }()
	return c, nil
}

// stop sends SIGTERM, then SIGKILL after grace.
func (c *child) stop(grace time.Duration) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func (c *child) exited() error {
	select {
	case err := <-c.done:
		c.done <- err
		if err == nil {
			err = errors.New("exited")
		}
		return fmt.Errorf("%s: %w", c.name, err)
	default:
		return nil
	}
}

// freePorts returns n loopback TCP ports that were free a moment ago; each
// returned port's successor is free too (embedded etcd's peer port).
func freePorts(n int) ([]int, error) {
	var out []int
	var hold []net.Listener
	defer func() {
		for _, l := range hold {
			_ = l.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		hold = append(hold, l)
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		if err != nil {
			continue
		}
		hold = append(hold, l2)
		out = append(out, p)
	}
	return out, nil
}

// SpawnConfig says how to start a cluster of separate processes.
type SpawnConfig struct {
	// Gomsg is the gomsg binary; empty: built with `go build ./cmd/gomsg`
	// from the module in the working directory.
	Gomsg string
	// RedisServer is a redis-server binary for the cluster's Redis; empty:
	// `gomsg dev`'s embedded Redis (miniredis).
	RedisServer string
	LogDir      string
	Secret      string
	Pprof       bool
	// TLS, when set, gives every listener of boat and station TLS with
	// Certs's certificate and the internal APIs mTLS; the tool then dials
	// with TLS too.
	TLS *Certs
	// Boats is how many boat processes to start (0: one). The first is the
	// cluster's ClientAddr and the service named "boat"; the others are
	// named boat-2, boat-3 … and reached through Cluster.Boats.
	Boats int
	// NiceFirstBoat runs the first boat (and its restarts) at the lowest
	// CPU priority, nice 19: see DisconnectOptions.Isolate.
	NiceFirstBoat bool
	// BoatLeaseTTL is the boats' etcd lease TTL (--lease-ttl); 0: boat's
	// default.
	BoatLeaseTTL time.Duration
	// Queue is the services' queue (--queue): "" or "kafka" for the
	// embedded Kafka-protocol broker, "nats" for the embedded nats-server
	// with JetStream. Either runs in the backends process, whose CPU the
	// report counts as a backend's.
	Queue string
}

// Cluster is a cluster the tool talks to: started by it (Spawn) or already
// running (addresses given).
type Cluster struct {
	ClientAddr   string // boat's client stream
	WSAddr       string // boat's WebSocket sessions (--ws-addr); empty: none
	MQTTAddr     string // boat's MQTT sessions (--mqtt-addr); empty: none
	PushAddr     string // station's Push API (gRPC)
	RedisAddr    string
	KafkaBrokers []string
	Secret       string
	APIKey       string // Push API key with the push and broadcast scopes
	Platform     string
	// ClientTLS is what the tool dials the client stream and the Push API
	// with; nil: plaintext.
	ClientTLS *tls.Config
	// Services are the processes whose /metrics the tool reads; the one
	// named "boat" is the one memory per session is measured on.
	Services []Service
	// Boats are the boat processes the tool started, the first being the
	// one at ClientAddr; nil for a running cluster.
	Boats    []SpawnedBoat
	children []*child
	logDir   string
}

// SpawnedBoat is one boat process the tool started.
type SpawnedBoat struct {
	Name       string // its service name: boat, boat-2, …
	ID         string // --boat-id
	ClientAddr string
	WSAddr     string
	OpsAddr    string
	bin        string // what runs it: the gomsg binary, or nice(1) with it as the first argument
	args       []string
	child      int // index in Cluster.children
	restarts   int
}

// Boat returns the boat service.
func (c *Cluster) Boat() (Service, bool) {
	for _, s := range c.Services {
		if s.Name == "boat" {
			return s, true
		}
	}
	return Service{}, false
}

// Stop ends the processes the tool started, boat first.
func (c *Cluster) Stop() {
	for i := len(c.children) - 1; i >= 0; i-- {
		c.children[i].stop(15 * time.Second)
	}
	c.children = nil
}

// BuildGomsg builds cmd/gomsg into dir and returns the binary's path; run
// from anywhere inside the gomsg module.
func BuildGomsg(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "gomsg")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/gomsg/gomsg/cmd/gomsg")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/gomsg (run from the gomsg module, or pass --gomsg): %w\n%s", err, b)
	}
	return out, nil
}

// Spawn starts `gomsg dev --services none` (etcd and Kafka embedded, Redis
// embedded or a redis-server child) and one boat, station and carrier
// process, each with its own ops server, and waits until all are ready.
func Spawn(ctx context.Context, cfg SpawnConfig) (*Cluster, error) {
	boats := max(1, cfg.Boats)
	// Each boat after the first has four ports of its own: client,
	// WebSocket, internal and ops.
	ports, err := freePorts(13 + 4*(boats-1))
	if err != nil {
		return nil, err
	}
	a := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	c := &Cluster{
		ClientAddr: a(0), WSAddr: a(11), MQTTAddr: a(12 + 4*(boats-1)), PushAddr: a(1), RedisAddr: a(2), KafkaBrokers: []string{a(3)},
		Secret: cfg.Secret, Platform: "ios", logDir: cfg.LogDir,
	}
	// The spawned services are not `gomsg dev`: they need a JWT secret of
	// 32 bytes or more (not the public dev one), an API key and an internal
	// token. Random ones, made per run.
	internalToken, err := randomSecret()
	if err != nil {
		return nil, err
	}
	if len(c.Secret) < auth.MinJWTSecret || c.Secret == auth.DevJWTSecret {
		if c.Secret, err = randomSecret(); err != nil {
			return nil, err
		}
	}
	if c.APIKey, err = apikey.Generate(); err != nil {
		return nil, err
	}
	keyLine := apikey.Line(c.APIKey, []apikey.Scope{apikey.Push, apikey.Broadcast}, "bench")
	etcdAddr := a(4)
	fail := func(err error) (*Cluster, error) { c.Stop(); return nil, err }
	pprof := "--pprof=" + strconv.FormatBool(cfg.Pprof)
	if cfg.RedisServer != "" {
		r, err := startChild("redis", cfg.LogDir, cfg.RedisServer, "--port", strconv.Itoa(ports[2]), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", cfg.LogDir)
		if err != nil {
			return fail(err)
		}
		c.children = append(c.children, r)
		c.Services = append(c.Services, Service{Name: "redis", Pid: r.cmd.Process.Pid})
	}
	devArgs := []string{"dev", "--services", "none", "--embedded-kafka-addr", a(3), "--embedded-etcd-addr", etcdAddr,
		"--ops-addr", a(5), pprof, "--log-level", "warn"}
	queueArgs := []string{"--kafka-brokers", a(3)}
	if cfg.Queue == "nats" {
		// No Kafka then: the Kafka baseline is not run.
		c.KafkaBrokers = nil
		devArgs = append(devArgs, "--queue", "nats", "--embedded-nats-addr", a(3), "--data-dir", filepath.Join(cfg.LogDir, "dev-data"))
		queueArgs = []string{"--queue", "nats", "--nats-url", "nats://" + a(3)}
	}
	if cfg.RedisServer != "" {
		devArgs = append(devArgs, "--redis-addrs", a(2))
	} else {
		devArgs = append(devArgs, "--embedded-redis-addr", a(2))
	}
	dev, err := startChild("backends", cfg.LogDir, cfg.Gomsg, devArgs...)
	if err != nil {
		return fail(err)
	}
	c.children = append(c.children, dev)
	c.Services = append(c.Services, Service{Name: "backends", OpsAddr: a(5), Pid: dev.cmd.Process.Pid})
	if err := waitReady(ctx, dev, a(5)); err != nil {
		return fail(err)
	}
	back := append(queueArgs, "--redis-addrs", a(2), "--etcd-endpoints", etcdAddr, "--log-level", "warn", pprof,
		"--internal-token", internalToken)
	if cfg.TLS != nil {
		back = append(back, cfg.TLS.ServiceArgs()...)
		c.ClientTLS = cfg.TLS.ClientConfig()
	}
	procs := []struct {
		name, bin string
		args      []string
		ops       string
	}{
		{"station", cfg.Gomsg, []string{"station", "--push-grpc-addr", a(1), "--push-http-addr", "", "--station-internal-addr", a(6),
			"--jwt-secret", c.Secret, "--api-keys", keyLine, "--ops-addr", a(7),
			// The tool measures the cluster, not station's broadcast limit.
			"--broadcast-rate", "1000000"}, a(7)},
		{"carrier", cfg.Gomsg, []string{"carrier", "--ops-addr", a(8)}, a(8)},
	}
	for i := range boats {
		name, id, client, ws, internal, ops := "boat", "bench-boat", a(0), a(11), a(9), a(10)
		if i > 0 {
			k := 12 + 4*(i-1)
			name, id = "boat-"+strconv.Itoa(i+1), "bench-boat-"+strconv.Itoa(i+1)
			client, ws, internal, ops = a(k), a(k+1), a(k+2), a(k+3)
		}
		args := []string{"boat", "--boat-id", id, "--client-addr", client, "--ws-addr", ws, "--boat-internal-addr", internal,
			"--station-addr", a(6), "--ops-addr", ops,
			// The load comes from a few loopback addresses, as fast as it can.
			"--connect-rate", "1000000", "--connect-rate-per-ip", "1000000",
			"--max-connections", "10000000", "--max-connections-per-ip", "10000000", "--max-streams-per-connection", "1000000"}
		if i == 0 {
			args = append(args, "--mqtt-addr", c.MQTTAddr)
		}
		if cfg.BoatLeaseTTL > 0 {
			args = append(args, "--lease-ttl", cfg.BoatLeaseTTL.String())
		}
		bin := cfg.Gomsg
		if i == 0 && cfg.NiceFirstBoat {
			nice, err := exec.LookPath("nice")
			if err != nil {
				return fail(fmt.Errorf("nice the first boat: %w", err))
			}
			bin, args = nice, slices.Concat([]string{"-n", "19", cfg.Gomsg}, args)
		}
		c.Boats = append(c.Boats, SpawnedBoat{Name: name, ID: id, ClientAddr: client, WSAddr: ws, OpsAddr: ops,
			bin: bin, args: slices.Concat(args, back), child: len(c.children) + len(procs)})
		procs = append(procs, struct {
			name, bin string
			args      []string
			ops       string
		}{name, bin, args, ops})
	}
	for _, p := range procs {
		ch, err := startChild(p.name, cfg.LogDir, p.bin, append(p.args, back...)...)
		if err != nil {
			return fail(err)
		}
		c.children = append(c.children, ch)
		c.Services = append(c.Services, Service{Name: p.name, OpsAddr: p.ops, Pid: ch.cmd.Process.Pid})
		if err := waitReady(ctx, ch, p.ops); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// waitReady polls a process's /readyz until it answers 200.
func waitReady(ctx context.Context, c *child, ops string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := c.exited(); err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ops+"/readyz", nil)
		if resp, err := httpClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready on %s within 60s (see its log)", c.name, ops)
		}
		if !sleepUntil(ctx, time.Now().Add(100*time.Millisecond)) {
			return ctx.Err()
		}
	}
}

// SpawnFloor starts `<self> floor-server` and waits until it serves; stop
// ends it.
func SpawnFloor(ctx context.Context, self, logDir string) (stop func(), addr string, svc Service, err error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, "", Service{}, err
	}
	addr = "127.0.0.1:" + strconv.Itoa(ports[0])
	ops := "127.0.0.1:" + strconv.Itoa(ports[1])
	ch, err := startChild("floor", logDir, self, "floor-server", "--addr", addr, "--ops-addr", ops)
	if err != nil {
		return nil, "", Service{}, err
	}
	if err := waitReady(ctx, ch, ops); err != nil {
		ch.stop(5 * time.Second)
		return nil, "", Service{}, err
	}
	return func() { ch.stop(5 * time.Second) }, addr, Service{Name: "floor", OpsAddr: ops}, nil
}

// procSample reads CPU and RSS of a non-Go process (redis-server) from /proc.
func procSample(pid int) (Sample, error) {
	// utime and stime are fields 14 and 15 (1-based), rss (pages) field 24.
	f, err := procStat(pid)
	if err != nil {
		return Sample{}, err
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	rss, _ := strconv.ParseFloat(f[21], 64)
	const clkTck = 100 // USER_HZ on Linux
	calls, _ := procSyscalls(pid)
	return Sample{CPUSeconds: (ut + st) / clkTck, RSSBytes: rss * float64(os.Getpagesize()), Syscalls: calls}, nil
}

// procSyscalls reads how many read and write system calls a process has
// made (syscr + syscw in /proc/<pid>/io). They count every call, one that
// found no data (EAGAIN) too: per message, they show how often it made a
// process go to the kernel, which batching lowers. They are not timed, so
// other work on the machine changes them only through the batching.
func procSyscalls(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0, err
	}
	var n float64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "syscr" || k == "syscw") {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/io: %s: %w", pid, k, err)
			}
			n += f
		}
	}
	return n, nil
}

// procNice reads a process's nice value (field 19) from /proc.
func procNice(pid int) (int, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[16])
}

// procStat returns /proc/<pid>/stat's fields after the command name in
// parentheses: the first is field 3 (1-based), the state.
func procStat(pid int) ([]string, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 22 {
		return nil, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	return f, nil
}

// randomSecret is 32 random bytes in hex.
func randomSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
