package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/carrier"
	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/testutil"
)

// proc is a gomsg process started by a test.
type proc struct {
	cmd    *exec.Cmd
	stderr *strings.Builder
	stdout *bufio.Scanner
	exited chan struct{}
	err    error
}

// credentials are what a service needs outside dev (an API key, the internal
// token, a JWT secret), so that the tests below get past the credential
// checks to the behaviour they test.
var credentials = []string{
	"GOMSG_API_KEYS=" + apikey.Line("startup-test-api-key", []apikey.Scope{apikey.All}, "test"),
	"GOMSG_INTERNAL_TOKEN=startup-test-internal-token-0123456789",
	"GOMSG_JWT_SECRET=startup-test-jwt-secret-0123456789-0123456789",
}

// start runs the binary with a clean GOMSG_* environment plus the
// credentials and env (later values win).
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMSG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, credentials...)
	cmd.Env = append(cmd.Env, env...)
	p := &proc{cmd: cmd, stderr: new(strings.Builder), exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdout = bufio.NewScanner(out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// exitCode waits at most d for the process to end.
func (p *proc) exitCode(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("%v did not exit within %s; stderr:\n%s", p.cmd.Args, d, p.stderr)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("wait: %v", p.err)
	return -1
}

func TestUnknownEnvironmentVariableIsAnError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		cmd, env, want string
	}{
		{"station", "GOMSG_REDIS_ADR=127.0.0.1:6379", "did you mean GOMSG_REDIS_ADDR?"},
		{"boat", "GOMSG_KAFKA_BROKER=k:9092", "did you mean GOMSG_KAFKA_BROKERS?"},
		{"dev", "GOMSG_SERVICE=none", "did you mean GOMSG_SERVICES?"},
		{"healthcheck", "GOMSG_TIMEOT=1s", "did you mean GOMSG_TIMEOUT?"},
	}
	for _, tc := range cases {
		code, stderr := run(t, []string{tc.env}, tc.cmd)
		name, _, _ := strings.Cut(tc.env, "=")
		if code == 0 || !strings.Contains(stderr, name) || !strings.Contains(stderr, tc.want) {
			t.Errorf("gomsg %s with %s: exit %d, stderr %q; want non-zero naming %s and %q", tc.cmd, tc.env, code, stderr, name, tc.want)
		}
	}
}

func TestOtherCommandsVariablesAreAccepted(t *testing.T) {
	t.Parallel()
	// gomsgctl's variable and another service's flag in a shared
	// environment: the bad --task-partitions is what must be reported.
	code, stderr := run(t, []string{"GOMSG_PUSH_ADDR=127.0.0.1:7200", "GOMSG_WORKERS=8", "GOMSG_UID=alice"},
		"boat", "--task-partitions", "0")
	if code == 0 || !strings.Contains(stderr, "task-partitions") || strings.Contains(stderr, "environment variable") {
		t.Fatalf("exit %d, stderr %q; want the task-partitions error only", code, stderr)
	}
}

func TestBackendDownExitsWithinStartTimeout(t *testing.T) {
	t.Parallel()
	rds := testutil.StartRedis(t)
	etcd := testutil.StartEtcd(t)
	cases := []struct {
		cmd  string
		env  []string
		want string
	}{
		{"station", nil, "redis 127.0.0.1:1:"},
		{"boat", nil, "etcd 127.0.0.1:1:"},
		{"carrier", []string{"GOMSG_REDIS_ADDRS=" + rds.Addr, "GOMSG_ETCD_ENDPOINTS=" + etcd}, "kafka 127.0.0.1:1:"},
		{"horn", []string{"GOMSG_REDIS_ADDRS=" + rds.Addr, "GOMSG_PLATFORMS=ios:notify=log"}, "kafka 127.0.0.1:1:"},
	}
	for _, tc := range cases {
		t.Run(tc.cmd, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			code, stderr := run(t, append(slices.Clone(credentials), tc.env...), tc.cmd, "--start-timeout", "1s")
			took := time.Since(began)
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 {
				t.Fatalf("stderr has %d lines, want one:\n%s", len(lines), stderr)
			}
			want := "gomsg " + tc.cmd + ": " + tc.want + " not reachable within 1s (--start-timeout): "
			if !strings.HasPrefix(lines[0], want) || !strings.Contains(lines[0], "connection refused") {
				t.Fatalf("stderr %q, want it to start with %q and name the refused connection", lines[0], want)
			}
			if took > 6*time.Second {
				t.Fatalf("took %s to give up with --start-timeout 1s", took)
			}
		})
	}
}

