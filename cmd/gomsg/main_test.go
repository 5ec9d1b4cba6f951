package main

import (
	"context"
	"encoding/pem"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/config"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds this command with `go build` once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gomsg-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "gomsg")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// run runs the binary with a clean GOMSG_* environment plus env, and
// unreachable backends, so a bad value that is not caught at start shows as a
// hang (killed after the deadline) rather than passing by accident.
func run(t *testing.T, env []string, args ...string) (exitCode int, stderr string) {
	t.Helper()
	bin := binary(t) // built before the deadline starts: a build on a busy machine can take longer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMSG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GOMSG_REDIS_ADDRS=127.0.0.1:1", "GOMSG_KAFKA_BROKERS=127.0.0.1:1",
		"GOMSG_ETCD_ENDPOINTS=127.0.0.1:1", "GOMSG_OPS_ADDR=127.0.0.1:0")
	cmd.Env = append(cmd.Env, env...)
	var errb strings.Builder
	cmd.Stderr = &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("gomsg %s did not exit within the deadline; stderr:\n%s", strings.Join(args, " "), errb.String())
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), errb.String()
	default:
		t.Fatalf("run gomsg: %v", err)
		return -1, ""
	}
}

func TestBadConfigurationExitsNamingTheSetting(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  []string
		args []string
		want []string // every one must be in stderr
	}{
		{"partitions flag", nil, []string{"station", "--task-partitions", "0"}, []string{"task-partitions"}},
		{"duration env", []string{"GOMSG_ACK_WAIT=soon"}, []string{"carrier"}, []string{"GOMSG_ACK_WAIT", "--ack-wait", "soon"}},
		{"platform name", nil, []string{"station", "--platforms", "Bad-Name"}, []string{"platforms", "Bad-Name"}},
		{"platform env", []string{"GOMSG_PLATFORMS=ios:offline=forever"}, []string{"carrier"}, []string{"platforms"}},
		{"log level", nil, []string{"boat", "--log-level", "loud"}, []string{"log-level", "loud"}},
		{"log format env", []string{"GOMSG_LOG_FORMAT=xml"}, []string{"boat"}, []string{"log-format", "xml"}},
		{"int env", []string{"GOMSG_SEND_QUEUE=many"}, []string{"boat"}, []string{"GOMSG_SEND_QUEUE", "--send-queue"}},
		{"bool env", []string{"GOMSG_CREATE_TOPICS=perhaps"}, []string{"station"}, []string{"GOMSG_CREATE_TOPICS", "--create-topics"}},
		{"kick policy", nil, []string{"station", "--kick-policy", "kick-newer"}, []string{"kick-policy", "kick-newer"}},
		{"workers", nil, []string{"carrier", "--workers", "-1"}, []string{"workers"}},
		{"delivery retention zero", nil, []string{"carrier", "--delivery-retention", "0", "--start-timeout", "1s"}, []string{"delivery-retention", "must be positive"}},
		{"delivery retention env", []string{"GOMSG_DELIVERY_RETENTION=-1h"}, []string{"carrier", "--start-timeout", "1s"}, []string{"GOMSG_DELIVERY_RETENTION", "--delivery-retention", "must be positive"}},
		{"lease ttl", []string{"GOMSG_LEASE_TTL=10ms"}, []string{"boat"}, []string{"lease-ttl"}},
		{"session caps", nil, []string{"station", "--max-sessions-per-platform", "200"}, []string{"--max-sessions-per-platform", "--max-sessions-per-uid"}},
		{"push bytes", nil, []string{"station", "--max-push-bytes", "1000"}, []string{"--max-push-bytes"}},
		{"idempotency window", []string{"GOMSG_IDEMPOTENCY_WINDOW=10ms"}, []string{"station"}, []string{"--idempotency-window"}},
		{"http body", []string{"GOMSG_HTTP_MAX_BODY_BYTES=-1"}, []string{"station"}, []string{"--http-max-body-bytes"}},
		{"grpc header", nil, []string{"boat", "--grpc-max-header-bytes", "10"}, []string{"--grpc-max-header-bytes"}},
		{"connect rate", nil, []string{"boat", "--connect-rate-per-ip", "0.5"}, []string{"--connect-rate-per-ip"}},
		{"connect timeout", []string{"GOMSG_CONNECT_TIMEOUT=1ms"}, []string{"boat"}, []string{"--connect-timeout"}},
		{"ops tls without a certificate", []string{"GOMSG_OPS_TLS=true"}, []string{"carrier"}, []string{"--ops-tls", "--tls-cert-file"}},
		{"gc percent", []string{"GOMSG_GC_PERCENT=-5"}, []string{"carrier"}, []string{"--gc-percent", "-5"}},
		{"redis addrs without cluster", nil, []string{"horn", "--redis-addrs", "127.0.0.1:1,127.0.0.1:2", "--start-timeout", "1s"}, []string{"--redis-addrs", "2 addresses", "--redis-cluster"}},
		{"redis addr and addrs", []string{"GOMSG_REDIS_ADDR=127.0.0.1:1"}, []string{"horn", "--redis-addrs", "127.0.0.1:2"}, []string{"--redis-addr", "--redis-addrs"}},
		{"unknown flag", nil, []string{"carrier", "--no-such-setting", "1"}, []string{"no-such-setting"}},
		{"stray argument", nil, []string{"boat", "extra"}, []string{"unexpected arguments", "extra"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stderr := run(t, tc.env, tc.args...)
			if code == 0 {
				t.Fatalf("gomsg %v with %v exited 0; stderr:\n%s", tc.args, tc.env, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("gomsg %v with %v: stderr does not name %q:\n%s", tc.args, tc.env, w, stderr)
				}
			}
		})
	}
}

