package validate

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Services are gomsg's service subcommands.
var services = []string{"boat", "station", "carrier", "horn"}

// pendingHornFlags are the horn settings this chart and compose file use,
// for a binary whose `gomsg horn` is not built; when it is built (it is now),
// its real flags are read instead and any difference fails the tests.
var pendingHornFlags = map[string]string{
	"apns-key-file":        "string",
	"apns-key-id":          "string",
	"apns-team-id":         "string",
	"apns-topic":           "string",
	"apns-environment":     "string",
	"fcm-credentials-file": "string",
}

// flagInfo is one flag as `-h` prints it.
type flagInfo struct {
	Type    string // "string", "int", "duration", "bool", "value", …
	Default string
}

type flagSet map[string]flagInfo

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "gomsg")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	return root
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binary builds cmd/<name> of the main module (once per test run) and returns
// its path. It builds as the Dockerfile does, with CGO_ENABLED=0.
func binary(t testing.TB, name string) string {
	t.Helper()
	root := repoRoot(t)
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "gomsg-validate-"); buildErr != nil {
			return
		}
		for _, cmd := range []string{"gomsg", "gomsgctl"} {
			c := exec.Command("go", "build", "-o", filepath.Join(binDir, cmd), "./cmd/"+cmd)
			c.Dir = root
			c.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := c.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build ./cmd/%s: %v\n%s", cmd, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	flagsMu    sync.Mutex
	flagsCache = map[string]flagSet{}
)

// helpFlags runs `<bin> <args…> -h` with no GOMSG_* environment and parses
// the flags it prints. ok is false when the command exits non-zero.
func helpFlags(t testing.TB, bin string, args ...string) (fs flagSet, out string, ok bool) {
	t.Helper()
	c := exec.Command(bin, append(args, "-h")...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMSG_") {
			c.Env = append(c.Env, kv)
		}
	}
	b, err := c.CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s %v -h: %v", bin, args, err)
		}
		return nil, string(b), false
	}
	return parseHelp(t, string(b)), string(b), true
}

var defaultRE = regexp.MustCompile(`\(default (.*)\)$`)

// parseHelp reads flag.PrintDefaults output:
//
//	-ack-wait duration
//	  	how long … (default 10s)
func parseHelp(t testing.TB, help string) flagSet {
	t.Helper()
	fs := flagSet{}
	var cur string
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "  -"):
			f := strings.Fields(strings.TrimPrefix(line, "  -"))
			cur = f[0]
			typ := "bool"
			if len(f) > 1 {
				typ = f[1]
			}
			fs[cur] = flagInfo{Type: typ}
		case cur != "" && strings.HasPrefix(line, "    \t"):
			if m := defaultRE.FindStringSubmatch(line); m != nil {
				fi := fs[cur]
				fi.Default = m[1]
				if u, err := strconv.Unquote(m[1]); err == nil {
					fi.Default = u
				}
				fs[cur] = fi
			}
		}
	}
	if len(fs) == 0 {
		t.Fatalf("no flags found in help output:\n%s", help)
	}
	return fs
}