// blackHole accepts connections and never answers.
func blackHole(t *testing.T) (addr string, accepted chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = make(chan struct{}, 1)
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					_ = c.Close()
				}
				return
			}
			conns = append(conns, c)
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String(), accepted
}

func TestSIGTERMDuringStartUpExitsZero(t *testing.T) {
	t.Parallel()
	etcd, accepted := blackHole(t)
	p := start(t, []string{"GOMSG_OPS_ADDR="}, "boat", "--etcd-endpoints", etcd, "--start-timeout", "5m")
	select {
	case <-accepted: // it is waiting for etcd now
	case <-p.exited:
		t.Fatalf("boat exited before it dialed etcd; stderr:\n%s", p.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("boat did not dial etcd; stderr:\n%s", p.stderr)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t, 5*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; stderr:\n%s", code, p.stderr)
	}
}

func TestDevWithoutServicesStaysUpUntilSIGTERM(t *testing.T) {
	t.Parallel()
	redisAddr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	p := start(t, nil, "dev", "--services", "none", "--ops-addr=",
		"--embedded-redis-addr", redisAddr,
		"--embedded-kafka-addr", fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)),
		"--embedded-etcd-addr", fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)))
	up := make(chan string, 1)
	go func() {
		for p.stdout.Scan() {
			if strings.Contains(p.stdout.Text(), "is up") {
				up <- p.stdout.Text()
			}
		}
	}()
	select {
	case <-up:
	case <-p.exited:
		t.Fatalf("dev exited before it was up; stderr:\n%s", p.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("dev did not come up; stderr:\n%s", p.stderr)
	}
	// For two seconds after the banner the process runs and its embedded
	// Redis answers: it waits for a signal rather than ending by itself.
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	for until := time.Now().Add(2 * time.Second); time.Now().Before(until); {
		select {
		case <-p.exited:
			t.Fatalf("dev --services none exited by itself; stderr:\n%s", p.stderr)
		default:
		}
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("ping the embedded Redis after the banner: %v; stderr:\n%s", err, p.stderr)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0; stderr:\n%s", code, p.stderr)
	}
}

// getReady GETs /readyz at addr.
func getReady(addr string) (int, string, error) {
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

// Boat starts with Kafka and Redis unreachable (it uses neither) and its
// /readyz checks etcd alone of the backends; with no station to clear its
// previous run's sessions it does not serve yet, and says so.
func TestBoatStartsWithoutKafkaAndReadyzNamesEtcd(t *testing.T) {
	t.Parallel()
	etcd := testutil.StartEtcd(t)
	ops := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	_ = start(t, []string{"GOMSG_OPS_ADDR=" + ops, "GOMSG_KAFKA_BROKERS=127.0.0.1:1", "GOMSG_REDIS_ADDRS=127.0.0.1:1"},
		"boat", "--etcd-endpoints", etcd, "--boat-id", "b1", "--start-timeout", "2s",
		"--client-addr", "127.0.0.1:0", "--ws-addr", "127.0.0.1:0", "--boat-internal-addr", "127.0.0.1:0", "--station-addr", "127.0.0.1:1")
	testutil.WaitFor(t, 20*time.Second, func() error {
		code, body, err := getReady(ops)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || strings.TrimSpace(body) != "boat serving: not registered in etcd yet (a previous run's lease may still hold its id)" {
			return fmt.Errorf("readyz: %d %q; want 503 naming only that the boat does not serve yet", code, body)
		}
		return nil
	})
	resp, err := http.Get("http://" + ops + "/readyz?exclude=boat")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz without the serving check: %d %q; want 200 (etcd reachable, Kafka and Redis not used)", resp.StatusCode, body)
	}
}