func TestHelpListsFlagsAndExitsZero(t *testing.T) {
	t.Parallel()
	code, stderr := run(t, nil, "station", "-h")
	if code != 0 {
		t.Fatalf("gomsg station -h exited %d:\n%s", code, stderr)
	}
	for _, f := range []string{"-jwt-secret", "-push-grpc-addr", "-ops-addr", "GOMSG_<FLAG>"} {
		if !strings.Contains(stderr, f) {
			t.Errorf("gomsg station -h does not list %q:\n%s", f, stderr)
		}
	}
}

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	var status = map[string]int{"/readyz": http.StatusOK, "/draining": http.StatusServiceUnavailable}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, ok := status[r.URL.Path]
		if !ok {
			code = http.StatusNotFound
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte("state of " + r.URL.Path))
	}))
	t.Cleanup(srv.Close)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()

	cases := []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		want     string
	}{
		{"ready", nil, []string{"healthcheck", "--url", srv.URL + "/readyz"}, 0, ""},
		{"ready from env", []string{"GOMSG_URL=" + srv.URL + "/readyz"}, []string{"healthcheck"}, 0, ""},
		{"not ready", nil, []string{"healthcheck", "--url", srv.URL + "/draining"}, 1, "503"},
		{"not found", nil, []string{"healthcheck", "--url", srv.URL + "/nope"}, 1, "404"},
		{"refused", nil, []string{"healthcheck", "--url", deadURL + "/readyz"}, 1, "refused"},
		{"bad timeout", nil, []string{"healthcheck", "--timeout", "0s"}, 1, "timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stderr := run(t, tc.env, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("gomsg %v: exit %d, want %d; stderr:\n%s", tc.args, code, tc.wantCode, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("gomsg %v: stderr does not contain %q:\n%s", tc.args, tc.want, stderr)
			}
		})
	}
}

// healthcheck --ca-file trusts an --ops-tls endpoint's certificate; without
// it the system roots do not.
func TestHealthcheckHTTPS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stderr := run(t, nil, "healthcheck", "--url", srv.URL+"/readyz", "--ca-file", ca); code != 0 {
		t.Fatalf("with --ca-file: exit %d: %s", code, stderr)
	}
	if code, stderr := run(t, nil, "healthcheck", "--url", srv.URL+"/readyz"); code == 0 || !strings.Contains(stderr, "certificate") {
		t.Fatalf("without --ca-file: exit %d: %s", code, stderr)
	}
	if code, stderr := run(t, nil, "healthcheck", "--url", srv.URL, "--ca-file", filepath.Join(t.TempDir(), "none.pem")); code == 0 || !strings.Contains(stderr, "ca-file") {
		t.Fatalf("a missing --ca-file: exit %d: %s", code, stderr)
	}
}

// A mistyped flag or a bad value is one line naming it (with the closest
// flag) and pointing at -h, not the service's whole usage.
func TestMistypedFlagIsOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"carrier", "--ack-wiat", "1s"}, []string{"unknown flag --ack-wiat (did you mean --ack-wait?)", `run "gomsg carrier -h"`}},
		{[]string{"boat", "--no-such-setting", "1"}, []string{"unknown flag --no-such-setting", `run "gomsg boat -h"`}},
		{[]string{"station", "--max-uids", "many"}, []string{"max-uids", `run "gomsg station -h"`}},
	} {
		code, stderr := run(t, nil, tc.args...)
		if code == 0 {
			t.Fatalf("gomsg %v exited 0", tc.args)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("gomsg %v: stderr does not say %q:\n%s", tc.args, w, stderr)
			}
		}
		if n := strings.Count(strings.TrimSpace(stderr), "\n") + 1; n > 1 || strings.Contains(stderr, "Usage") {
			t.Errorf("gomsg %v: %d lines of stderr, want 1:\n%s", tc.args, n, stderr)
		}
	}
}

// config.ServiceEnv, the variables gomsgctl accepts as gomsg's, is every
// flag of gomsg's commands: a flag added here must be added there.
func TestServiceEnvIsEveryFlag(t *testing.T) {
	t.Parallel()
	want := map[string]bool{}
	for _, fs := range knownFlagSets() {
		fs.VisitAll(func(f *flag.Flag) { want[config.EnvName(f.Name)] = true })
	}
	for name := range want {
		if !slices.Contains(config.ServiceEnv, name) {
			t.Errorf("%s is a gomsg flag's variable but not in config.ServiceEnv (internal/config/service_env.go): add it", name)
		}
	}
	for _, name := range config.ServiceEnv {
		if !want[name] {
			t.Errorf("config.ServiceEnv lists %s, which no gomsg flag has: remove it", name)
		}
	}
}

// A NATS password or token on the command line, where every local user can
// read it, is refused; the same value from its GOMSG_* variable is taken.
func TestNATSSecretsRefusedOnCommandLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ flag, env string }{{"--nats-password", "GOMSG_NATS_PASSWORD"}, {"--nats-token", "GOMSG_NATS_TOKEN"}} {
		code, stderr := run(t, nil, "carrier", "--queue", "nats", tc.flag, "s3cret")
		if code == 0 || !strings.Contains(stderr, tc.flag+": refused on the command line") || strings.Contains(stderr, "s3cret") {
			t.Errorf("%s on the command line: exit %d: %s", tc.flag, code, stderr)
		}
	}
	if code, stderr := run(t, nil, "carrier", "--queue", "kafkaa"); code == 0 || !strings.Contains(stderr, `--queue: "kafkaa", want kafka or nats`) {
		t.Errorf("--queue kafkaa: exit %d: %s", code, stderr)
	}
}
