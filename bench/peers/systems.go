package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gomsg/gomsg/internal/bench"
)

// A peer is a system under test other than gomsg, started fresh for one
// step on free loopback ports: Centrifugo (with a private redis-server for
// its Redis engine) or Mosquitto. Every peer is driven the same way: a pool
// of sessions, each subscribed to its user's own channel or topic, and a
// publisher that addresses one user per call.
type peer interface {
	// holder is the process that holds the client connections, whose
	// memory the idle step measures.
	holder() bench.Service
	// services are the processes whose CPU a load step accounts for;
	// one named redis counts as a backend.
	services() []bench.Service
	openPool(ctx context.Context, n, spread int) (*pool, error)
	newPublisher(ctx context.Context, conns int) (publisher, error)
	stop()
}

// centrifugoConfig says how to start Centrifugo.
type centrifugoConfig struct {
	Bin, RedisServer string
	Engine           string // memory or redis
	// Recovery turns on history (100 per channel, 5 minutes) with forced
	// recovery and positioning on the personal namespace.
	Recovery bool
	Dir      string
}

type centrifugo struct {
	wsURL, grpcAddr, internal string
	secret, apiKey            string
	recovery                  bool
	proc, redis               *bench.Process
}

// personal channels: personal:#<uid>, which only that user may subscribe
// to (a user-limited channel), as a gomsg uid is only that user's.
func channelOf(uid string) string { return "personal:#" + uid }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// centrifugoJSON is the v6 configuration file: a WebSocket endpoint, the
// internal port with /metrics, pprof and /health, the gRPC server API, an
// HMAC token secret and the personal namespace. Everything else is
// Centrifugo's default.
func centrifugoJSON(cfg centrifugoConfig, http, internal, grpcPort int, redisAddr, secret, apiKey string) ([]byte, error) {
	ns := map[string]any{"name": "personal", "allow_user_limited_channels": true}
	if cfg.Recovery {
		ns["history_size"], ns["history_ttl"] = 100, "5m"
		ns["force_recovery"], ns["force_positioning"] = true, true
	}
	engine := map[string]any{"type": "memory"}
	if cfg.Engine == "redis" {
		engine = map[string]any{"type": "redis", "redis": map[string]any{"address": []string{"redis://" + redisAddr}, "prefix": "gomsg-peers"}}
	}
	return json.MarshalIndent(map[string]any{
		"http_server": map[string]any{"address": "127.0.0.1", "port": http, "internal_address": "127.0.0.1", "internal_port": strconv.Itoa(internal)},
		"log":         map[string]any{"level": "warn"},
		"client":      map[string]any{"token": map[string]any{"hmac_secret_key": secret}},
		"channel":     map[string]any{"namespaces": []any{ns}},
		"engine":      engine,
		"http_api":    map[string]any{"key": apiKey},
		"grpc_api":    map[string]any{"enabled": true, "address": "127.0.0.1", "port": grpcPort, "key": apiKey},
		"prometheus":  map[string]any{"enabled": true},
		"debug":       map[string]any{"enabled": true},
		"health":      map[string]any{"enabled": true},
		"usage_stats": map[string]any{"disabled": true},
	}, "", "  ")
}