func TestReadyzNamesTheBackendThatIsDown(t *testing.T) {
	t.Parallel()
	rds := testutil.StartRedis(t)
	kafka := testutil.StartKafka(t, 1, "gomsg.notify", "gomsg.notify.retry", "gomsg.notify.dead")
	ops := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	p := start(t, []string{"GOMSG_OPS_ADDR=" + ops, "GOMSG_ETCD_ENDPOINTS=127.0.0.1:1"},
		"horn", "--redis-addrs", rds.Addr, "--kafka-brokers", kafka, "--task-partitions", "1",
		"--platforms", "ios:notify=log", "--start-timeout", "5s")
	p.waitReady(t, ops)
	rds.Stop()
	testutil.WaitFor(t, 20*time.Second, func() error {
		code, body, err := getReady(ops)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "redis "+rds.Addr) {
			return fmt.Errorf("readyz: %d %q; want 503 naming redis %s", code, body, rds.Addr)
		}
		if strings.Contains(body, "kafka") || strings.Contains(body, "etcd") {
			return fmt.Errorf("readyz: %q names a backend that is up or not used", body)
		}
		return nil
	})
}

// A service on a Redis Cluster (GOMSG_REDIS_ADDRS naming one node is
// enough, the client learns the others) is ready; when a master dies with
// no replica to take over, its readiness names Redis, since a third of the
// users' keys cannot be reached.
func TestServiceOnRedisClusterAndReadyzWhenAMasterDies(t *testing.T) {
	t.Parallel()
	rc := testutil.StartRedisCluster(t, 3, 0)
	kafka := testutil.StartKafka(t, 1, "gomsg.notify", "gomsg.notify.retry", "gomsg.notify.dead")
	ops := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	p := start(t, []string{"GOMSG_OPS_ADDR=" + ops, "GOMSG_REDIS_ADDRS=" + rc.Nodes[0].Addr, "GOMSG_REDIS_CLUSTER=true"},
		"horn", "--kafka-brokers", kafka, "--task-partitions", "1",
		"--platforms", "ios:notify=log", "--start-timeout", "10s")
	p.waitReady(t, ops)
	rc.Nodes[2].Stop()
	testutil.WaitFor(t, 30*time.Second, func() error {
		code, body, err := getReady(ops)
		if err != nil {
			return err
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "redis "+rc.Nodes[0].Addr) {
			return fmt.Errorf("readyz: %d %q; want 503 naming redis %s", code, body, rc.Nodes[0].Addr)
		}
		return nil
	})
	// Not now and then: every probe sees the missing slots, not only one
	// that happens to ask the dead master.
	for i := range 10 {
		if code, body, err := getReady(ops); err != nil || code != http.StatusServiceUnavailable {
			t.Fatalf("readyz probe %d after the master died: %d %q %v; want 503 every time", i, code, body, err)
		}
	}
}

// waitReady waits until the process's /readyz on ops answers 200; the test
// fails at once when the process exits.
func (p *proc) waitReady(t *testing.T, ops string) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, func() error {
		select {
		case <-p.exited:
			t.Fatalf("%s exited; stderr:\n%s", strings.Join(p.cmd.Args[1:2], ""), p.stderr)
		default:
		}
		code, body, err := getReady(ops)
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("readyz: %d %q %v", code, body, err)
		}
		return nil
	})
}

