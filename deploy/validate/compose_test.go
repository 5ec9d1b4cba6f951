package validate

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// composeVariant is one way to run the stack: docker-compose.yml alone, or
// with files laid over it (`docker compose -f … -f …`).
type composeVariant struct {
	name  string
	files []string // relative to the repository root, in -f order
	// redisNodes are the Redis services GOMSG_REDIS_ADDRS names, in order;
	// cluster: they are a Redis Cluster (GOMSG_REDIS_CLUSTER=true).
	redisNodes []string
	cluster    bool
	// redisReady is the service whose readiness a gomsg service that uses
	// Redis waits for.
	redisReady string
}

var composeVariants = []composeVariant{
	{name: "default", files: []string{"docker-compose.yml"}, redisNodes: []string{"redis"}, redisReady: "redis"},
	{name: "redis-cluster", files: []string{"docker-compose.yml", filepath.Join("deploy", "compose", "redis-cluster.yml")},
		redisNodes: []string{"redis-1", "redis-2", "redis-3"}, cluster: true, redisReady: "redis-cluster-init"},
}

// loadCompose loads and validates the variant's compose files (compose-go
// checks them against the Compose specification's schema and merges them as
// `docker compose -f … -f …` does) with an empty environment, so
// ${VAR:-default} takes its default, as on a fresh machine.
func loadCompose(t *testing.T, v composeVariant) *types.Project {
	t.Helper()
	root := repoRoot(t)
	var files []string
	for _, f := range v.files {
		files = append(files, filepath.Join(root, f))
	}
	opts, err := cli.NewProjectOptions(files,
		cli.WithWorkingDirectory(root), cli.WithName("gomsg"), cli.WithEnv(nil), cli.WithDiscardEnvFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := opts.LoadProject(ctx)
	if err != nil {
		t.Fatalf("%s does not load: %v", strings.Join(v.files, " + "), err)
	}
	return p
}

// eachComposeVariant runs f on every variant's project, as a subtest.
func eachComposeVariant(t *testing.T, f func(t *testing.T, v composeVariant, p *types.Project)) {
	t.Helper()
	for _, v := range composeVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			f(t, v, loadCompose(t, v))
		})
	}
}

func composeEnv(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = *v
		} else {
			env[k] = ""
		}
	}
	return env
}

var backendImages = map[string][]string{
	"kafka": {"apache/kafka:"},
	"redis": {"redis:", "valkey/valkey:"},
	"etcd":  {"quay.io/coreos/etcd:", "gcr.io/etcd-development/etcd:", "bitnami/etcd:"},
}

// backendKind is the backend a compose service runs ("" for a gomsg
// service): redis-1 and redis-cluster-init are Redis.
func backendKind(name string) string {
	for kind := range backendImages {
		if name == kind || strings.HasPrefix(name, kind+"-") {
			return kind
		}
	}
	return ""
}

// oneShot reports whether a service is a job that runs to completion: not
// restarted, and waited for by its exit, not by a health check.
func oneShot(p *types.Project, name string) bool {
	if r := p.Services[name].Restart; r != "" && r != types.RestartPolicyNo {
		return false
	}
	for _, s := range p.Services {
		if d, ok := s.DependsOn[name]; ok && d.Condition == types.ServiceConditionCompletedSuccessfully {
			return true
		}
	}
	return false
}

func TestComposeServicesImagesAndHealthChecks(t *testing.T) {
	t.Parallel()
	eachComposeVariant(t, func(t *testing.T, v composeVariant, p *types.Project) {
		want := append(slices.Clone(services), "kafka", "etcd")
		want = append(want, v.redisNodes...)
		if v.redisReady != v.redisNodes[0] {
			want = append(want, v.redisReady)
		}
		got := slices.Collect(maps.Keys(p.Services))
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("compose services %v, want %v", got, want)
		}
		root := repoRoot(t)
		for name, s := range p.Services {
			hc := s.HealthCheck
			switch {
			case oneShot(p, name):
				// Its exit is what others wait for.
			case hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] == "NONE":
				t.Errorf("service %s has no health check", name)
			case hc.Interval == nil || hc.Retries == nil:
				t.Errorf("service %s: health check without interval or retries", name)
			}
			if prefixes, ok := backendImages[backendKind(name)]; ok {
				if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(s.Image, p) }) {
					t.Errorf("service %s: image %q, want one of %v", name, s.Image, prefixes)
				}
				if tag := s.Image[strings.LastIndex(s.Image, ":")+1:]; tag == "latest" || tag == "" {
					t.Errorf("service %s: image %q is not pinned to a version", name, s.Image)
				}
				continue
			}
			// A gomsg service: built from the Dockerfile, service chosen by the command.
			if s.Build == nil || filepath.Clean(s.Build.Context) != root || s.Build.Dockerfile != "Dockerfile" {
				t.Errorf("service %s: not built from ./Dockerfile at the repository root: %+v", name, s.Build)
			}
			if len(s.Command) != 1 || s.Command[0] != name {
				t.Errorf("service %s: command %q, want [%q]", name, s.Command, name)
			}
			if s.Image != p.Services["station"].Image {
				t.Errorf("service %s: image %q differs from station's %q: one image serves every service", name, s.Image, p.Services["station"].Image)
			}
		}
	})
}

