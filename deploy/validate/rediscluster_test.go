package validate

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
)

// redisArg is the value of a redis-server option in a compose command
// ("--port 7000"), and whether the command gives it.
func redisArg(s types.ServiceConfig, option string) (string, bool) {
	i := slices.Index(s.Command, option)
	if i < 0 || i+1 >= len(s.Command) {
		return "", false
	}
	return s.Command[i+1], true
}

func clusterEnabled(s types.ServiceConfig) bool {
	v, _ := redisArg(s, "--cluster-enabled")
	return v == "yes"
}

// redisPort is the port a compose Redis service listens on.
func redisPort(t *testing.T, s types.ServiceConfig) int {
	t.Helper()
	v, ok := redisArg(s, "--port")
	if !ok {
		return 6379
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Errorf("Redis service %s: --port %q: %v", s.Name, v, err)
	}
	return n
}

// composeRedisEnv returns the Redis settings every gomsg service of the
// variant must have: its Redis services by name and port, and cluster mode
// for a cluster only. It checks those services, and only those, run Redis in
// cluster mode when the settings say so: the default file stays one server.
func composeRedisEnv(t *testing.T, p *types.Project, v composeVariant) map[string]string {
	t.Helper()
	var addrs, clustered []string
	for _, n := range v.redisNodes {
		s, ok := p.Services[n]
		if !ok {
			t.Errorf("no Redis service %s", n)
			continue
		}
		addrs = append(addrs, net.JoinHostPort(n, strconv.Itoa(redisPort(t, s))))
	}
	for name, s := range p.Services {
		if clusterEnabled(s) {
			clustered = append(clustered, name)
		}
	}
	slices.Sort(clustered)
	var wantClustered []string
	if v.cluster {
		wantClustered = v.redisNodes
	}
	if !slices.Equal(clustered, wantClustered) {
		t.Errorf("services with --cluster-enabled yes: %v, want %v", clustered, wantClustered)
	}
	want := map[string]string{"GOMSG_REDIS_ADDRS": strings.Join(addrs, ",")}
	if v.cluster {
		want["GOMSG_REDIS_CLUSTER"] = "true"
	}
	return want
}

func clusterVariant(t *testing.T) composeVariant {
	t.Helper()
	for _, v := range composeVariants {
		if v.cluster {
			return v
		}
	}
	t.Fatal("no compose variant runs a Redis Cluster")
	return composeVariant{}
}

// TestComposeRedisCluster: the cluster variant runs three cluster nodes on
// the Redis image docker-compose.yml uses, and a job on that image that
// gets their addresses and runs no longer than it takes.
func TestComposeRedisCluster(t *testing.T) {
	t.Parallel()
	v := clusterVariant(t)
	p := loadCompose(t, v)
	image := loadCompose(t, composeVariants[0]).Services["redis"].Image
	var addrs []string
	for _, n := range v.redisNodes {
		s := p.Services[n]
		if s.Image != image {
			t.Errorf("%s: image %q, want docker-compose.yml's Redis image %q", n, s.Image, image)
		}
		if len(s.Command) == 0 || s.Command[0] != "redis-server" {
			t.Errorf("%s: command %q does not run redis-server", n, s.Command)
		}
		addrs = append(addrs, net.JoinHostPort(n, strconv.Itoa(redisPort(t, s))))
	}
	if len(addrs) != 3 {
		t.Errorf("%d cluster nodes, want 3 masters", len(addrs))
	}
	init, ok := p.Services[v.redisReady]
	if !ok {
		t.Fatalf("no service %s", v.redisReady)
	}
	if init.Image != image {
		t.Errorf("%s: image %q, want docker-compose.yml's Redis image %q (its redis-cli)", v.redisReady, init.Image, image)
	}
	if !oneShot(p, v.redisReady) {
		t.Errorf("%s is not a job: restart %q, or nothing waits for it to complete", v.redisReady, init.Restart)
	}
	if got, want := composeEnv(init)["REDIS_CLUSTER_NODES"], strings.Join(addrs, " "); got != want {
		t.Errorf("%s: REDIS_CLUSTER_NODES=%q, want the nodes %q", v.redisReady, got, want)
	}
}