// TestFlagDefaultsAreTheConfigDefaults: every flag default of a service
// equals what its config's Defaults() sets, field by field.
func TestFlagDefaultsAreTheConfigDefaults(t *testing.T) {
	for _, name := range app.Services {
		args := []string{}
		if name == "station" {
			args = []string{"--jwt-secret", strings.Repeat("x", 32)}
		}
		if name == "horn" {
			args = []string{"--platforms", "web"}
		}
		_, cfg, err := serviceConfig(name, args)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got, want any
		switch name {
		case "boat":
			w := boat.Config{}
			w.Defaults()
			got, want = cfg.Boat, w
		case "station":
			w := station.Config{}
			w.Defaults()
			got, want = cfg.Station.Station, w
		case "carrier":
			w := carrier.Config{}
			w.Defaults()
			got, want = cfg.Carrier, w
		case "horn":
			w := horn.Config{}
			w.Defaults()
			got, want = cfg.Horn, w
		}
		compareDefaults(t, name, reflect.ValueOf(got), reflect.ValueOf(want))
		b := app.Backends{}
		b.Defaults()
		gb := cfg.Backends
		for _, f := range []struct {
			name      string
			got, want any
		}{
			{"EtcdPrefix", gb.EtcdPrefix, b.EtcdPrefix}, {"TaskTopic", gb.TaskTopic, b.TaskTopic},
			{"NotifyTopic", gb.NotifyTopic, b.NotifyTopic}, {"NotifyRetryTopic", gb.NotifyRetryTopic, b.NotifyRetryTopic},
			{"NotifyDeadTopic", gb.NotifyDeadTopic, b.NotifyDeadTopic}, {"TaskPartitions", gb.TaskPartitions, b.TaskPartitions},
			{"ReplicationFactor", gb.ReplicationFactor, b.ReplicationFactor}, {"StartTimeout", gb.StartTimeout, b.StartTimeout},
		} {
			if f.got != f.want {
				t.Errorf("%s: Backends.%s: flag default %v, Defaults() %v", name, f.name, f.got, f.want)
			}
		}
	}
}

// compareDefaults checks every field Defaults() sets: the flag-filled
// config must hold the same value. Fields the service's flags do not set are
// skipped (they are filled from elsewhere or by Defaults at New).
func compareDefaults(t *testing.T, name string, got, want reflect.Value) {
	t.Helper()
	for i := range want.NumField() {
		f := want.Type().Field(i)
		w, g := want.Field(i), got.Field(i)
		switch {
		case f.Name == "Platforms": // from --platforms (platform.DefaultSpec), not Defaults()
			continue
		case f.Type.Kind() == reflect.Struct:
			compareDefaults(t, name+"."+f.Name, g, w)
			continue
		case w.IsZero():
			continue
		}
		if !reflect.DeepEqual(g.Interface(), w.Interface()) {
			t.Errorf("%s.%s: flag default %v, Defaults() %v", name, f.Name, g.Interface(), w.Interface())
		}
	}
}

// --gc-percent defaults to GOGC when it is set, else to the command's own
// default (400 for station and carrier, Go's 100 for the others).
func TestGCPercentDefaults(t *testing.T) {
	for name, want := range map[string]int{"station": 400, "carrier": 400, "boat": 100, "horn": 100, "dev": 100} {
		t.Setenv("GOGC", "")
		if got := defaultGCPercent(name); got != want {
			t.Errorf("%s: default %d, want %d", name, got, want)
		}
		t.Setenv("GOGC", "150")
		if got := defaultGCPercent(name); got != 150 {
			t.Errorf("%s with GOGC=150: default %d, want 150", name, got)
		}
		t.Setenv("GOGC", "off")
		if got := defaultGCPercent(name); got != -1 {
			t.Errorf("%s with GOGC=off: default %d, want -1", name, got)
		}
	}
	t.Setenv("GOGC", "")
	c, _, err := serviceConfig("carrier", []string{"--gc-percent", "250"})
	if err != nil || c.gcPercent != 250 {
		t.Fatalf("--gc-percent 250: %d, %v", c.gcPercent, err)
	}
}

// TestRoomBatchWindowFlag: --room-batch-window 0 means "send what is
// queued, no wait" (boat.NoBatchWindow: boat's own zero is its default),
// a negative window is refused, and the default reads as boat's.
func TestRoomBatchWindowFlag(t *testing.T) {
	t.Parallel()
	var d time.Duration
	w := batchWindow{&d}
	for in, want := range map[string]time.Duration{"0": boat.NoBatchWindow, "0s": boat.NoBatchWindow, "25ms": 25 * time.Millisecond} {
		if err := w.Set(in); err != nil || d != want {
			t.Errorf("Set(%q): %v, window %v; want %v", in, err, d, want)
		}
	}
	if w.Set("0"); w.String() != "0s" {
		t.Errorf("String() of the no-wait window = %q, want 0s", w.String())
	}
	if err := w.Set("-1ms"); err == nil {
		t.Error("a negative window was accepted")
	}
	var c boat.Config
	c.Defaults()
	fs := flag.NewFlagSet("boat", flag.ContinueOnError)
	var station string
	registerBoat(fs, &c, &station, "127.0.0.1")
	if got := fs.Lookup("room-batch-window").DefValue; got != "10ms" {
		t.Errorf("--room-batch-window default %q, want boat's 10ms", got)
	}
}