// serviceFlags are the flags `gomsg <service>` accepts. For horn, while it
// is not built, they are the flags every other service shares plus
// pendingHornFlags.
func serviceFlags(t testing.TB, service string) flagSet {
	t.Helper()
	flagsMu.Lock()
	defer flagsMu.Unlock()
	if fs, ok := flagsCache[service]; ok {
		return fs
	}
	fs, out, ok := helpFlags(t, binary(t, "gomsg"), service)
	if !ok {
		if service != "horn" || !strings.Contains(out, "not built yet") {
			t.Fatalf("gomsg %s -h failed:\n%s", service, out)
		}
		t.Logf("gomsg horn is not built yet: checking horn's settings against the shared flags and %v", keys(pendingHornFlags))
		fs = nil
		for _, other := range []string{"boat", "station", "carrier"} {
			o, out, ok := helpFlags(t, binary(t, "gomsg"), other)
			if !ok {
				t.Fatalf("gomsg %s -h failed:\n%s", other, out)
			}
			if fs == nil {
				fs = o
				continue
			}
			for name := range fs {
				if _, shared := o[name]; !shared {
					delete(fs, name)
				}
			}
		}
		for name, typ := range pendingHornFlags {
			fs[name] = flagInfo{Type: typ}
		}
	}
	flagsCache[service] = fs
	return fs
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// flagOfEnv maps GOMSG_FOO_BAR to foo-bar, the way internal/config does.
func flagOfEnv(env string) (string, bool) {
	name, ok := strings.CutPrefix(env, "GOMSG_")
	if !ok {
		return "", false
	}
	return strings.ToLower(strings.ReplaceAll(name, "_", "-")), true
}

// checkValue reports whether v is a valid value for a flag of type typ.
func checkValue(typ, v string) error {
	var err error
	switch typ {
	case "duration":
		_, err = time.ParseDuration(v)
	case "int":
		_, err = strconv.Atoi(v)
	case "bool":
		_, err = strconv.ParseBool(v)
	}
	return err
}

// checkEnv checks environment variables given to `gomsg <service>`: every
// GOMSG_* variable names a flag of that service and has a value of the flag's
// type. vars holds name → value ("" with dynamic true for values only known at
// run time). It returns the effective settings: flag defaults overridden by
// vars.
func checkEnv(t testing.TB, where, service string, vars map[string]string) map[string]string {
	t.Helper()
	fs := serviceFlags(t, service)
	eff := map[string]string{}
	for name, fi := range fs {
		eff[name] = fi.Default
	}
	for env, v := range vars {
		name, ok := flagOfEnv(env)
		if !ok {
			continue
		}
		fi, ok := fs[name]
		if !ok {
			t.Errorf("%s: %s is not a setting of gomsg %s (no flag --%s)", where, env, service, name)
			continue
		}
		if strings.Contains(v, "$(") { // Kubernetes dependent variable, known at run time
			eff[name] = v
			continue
		}
		if err := checkValue(fi.Type, v); err != nil {
			t.Errorf("%s: %s=%q is not a valid %s for --%s: %v", where, env, v, fi.Type, name, err)
		}
		eff[name] = v
	}
	return eff
}

// port is the port of a host:port setting.
func port(t testing.TB, where, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: %q is not host:port: %v", where, addr, err)
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Errorf("%s: port of %q: %v", where, addr, err)
		return -1
	}
	return n
}

// listenFlags are the settings that are listen addresses, per service.
var listenFlags = map[string][]string{
	"boat":    {"client-addr", "ws-addr", "mqtt-addr", "boat-internal-addr", "ops-addr"},
	"station": {"push-grpc-addr", "push-http-addr", "station-internal-addr", "console-addr", "ops-addr"},
	"carrier": {"ops-addr"},
	"horn":    {"ops-addr"},
}

func TestFlagsAreReadFromTheBinary(t *testing.T) {
	// The parser must see what the other tests rely on; a change in the
	// help format should fail here first.
	fs := serviceFlags(t, "boat")
	for name, typ := range map[string]string{"client-addr": "string", "lease-ttl": "duration", "send-queue": "int",
		"create-topics": "bool", "kafka-brokers": "value", "ops-addr": "string"} {
		if fs[name].Type != typ {
			t.Errorf("boat --%s: type %q, want %q", name, fs[name].Type, typ)
		}
	}
	if got := fs["client-addr"].Default; got != "0.0.0.0:7100" {
		t.Errorf("boat --client-addr default %q, want 0.0.0.0:7100", got)
	}
	if _, ok := serviceFlags(t, "carrier")["jwt-secret"]; ok {
		t.Error("carrier has --jwt-secret: the per-service flag sets are not told apart")
	}
	for _, s := range services {
		for _, f := range listenFlags[s] {
			if _, ok := serviceFlags(t, s)[f]; !ok {
				t.Errorf("gomsg %s has no --%s", s, f)
			}
		}
	}
}