func TestComposeDependsOnComesUpInOrder(t *testing.T) {
	t.Parallel()
	eachComposeVariant(t, func(t *testing.T, v composeVariant, p *types.Project) {
		for name, s := range p.Services {
			for dep, d := range s.DependsOn {
				ds, ok := p.Services[dep]
				if !ok {
					t.Errorf("%s depends on unknown service %s", name, dep)
					continue
				}
				// A service with a health check is waited for until healthy;
				// one without (a job) until it has exited 0.
				want := types.ServiceConditionHealthy
				if ds.HealthCheck == nil {
					want = types.ServiceConditionCompletedSuccessfully
				}
				if d.Condition != want {
					t.Errorf("%s depends on %s with condition %q, want %q", name, dep, d.Condition, want)
				}
			}
		}
		// What each gomsg service dials must be ready before it starts.
		needs := map[string][]string{
			"station": {"kafka", v.redisReady, "etcd"},
			"boat":    {"station", "etcd"},
			"carrier": {"kafka", v.redisReady, "etcd", "station"},
			"horn":    {"kafka", v.redisReady},
		}
		if v.redisReady != v.redisNodes[0] {
			needs[v.redisReady] = v.redisNodes
		}
		for svc, deps := range needs {
			for _, d := range deps {
				if !dependsOn(p, svc, d, map[string]bool{}) {
					t.Errorf("%s does not wait for %s", svc, d)
				}
			}
		}
	})
}

func dependsOn(p *types.Project, svc, target string, seen map[string]bool) bool {
	if seen[svc] {
		return false
	}
	seen[svc] = true
	for dep := range p.Services[svc].DependsOn {
		if dep == target || dependsOn(p, dep, target, seen) {
			return true
		}
	}
	return false
}

func TestComposeEnvironmentMatchesFlags(t *testing.T) {
	t.Parallel()
	eachComposeVariant(t, checkComposeEnvironment)
}

func checkComposeEnvironment(t *testing.T, v composeVariant, p *types.Project) {
	wantRedis := composeRedisEnv(t, p, v)
	settings := map[string]map[string]string{}
	for _, svc := range services {
		s := p.Services[svc]
		env := composeEnv(s)
		for k := range env {
			if !strings.HasPrefix(k, "GOMSG_") {
				t.Errorf("%s: environment variable %s is not a gomsg setting", svc, k)
			}
		}
		eff := checkEnv(t, "docker-compose.yml service "+svc, svc, env)
		settings[svc] = eff

		// Listen addresses must be reachable from other containers.
		listen := map[int]string{}
		for _, f := range listenFlags[svc] {
			if eff[f] == "" { // a listener that is off (the console by default)
				continue
			}
			host, _, _ := net.SplitHostPort(eff[f])
			if host == "127.0.0.1" || host == "localhost" {
				t.Errorf("%s: --%s %s listens on loopback only, unreachable from other containers", svc, f, eff[f])
			}
			listen[port(t, svc+" --"+f, eff[f])] = f
		}
		// Published ports are ports the service listens on.
		for _, pc := range s.Ports {
			if _, ok := listen[int(pc.Target)]; !ok {
				t.Errorf("%s publishes container port %d, which it does not listen on (listeners: %v)", svc, pc.Target, listen)
			}
		}
		// The health check asks this service's own ops port.
		wantHC := []string{"CMD", "/gomsg", "healthcheck", "--url", fmt.Sprintf("http://127.0.0.1:%d/readyz", port(t, svc, eff["ops-addr"]))}
		if got := []string(s.HealthCheck.Test); !slices.Equal(got, wantHC) {
			t.Errorf("%s: health check %q, want %q", svc, got, wantHC)
		}
		// Backend addresses name the backend services.
		checkRedisEnv(t, svc, env, wantRedis)
		for _, b := range strings.Split(env["GOMSG_KAFKA_BROKERS"], ",") {
			checkServiceAddr(t, p, svc, "GOMSG_KAFKA_BROKERS", b, "kafka", -1)
			if adv := composeEnv(p.Services["kafka"])["KAFKA_ADVERTISED_LISTENERS"]; !strings.Contains(adv, "://"+b) {
				t.Errorf("%s: broker %s is not one Kafka advertises (%s)", svc, b, adv)
			}
		}
		for _, e := range strings.Split(env["GOMSG_ETCD_ENDPOINTS"], ",") {
			checkServiceAddr(t, p, svc, "GOMSG_ETCD_ENDPOINTS", e, "etcd", -1)
			if !slices.Contains(p.Services["etcd"].Command, "--advertise-client-urls=http://"+e) {
				t.Errorf("%s: etcd endpoint %s is not what etcd advertises (%q)", svc, e, p.Services["etcd"].Command)
			}
		}
	}
	// boat → station, carrier → boat.
	checkServiceAddr(t, p, "boat", "GOMSG_STATION_ADDR", settings["boat"]["station-addr"], "station", port(t, "station", settings["station"]["station-internal-addr"]))
	checkServiceAddr(t, p, "boat", "GOMSG_BOAT_ADVERTISE_ADDR", settings["boat"]["boat-advertise-addr"], "boat", port(t, "boat", settings["boat"]["boat-internal-addr"]))

	// boat drains for --shutdown-grace; Docker must wait longer before SIGKILL.
	grace, err := time.ParseDuration(settings["boat"]["shutdown-grace"])
	if err != nil {
		t.Fatal(err)
	}
	if sg := p.Services["boat"].StopGracePeriod; sg == nil || time.Duration(*sg) <= grace {
		t.Errorf("boat stop_grace_period %v does not exceed --shutdown-grace %s", sg, grace)
	}
}

