// Package chaos runs gomsg as separate processes (the gomsg binary) on a real
// redis-server, an embedded etcd and a queue (an in-process Kafka-protocol
// broker, or Debian's nats-server as a process for NATS JetStream),
// breaks parts of it under load, and checks that every acknowledged push
// reached each target platform: delivered, stored offline or dead-lettered.
package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/testutil"
)

var gomsgBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gomsg-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gomsgBin = filepath.Join(dir, "gomsg")
	build := exec.Command("go", "build", "-o", gomsgBin, "github.com/gomsg/gomsg/cmd/gomsg")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build gomsg:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const (
	secret        = "chaos-secret-at-least-32-bytes-long"
	apiKey        = "chaos-api-key"
	internalToken = "chaos-internal-token-0123456789"
	platforms     = "ios:offline=1h/100000,web:offline=1h/100000"
)

// proc is one gomsg service process.
type proc struct {
	name string
	args []string
	cmd  *exec.Cmd
	out  *bytes.Buffer
	mu   sync.Mutex
}

// cluster is the backends plus gomsg processes.
type cluster struct {
	t     *testing.T
	redis *testutil.Redis
	etcd  string
	// kafka is the broker's address on Kafka; nats the nats-server process
	// on NATS JetStream (--queue nats), else nil.
	kafka  string
	nats   *testutil.NATSProcess
	common []string

	stationInternal string
	push            string
	boatsMu         sync.Mutex
	boats           map[string]string // boat id → client address
	procs           []*proc
}

// queueKind is the queue a cluster runs on.
type queueKind string

const (
	onKafka queueKind = "kafka"
	// onNATS is NATS JetStream on Debian's nats-server as a process of its
	// own, which a scenario can kill and start again.
	onNATS queueKind = "nats"
)

// eachQueue runs body as a parallel subtest on each queue, so one chaos
// scenario checks both.
func eachQueue(t *testing.T, body func(t *testing.T, q queueKind)) {
	for _, q := range []queueKind{onKafka, onNATS} {
		t.Run(string(q), func(t *testing.T) {
			t.Parallel()
			body(t, q)
		})
	}
}

func newCluster(t *testing.T, redis *testutil.Redis, q queueKind) *cluster {
	t.Helper()
	c := &cluster{t: t, redis: redis, boats: map[string]string{}}
	c.etcd = testutil.StartEtcd(t)
	queueArgs := []string{"--kafka-brokers"}
	if q == onNATS {
		c.nats = testutil.StartNATSProcess(t)
		queueArgs = []string{"--queue", "nats", "--nats-url", c.nats.URL}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("--- output of nats-server:\n%s", c.nats.Output())
			}
		})
	} else {
		c.kafka = testutil.StartKafka(t, 8, "gomsg.tasks")
		queueArgs = append(queueArgs, c.kafka)
	}
	c.common = append(queueArgs, "--redis-addrs", redis.Addr, "--etcd-endpoints", c.etcd,
		"--task-partitions", "8", "--platforms", platforms, "--log-format", "console", "--log-level", "warn",
		"--ops-addr", "", "--internal-token", internalToken)
	c.stationInternal = addr(t)
	c.push = addr(t)
	return c
}

func addr(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t)) }

func (c *cluster) start(name string, args ...string) *proc {
	c.t.Helper()
	p := &proc{name: name, args: append(append([]string{}, c.common...), args...)}
	c.run(p)
	c.procs = append(c.procs, p)
	c.t.Cleanup(func() { p.kill(c.t) })
	return p
}

func (c *cluster) run(p *proc) {
	c.t.Helper()
	svc := strings.SplitN(p.name, "-", 2)[0]
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out = &bytes.Buffer{}
	p.cmd = exec.Command(gomsgBin, append([]string{svc}, p.args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", p.name, err)
	}
}

// kill sends SIGKILL and waits.
func (p *proc) kill(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	if t.Failed() {
		t.Logf("--- output of %s:\n%s", p.name, p.out.String())
	}
	p.cmd = nil
}

// restart starts a killed process again with the same arguments.
func (c *cluster) restart(p *proc) { c.run(p) }

func (c *cluster) startStation() {
	c.start("station", "--station-internal-addr", c.stationInternal, "--push-grpc-addr", c.push,
		"--push-http-addr", "", "--jwt-secret", secret, "--api-keys", apikey.Line(apiKey, []apikey.Scope{apikey.Push}, "chaos"))
}

func (c *cluster) startCarrier() *proc {
	return c.start("carrier", "--ack-wait", "2s", "--call-timeout", "2s", "--workers", "64")
}

func (c *cluster) startBoat(id string) *proc {
	client := addr(c.t)
	c.boatsMu.Lock()
	c.boats[id] = client
	c.boatsMu.Unlock()
	return c.start("boat-"+id, "--boat-id", id, "--client-addr", client, "--ws-addr", addr(c.t), "--boat-internal-addr", addr(c.t),
		"--station-addr", c.stationInternal, "--lease-ttl", "2s", "--shutdown-grace", "2s",
		"--connect-rate", "100000", "--connect-rate-per-ip", "100000", "--max-connections-per-ip", "100000")
}

// waitUp waits until the push API answers and every boat is registered.
func (c *cluster) waitUp(ctx context.Context) {
	c.t.Helper()
	cli := testutil.EtcdClient(c.t, c.etcd)
	c.boatsMu.Lock()
	var ids []string
	for id := range c.boats {
		ids = append(ids, id)
	}
	c.boatsMu.Unlock()
	testutil.WaitFor(c.t, 60*time.Second, func() error {
		for _, id := range ids {
			r, err := cli.Get(ctx, "/gomsg/boats/"+id)
			if err != nil || len(r.Kvs) == 0 {
				return fmt.Errorf("boat %s not registered: %v", id, err)
			}
		}
		return nil
	})
}

// dropBoat takes a boat out of the list phones connect to.
func (c *cluster) dropBoat(id string) {
	c.boatsMu.Lock()
	defer c.boatsMu.Unlock()
	delete(c.boats, id)
}