func startCentrifugo(ctx context.Context, cfg centrifugoConfig) (*centrifugo, error) {
	if cfg.Engine != "memory" && cfg.Engine != "redis" {
		return nil, fmt.Errorf("centrifugo engine %q: memory or redis", cfg.Engine)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := bench.FreePorts(4)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	c := &centrifugo{wsURL: "ws://" + addr(0) + "/connection/websocket", internal: addr(1), grpcAddr: addr(2),
		secret: randomHex(16), apiKey: randomHex(16), recovery: cfg.Recovery}
	if cfg.Engine == "redis" {
		if c.redis, err = bench.StartProcess("redis", cfg.Dir, cfg.RedisServer, "--port", strconv.Itoa(ports[3]), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", cfg.Dir); err != nil {
			return nil, err
		}
		if err := waitFor(ctx, c.redis, "redis", func() bool { return dialable(addr(3)) }); err != nil {
			c.stop()
			return nil, err
		}
	}
	conf, err := centrifugoJSON(cfg, ports[0], ports[1], ports[2], addr(3), c.secret, c.apiKey)
	if err != nil {
		c.stop()
		return nil, err
	}
	path := filepath.Join(cfg.Dir, "config.json")
	if err := os.WriteFile(path, append(conf, '\n'), 0o600); err != nil {
		c.stop()
		return nil, err
	}
	if c.proc, err = bench.StartProcess("centrifugo", cfg.Dir, cfg.Bin, "--config", path); err != nil {
		c.stop()
		return nil, err
	}
	if err := waitFor(ctx, c.proc, "centrifugo", func() bool { return healthy("http://" + c.internal + "/health") }); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (c *centrifugo) holder() bench.Service {
	return bench.Service{Name: "centrifugo", OpsAddr: c.internal}
}

func (c *centrifugo) services() []bench.Service {
	s := []bench.Service{c.holder()}
	if c.redis != nil {
		s = append(s, bench.Service{Name: "redis", Pid: c.redis.Pid()})
	}
	return s
}

func (c *centrifugo) stop() {
	if c.proc != nil {
		c.proc.Stop(15 * time.Second)
		c.proc = nil
	}
	if c.redis != nil {
		c.redis.Stop(5 * time.Second)
		c.redis = nil
	}
}

// mosquittoConfig says how to start Mosquitto.
type mosquittoConfig struct {
	Bin string
	Dir string // mosquitto.conf, its log and its database
}

type mosquitto struct {
	addr string
	proc *bench.Process
}

// mosquittoConf is the private broker's configuration: persistent sessions
// (persistence on, with the default autosave every 30 minutes and at
// shutdown, never inside a window), 1,000 QoS 1 messages in flight per
// client (announced as its Receive Maximum, above the paced runs' callers),
// 100,000 queued per session (past it Mosquitto drops silently; a drop would
// show as missing), Nagle off as Go's net package has it, and the user it
// runs as (as root it would switch to the mosquitto user, which could not
// write the database here).
func mosquittoConf(dir string, port int, runAs string) string {
	return strings.Join([]string{
		fmt.Sprintf("listener %d 127.0.0.1", port),
		"allow_anonymous true",
		"persistence true",
		"persistence_location " + filepath.Join(dir, "db") + "/",
		"max_inflight_messages 1000",
		"max_queued_messages 100000",
		"set_tcp_nodelay true",
		"log_dest stderr",
		"log_type error",
		"log_type warning",
		"log_type notice",
		"connection_messages false",
		"user " + runAs,
	}, "\n") + "\n"
}

func startMosquitto(ctx context.Context, cfg mosquittoConfig) (*mosquitto, error) {
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "db"), 0o755); err != nil {
		return nil, err
	}
	ports, err := bench.FreePorts(1)
	if err != nil {
		return nil, err
	}
	runAs := "root"
	if u, err := user.Current(); err == nil {
		runAs = u.Username
	}
	path := filepath.Join(cfg.Dir, "mosquitto.conf")
	if err := os.WriteFile(path, []byte(mosquittoConf(cfg.Dir, ports[0], runAs)), 0o600); err != nil {
		return nil, err
	}
	m := &mosquitto{addr: "127.0.0.1:" + strconv.Itoa(ports[0])}
	if m.proc, err = bench.StartProcess("mosquitto", cfg.Dir, cfg.Bin, "-c", path); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, m.proc, "mosquitto", func() bool { return dialable(m.addr) }); err != nil {
		m.stop()
		return nil, err
	}
	return m, nil
}

// Mosquitto is C: its CPU and RSS come from /proc, with no heap to split
// and no collector to run first.
func (m *mosquitto) holder() bench.Service {
	return bench.Service{Name: "mosquitto", Pid: m.proc.Pid()}
}

func (m *mosquitto) services() []bench.Service { return []bench.Service{m.holder()} }

func (m *mosquitto) stop() {
	if m.proc != nil {
		m.proc.Stop(15 * time.Second)
		m.proc = nil
	}
}