// gomsg dev prints the dev JWT secret, and mounts the demo page that signs
// tokens with it, only when station checks tokens with that secret.
func TestDevSecretOnlyWhenStationChecksIt(t *testing.T) {
	for _, c := range []struct {
		name string
		o    app.StationOptions
		want bool
	}{
		{"dev default", app.StationOptions{JWTSecret: app.DevJWTSecret}, true},
		{"secret file", app.StationOptions{JWTSecret: app.DevJWTSecret, JWTSecretFile: "/run/secrets/jwt"}, false},
		{"auth service", app.StationOptions{JWTSecret: app.DevJWTSecret, AuthAddr: "auth:9000"}, false},
		{"own secret", app.StationOptions{JWTSecret: "0123456789abcdef0123456789abcdef"}, false},
	} {
		if got := checksDevSecret(c.o); got != c.want {
			t.Errorf("%s: checksDevSecret = %v, want %v", c.name, got, c.want)
		}
	}
}

// stationReadinessPath is the path the Helm chart's readiness probe GETs on
// station's ops port when TLS keeps the kubelet's gRPC probe away: it must
// mean what grpc.health.v1 means there, serving and not draining.
func stationReadinessPath(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "gomsg", "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`path: (/readyz\?exclude=\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the chart's probes have no /readyz?exclude= path")
	}
	return string(m[1])
}

// TestStationReadinessIgnoresRedisAsTheChartAsks: with Redis down, station's
// /readyz names it, but the chart's TLS readiness path (every backend
// excluded) answers 200, as grpc.health.v1 does: a Redis blip does not take
// every station out of the Service. Draining still fails it.
func TestStationReadinessIgnoresRedisAsTheChartAsks(t *testing.T) {
	t.Parallel()
	path := stationReadinessPath(t)
	rds := testutil.StartRedis(t)
	kafka := testutil.StartKafka(t, 1)
	etcd := testutil.StartEtcd(t)
	ops := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	p := start(t, []string{"GOMSG_OPS_ADDR=" + ops},
		"station", "--redis-addrs", rds.Addr, "--kafka-brokers", kafka, "--etcd-endpoints", etcd, "--task-partitions", "1",
		"--push-grpc-addr", "127.0.0.1:0", "--push-http-addr", "127.0.0.1:0", "--station-internal-addr", "127.0.0.1:0",
		"--start-timeout", "10s")
	p.waitReady(t, ops)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + ops + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	rds.Stop()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "redis "+rds.Addr) {
			return fmt.Errorf("/readyz: %d %q, want 503 naming redis", code, body)
		}
		return nil
	})
	if code, body := get(path); code != http.StatusOK {
		t.Fatalf("%s with Redis down: %d %q, want 200", path, code, body)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		resp, err := http.Get("http://" + ops + path)
		if err != nil {
			return nil // the ops port closed: not ready either
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return fmt.Errorf("%s still 200 after SIGTERM", path)
		}
		return nil
	})
}

// With the demo page off, dev says why in one log line: demoOff names the
// setting that keeps station from the public dev secret.
func TestDemoOffSaysWhy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o    app.StationOptions
		want string
	}{
		{app.StationOptions{JWTSecret: app.DevJWTSecret}, ""},
		{app.StationOptions{JWTSecret: "0123456789abcdef0123456789abcdef"}, "GOMSG_JWT_SECRET"},
		{app.StationOptions{JWTSecret: app.DevJWTSecret, JWTSecretFile: "/run/secrets/jwt"}, "--jwt-secret-file"},
		{app.StationOptions{JWTSecret: app.DevJWTSecret, AuthAddr: "auth:9000"}, "--auth-addr"},
	} {
		got := demoOff(c.o)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%+v: demoOff %q, want it to name %q", c.o, got, c.want)
		}
	}
}
