package validate

import (
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// redisEnv are the variables that choose gomsg's Redis: the deprecated
// one-address form, the address list and cluster mode.
var redisEnv = []string{"GOMSG_REDIS_ADDR", "GOMSG_REDIS_ADDRS", "GOMSG_REDIS_CLUSTER"}

// checkRedisEnv checks the Redis settings a service gets are exactly want
// (the deprecated GOMSG_REDIS_ADDR among them only if want has it) and that
// gomsg takes them.
func checkRedisEnv(t *testing.T, where string, env, want map[string]string) {
	t.Helper()
	if got := redisSubset(env); !maps.Equal(got, want) {
		t.Errorf("%s: Redis settings %v, want %v", where, got, want)
	}
	checkGomsgTakesRedis(t, where, env)
}

// checkGomsgTakesRedis runs `gomsg carrier` with only the Redis settings of
// env and a start-up budget too short to reach anything. gomsg dials Redis
// only once it has accepted them — one of --redis-addr and --redis-addrs,
// several addresses only with --redis-cluster — so "redis <addrs>: not
// reachable" is the answer that says the settings are good.
func checkGomsgTakesRedis(t *testing.T, where string, env map[string]string) {
	t.Helper()
	c := exec.Command(binary(t, "gomsg"), "carrier")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMSG_") {
			c.Env = append(c.Env, kv)
		}
	}
	// No internal token: carrier refuses to start without one before it
	// dials anything.
	c.Env = append(c.Env, "GOMSG_INSECURE_INTERNAL=true", "GOMSG_START_TIMEOUT=1ms")
	addrs := env["GOMSG_REDIS_ADDRS"]
	for _, k := range redisEnv {
		if v, ok := env[k]; ok {
			c.Env = append(c.Env, k+"="+v)
		}
		if k == "GOMSG_REDIS_ADDR" && env[k] != "" && addrs == "" {
			addrs = env[k]
		}
	}
	out, err := c.CombinedOutput()
	if want := "redis " + addrs + ": not reachable"; err == nil || !strings.Contains(string(out), want) {
		t.Errorf("%s: gomsg does not take the Redis settings %v: exit %v, want an error with %q:\n%s",
			where, redisSubset(env), err, want, out)
	}
}

func redisSubset(env map[string]string) map[string]string {
	out := map[string]string{}
	for _, k := range redisEnv {
		if v, ok := env[k]; ok {
			out[k] = v
		}
	}
	return out
}

// TestChartRedisSettings: backends.redisAddrs and backends.redisCluster
// reach every Deployment as GOMSG_REDIS_ADDRS and GOMSG_REDIS_CLUSTER, and
// values written for the deprecated backends.redisAddr still render the
// one server they name.
func TestChartRedisSettings(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, file, vals string
		addrs            string
		cluster          bool
	}{
		{"default", "", "", "gomsg-redis-master:6379", false},
		{"production", "ci/production-values.yaml", "", "redis-master.messaging.svc:6379", false},
		{"cluster values file", "ci/redis-cluster-values.yaml", "",
			"redis-cluster-0.redis-cluster-headless.messaging.svc:6379,redis-cluster-1.redis-cluster-headless.messaging.svc:6379," +
				"redis-cluster-2.redis-cluster-headless.messaging.svc:6379", true},
		{"cluster through one Service", "", "backends: {redisAddrs: ['redis-cluster:6379'], redisCluster: true}", "redis-cluster:6379", true},
		{"one server, cluster off", "", "backends: {redisAddrs: ['redis:6379'], redisCluster: false}", "redis:6379", false},
		{"deprecated redisAddr", "", "backends: {redisAddr: 'old-redis:6379'}", "old-redis:6379", false},
		{"deprecated redisAddr equal to redisAddrs", "", "backends: {redisAddr: 'old-redis:6379', redisAddrs: ['old-redis:6379']}", "old-redis:6379", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vals := readValues(t, tc.file)
			if tc.vals != "" {
				if err := yaml.Unmarshal([]byte(tc.vals), &vals); err != nil {
					t.Fatal(err)
				}
			}
			files, err := render(t, "gomsg", vals, kubeVersions[1])
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			o := decode(t, files)
			if len(o.deployments) == 0 {
				t.Fatal("no Deployments rendered")
			}
			want := map[string]string{"GOMSG_REDIS_ADDRS": tc.addrs, "GOMSG_REDIS_CLUSTER": strconv.FormatBool(tc.cluster)}
			for i, name := range slices.Sorted(maps.Keys(o.deployments)) {
				c := o.deployments[name].Spec.Template.Spec.Containers[0]
				where := "Deployment " + name
				env := containerEnv(t, o, where, c)
				checkEnv(t, where, c.Args[0], env)
				if i == 0 { // one common ConfigMap feeds every Deployment: ask gomsg once
					checkRedisEnv(t, where, env, want)
				} else if got := redisSubset(env); !maps.Equal(got, want) {
					t.Errorf("%s: Redis settings %v, want %v", where, got, want)
				}
			}
		})
	}
}