// syncBuffer is a bytes.Buffer a child process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor polls cond until it returns nil, failing the test with cond's
// last error when timeout passes first.
func waitFor(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback port that is free now, below the kernel's
// ephemeral range, so that no outgoing connection takes it before
// redis-server binds it (a cluster node's default bus port, its port +
// 10000, can lie in that range: hence the explicit --cluster-port).
func freePort(t *testing.T) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 200 {
		port := 10000 + rand.IntN(low-10000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port
	}
	t.Fatalf("no free port below %d among 200 tries", low)
	return 0
}

// redisCLI runs redis-cli against a loopback port.
func redisCLI(port int, args ...string) (string, error) {
	out, err := exec.Command("redis-cli", append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// redisNode is a redis-server run with a compose node's command, on a
// loopback port, keeping its data and cluster state in dir across restarts.
type redisNode struct {
	args []string
	port int
	out  syncBuffer
	cmd  *exec.Cmd
}

// startNode starts redis-server with a compose node's command on port,
// loopback only, and returns once it answers; t.Cleanup stops it.
func startNode(t *testing.T, command []string, port, busPort int) *redisNode {
	t.Helper()
	if len(command) == 0 || command[0] != "redis-server" {
		t.Fatalf("node command %q does not run redis-server", command)
	}
	n := &redisNode{port: port, args: append(slices.Clone(command[1:]), "--port", strconv.Itoa(port),
		"--cluster-port", strconv.Itoa(busPort), "--bind", "127.0.0.1", "-::1", "--dir", t.TempDir(), "--daemonize", "no")}
	n.start(t)
	t.Cleanup(n.stop)
	return n
}

func (n *redisNode) start(t *testing.T) {
	t.Helper()
	n.cmd = exec.Command("redis-server", n.args...)
	n.cmd.Stdout, n.cmd.Stderr = &n.out, &n.out
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	waitFor(t, 10*time.Second, func() error {
		if got, err := redisCLI(n.port, "ping"); got != "PONG" {
			return fmt.Errorf("redis-server on %d does not answer PING: %q %v\n%s", n.port, got, err, n.out.String())
		}
		return nil
	})
}

// stop ends the server as `docker stop` does: SIGTERM, and it saves and exits.
func (n *redisNode) stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	_ = n.cmd.Wait()
	n.cmd = nil
}

// scriptRun is redis-cluster-init's command running as a child process.
type scriptRun struct {
	out  syncBuffer
	done chan struct{} // closed when it has exited, with err
	err  error
}

func startScript(t *testing.T, command []string, nodes string) *scriptRun {
	t.Helper()
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), "REDIS_CLUSTER_NODES="+nodes)
	r := &scriptRun{done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &r.out, &r.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", command[:2], err)
	}
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-r.done
	})
	return r
}

// wait returns the script's exit error, failing the test if it runs longer
// than timeout.
func (r *scriptRun) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(timeout):
		t.Fatalf("redis-cluster-init still runs after %s:\n%s", timeout, r.out.String())
		return nil
	}
}

// clusterOf checks every node serves in one healthy cluster of three
// masters holding every slot, and returns the node ids by port.
func clusterOf(t *testing.T, ports []int) map[int]string {
	t.Helper()
	ids := map[int]string{}
	for _, port := range ports {
		info, err := redisCLI(port, "cluster", "info")
		if err != nil {
			t.Fatalf("node %d: cluster info: %v: %s", port, err, info)
		}
		fields := map[string]string{}
		for _, line := range strings.Split(info, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				fields[k] = v
			}
		}
		for k, want := range map[string]string{"cluster_state": "ok", "cluster_slots_assigned": "16384",
			"cluster_known_nodes": strconv.Itoa(len(ports)), "cluster_size": strconv.Itoa(len(ports))} {
			if fields[k] != want {
				t.Errorf("node %d: %s:%s, want %s (a cluster of %d masters)", port, k, fields[k], want, len(ports))
			}
		}
		if ids[port], err = redisCLI(port, "cluster", "myid"); err != nil {
			t.Fatalf("node %d: cluster myid: %v", port, err)
		}
	}
	return ids
}

// TestComposeRedisClusterInit runs redis-cluster-init's command, as compose
// runs it, against real redis-server processes started with the nodes' own
// command and named by host name as compose names them: it waits for nodes
// that are not up yet, makes them one cluster of three masters serving
// every slot and ready (cluster_state:ok) when it exits 0, and run again
// after a node restarted, it exits 0 once that node is back in the cluster,
// which it leaves as it was.
func TestComposeRedisClusterInit(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found on PATH (scripts/test.sh installs it): %v", tool, err)
		}
	}
	v := clusterVariant(t)
	p := loadCompose(t, v)
	init := p.Services[v.redisReady]
	if len(init.Entrypoint) != 0 || len(init.Command) < 3 || path.Base(init.Command[0]) != "sh" {
		t.Fatalf("%s: entrypoint %q command %q, want the image's entrypoint and [sh -c… script]", v.redisReady, init.Entrypoint, init.Command)
	}
	var ports, busPorts []int
	var nodes []string
	for range v.redisNodes {
		port := freePort(t)
		ports, busPorts = append(ports, port), append(busPorts, freePort(t))
		nodes = append(nodes, net.JoinHostPort("localhost", strconv.Itoa(port)))
	}

	first := startScript(t, init.Command, strings.Join(nodes, " "))
	waitFor(t, 20*time.Second, func() error {
		if !strings.Contains(first.out.String(), "waiting for") {
			return errors.New("redis-cluster-init does not say it waits for the nodes, which are not started:\n" + first.out.String())
		}
		return nil
	})
	var servers []*redisNode
	for i, n := range v.redisNodes {
		servers = append(servers, startNode(t, p.Services[n].Command, ports[i], busPorts[i]))
	}
	if err := first.wait(t, 90*time.Second); err != nil {
		t.Fatalf("redis-cluster-init: %v\n%s", err, first.out.String())
	}
	ids := clusterOf(t, ports)
	t.Logf("first run:\n%s", first.out.String())

	// A container restarted: the node comes back with its nodes.conf but, a
	// master, stays cluster_state:fail for its first 2 s (Redis' writable
	// delay), so the second run has to wait for it, as gomsg would need it to.
	servers[0].stop()
	servers[0].start(t)
	second := startScript(t, init.Command, strings.Join(nodes, " "))
	if err := second.wait(t, 90*time.Second); err != nil {
		t.Fatalf("redis-cluster-init on a cluster it created: %v\n%s", err, second.out.String())
	}
	if again := clusterOf(t, ports); !maps.Equal(again, ids) {
		t.Errorf("node ids %v after a second run, want %v unchanged", again, ids)
	}
}