func checkServiceAddr(t *testing.T, p *types.Project, svc, env, addr, wantService string, wantPort int) {
	t.Helper()
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: %s=%q is not host:port", svc, env, addr)
		return
	}
	if host != wantService {
		t.Errorf("%s: %s=%q, want the compose service %q", svc, env, addr, wantService)
	}
	if wantPort > 0 && ps != strconv.Itoa(wantPort) {
		t.Errorf("%s: %s=%q, want port %d", svc, env, addr, wantPort)
	}
}

// TestComposeWorksWithGomsgctlDefaults: gomsgctl on the host, with no flags,
// reaches the stack: the published ports are gomsgctl's default addresses and
// station's JWT secret is the one gomsgctl signs with.
func TestComposeWorksWithGomsgctlDefaults(t *testing.T) {
	t.Parallel()
	eachComposeVariant(t, checkComposeGomsgctl)
}

func checkComposeGomsgctl(t *testing.T, _ composeVariant, p *types.Project) {
	ctl := binary(t, "gomsgctl")
	listen, out, ok := helpFlags(t, ctl, "listen")
	if !ok {
		t.Fatalf("gomsgctl listen -h:\n%s", out)
	}
	push, out, ok := helpFlags(t, ctl, "push")
	if !ok {
		t.Fatalf("gomsgctl push -h:\n%s", out)
	}
	published := func(svc string, target int) string {
		for _, pc := range p.Services[svc].Ports {
			if int(pc.Target) == target {
				return pc.Published
			}
		}
		return ""
	}
	station := checkEnv(t, "station", "station", composeEnv(p.Services["station"]))
	boat := checkEnv(t, "boat", "boat", composeEnv(p.Services["boat"]))
	for _, c := range []struct {
		what, ctlAddr, svc, listenAddr string
	}{
		{"client stream", listen["addr"].Default, "boat", boat["client-addr"]},
		{"Push API (gRPC)", push["push-addr"].Default, "station", station["push-grpc-addr"]},
	} {
		pub := published(c.svc, port(t, c.svc, c.listenAddr))
		if want := strconv.Itoa(port(t, "gomsgctl", c.ctlAddr)); pub != want {
			t.Errorf("%s: %s publishes %q, gomsgctl dials %s", c.what, c.svc, pub, c.ctlAddr)
		}
	}
	if pub := published("station", port(t, "station", station["push-http-addr"])); pub == "" {
		t.Error("station does not publish the HTTP/JSON Push API")
	}
	// Outside `gomsg dev` station refuses gomsg dev's public secret; compose
	// has its own dev-only one (the file's header tells gomsgctl users to
	// export it), at least 32 bytes.
	if got := station["jwt-secret"]; got == listen["jwt-secret"].Default || len(got) < 32 {
		t.Errorf("station's JWT secret %q: gomsg station refuses it (the dev secret, or shorter than 32 bytes)", got)
	}
	if station["api-keys"] == "" || station["internal-token"] == "" || boat["internal-token"] != station["internal-token"] {
		t.Errorf("station needs GOMSG_API_KEYS and GOMSG_INTERNAL_TOKEN, the same internal token as boat's: %q %q %q",
			station["api-keys"], station["internal-token"], boat["internal-token"])
	}
}