func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func healthy(url string) bool {
	resp, err := httpClient.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitFor polls ok every 100 ms for up to a minute, failing early when the
// process exits.
func waitFor(ctx context.Context, p *bench.Process, name string, ok func() bool) error {
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if err := p.Exited(); err != nil {
			return fmt.Errorf("%w (see %s.log)", err, name)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within a minute (see %s.log)", name, name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// CentrifugoVersion is the version the tool installs and writes its config
// for (the v6 layout).
const CentrifugoVersion = "v6.9.1"

// centrifugoCache is where the tool installs Centrifugo.
func centrifugoCache() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "gomsg-bench", "centrifugo-"+CentrifugoVersion), nil
}

// findCentrifugo returns the Centrifugo binary: the one given, else the
// cached install; with install, it builds the pinned version into the cache
// when it is not there (a few minutes).
func findCentrifugo(ctx context.Context, given string, install bool, logf func(string, ...any)) (string, error) {
	if given != "" {
		return given, checkVersion(ctx, given, "version", "Centrifugo v6.")
	}
	dir, err := centrifugoCache()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "centrifugo")
	if _, err := os.Stat(bin); err == nil {
		return bin, checkVersion(ctx, bin, "version", "Centrifugo "+CentrifugoVersion)
	}
	if !install {
		return "", fmt.Errorf("Centrifugo %s is not in %s: run `gomsg-bench peers --install-only` (builds it there, a few minutes) or pass --centrifugo", CentrifugoVersion, dir)
	}
	logf("installing Centrifugo %s into %s (a few minutes) …", CentrifugoVersion, dir)
	if err := installCentrifugo(ctx, dir); err != nil {
		return "", err
	}
	return bin, checkVersion(ctx, bin, "version", "Centrifugo "+CentrifugoVersion)
}

// installCentrifugo builds the pinned Centrifugo with the version stamped.
// go install reads the module's version list for deprecation notices; a
// module proxy that serves the version but not the list makes it fail.
// Then the downloaded module is built in place, with its own go.mod and
// go.sum, which gives the same binary.
func installCentrifugo(ctx context.Context, dir string) error {
	const mod = "github.com/centrifugal/centrifugo/v6"
	ldflags := "-X " + mod + "/internal/build.Version=" + strings.TrimPrefix(CentrifugoVersion, "v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "install", "-trimpath", "-ldflags", ldflags, mod+"@"+CentrifugoVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	out1, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	dl, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", mod+"@"+CentrifugoVersion).Output()
	if err != nil {
		return fmt.Errorf("go install %s@%s failed:\n%s\nand go mod download: %w", mod, CentrifugoVersion, out1, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(dl, &m); err != nil || m.Dir == "" {
		return fmt.Errorf("go mod download %s: no directory in %s", mod, dl)
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(dir, "centrifugo"), ".")
	build.Dir = m.Dir
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build Centrifugo in %s: %w\n%s", m.Dir, err, out)
	}
	return nil
}

// findMosquitto returns the Mosquitto binary: the one given, else on PATH
// or in /usr/sbin; when there is none and the tool runs as root on Debian,
// it installs the mosquitto package with a policy-rc.d that keeps the
// package's own broker (port 1883) from starting — the tool never uses it.
func findMosquitto(ctx context.Context, given string, install bool, logf func(string, ...any)) (string, error) {
	bin := given
	if bin == "" {
		if p, err := exec.LookPath("mosquitto"); err == nil {
			bin = p
		} else if _, err := os.Stat("/usr/sbin/mosquitto"); err == nil {
			bin = "/usr/sbin/mosquitto"
		}
	}
	if bin == "" {
		if !install || os.Geteuid() != 0 {
			return "", errors.New("mosquitto is not installed: apt-get install mosquitto (as root), or pass --mosquitto")
		}
		if _, err := exec.LookPath("apt-get"); err != nil {
			return "", errors.New("mosquitto is not installed and there is no apt-get: install Mosquitto 2 and pass --mosquitto")
		}
		logf("installing mosquitto (Debian package; its own service is kept from starting) …")
		const policy = "/usr/sbin/policy-rc.d"
		if _, err := os.Stat(policy); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
				return "", err
			}
			defer os.Remove(policy)
		}
		for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "mosquitto"}} {
			cmd := exec.CommandContext(ctx, "apt-get", args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			if out, err := cmd.CombinedOutput(); err != nil {
				return "", fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, out)
			}
		}
		bin = "/usr/sbin/mosquitto"
	}
	// `mosquitto -h` prints "mosquitto version X" first and exits 3.
	return bin, checkVersion(ctx, bin, "-h", "mosquitto version 2.")
}

// checkVersion runs bin arg and wants its first line to start with want.
func checkVersion(ctx context.Context, bin, arg, want string) error {
	v := versionLine(ctx, bin, arg)
	if !strings.HasPrefix(v, want) {
		return fmt.Errorf("%s %s says %q, want %s… (the tool writes that version's config)", bin, arg, v, want)
	}
	return nil
}

func versionLine(ctx context.Context, bin, arg string) string {
	out, _ := exec.CommandContext(ctx, bin, arg).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}
