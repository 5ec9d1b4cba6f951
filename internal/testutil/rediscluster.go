package testutil

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a real Redis Cluster owned by a test: redis-server
// processes started with --cluster-enabled and joined by
// `redis-cli --cluster create`.
type RedisCluster struct {
	// Nodes are the servers, masters first as created (a failover or a
	// reshard changes roles and slots, not this order).
	Nodes []*Redis
}

// ClusterNodeTimeout is the cluster-node-timeout of the test clusters: how
// long a master may be unreachable before its replica is promoted.
const ClusterNodeTimeout = 2 * time.Second

// StartRedisCluster starts masters masters with replicas replicas each, on
// free loopback ports, and returns once every node sees every slot served
// (cluster_state:ok) and every replica is in sync. A cluster of one master
// (no replicas) serves every slot itself: redis-cli --cluster create wants
// three masters at least. The test fails when redis-server or redis-cli is
// missing (scripts/test.sh installs them).
func StartRedisCluster(tb testing.TB, masters, replicas int) *RedisCluster {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		tb.Fatalf("redis-cli not found on PATH (run scripts/test.sh, which installs it): %v", err)
	}
	if masters < 1 || replicas < 0 || masters < 3 && (masters != 1 || replicas != 0) {
		tb.Fatalf("StartRedisCluster(%d masters, %d replicas each): want 3 masters or more, or 1 without replicas",
			masters, replicas)
	}
	c := &RedisCluster{}
	n := masters * (1 + replicas)
	for range n {
		// The cluster bus port is chosen too: by default it is the client
		// port + 10000, which FreePort never checked and which, for a port
		// above 22767, lies in the kernel's ephemeral range, where an
		// outgoing connection may hold it; redis-server then aborts
		// ("Failed listening on port ... (cluster)").
		c.Nodes = append(c.Nodes, startRedis(tb, false,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(FreePort(tb)),
			"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10)))
	}
	if masters == 1 {
		cl := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr})
		err := cl.Do(context.Background(), "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err()
		_ = cl.Close()
		if err != nil {
			tb.Fatalf("%s: cluster addslotsrange 0 16383: %v", c.Nodes[0].Addr, err)
		}
	} else {
		args := append([]string{"--cluster", "create"}, c.Addrs()...)
		args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
		out, err := exec.Command("redis-cli", args...).CombinedOutput()
		if err != nil {
			tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
		}
	}
	WaitFor(tb, 30*time.Second, func() error { return c.Healthy(n) })
	return c
}

// Addrs are the nodes' addresses.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, r := range c.Nodes {
		out[i] = r.Addr
	}
	return out
}

// Client returns a cluster client seeded with every node, closed by
// t.Cleanup.
func (c *RedisCluster) Client(tb testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Healthy returns nil when every running node reports cluster_state:ok,
// knows n nodes and, if a replica, has its link to its master up.
func (c *RedisCluster) Healthy(n int) error {
	ctx := context.Background()
	for _, r := range c.Nodes {
		if !r.Running() {
			continue
		}
		err := func() error {
			cl := redis.NewClient(&redis.Options{Addr: r.Addr})
			defer cl.Close()
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("%s: cluster info: %w", r.Addr, err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster_state not ok", r.Addr)
			}
			if known := infoField(info, "cluster_known_nodes"); known != strconv.Itoa(n) {
				return fmt.Errorf("%s: knows %s nodes, not %d", r.Addr, known, n)
			}
			repl, err := cl.Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Errorf("%s: info replication: %w", r.Addr, err)
			}
			if infoField(repl, "role") == "slave" && infoField(repl, "master_link_status") != "up" {
				return fmt.Errorf("%s: replica link to its master is not up", r.Addr)
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// Master returns the node serving slot now, as the running nodes see it.
func (c *RedisCluster) Master(tb testing.TB, slot int) *Redis {
	tb.Helper()
	ctx := context.Background()
	for _, r := range c.Nodes {
		if !r.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: r.Addr})
		slots, err := cl.ClusterSlots(ctx).Result()
		_ = cl.Close()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if slot >= s.Start && slot <= s.End && len(s.Nodes) > 0 {
				return c.node(tb, s.Nodes[0].Addr)
			}
		}
	}
	tb.Fatalf("no running node serves slot %d", slot)
	return nil
}

// NodeID returns a node's cluster id.
func (c *RedisCluster) NodeID(tb testing.TB, r *Redis) string {
	tb.Helper()
	cl := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer cl.Close()
	id, err := cl.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		tb.Fatalf("%s: cluster myid: %v", r.Addr, err)
	}
	return id
}

func (c *RedisCluster) node(tb testing.TB, addr string) *Redis {
	tb.Helper()
	for _, r := range c.Nodes {
		if r.Addr == addr {
			return r
		}
	}
	tb.Fatalf("%s is not a node of this cluster", addr)
	return nil
}

// KeySlot asks a running node which slot key hashes to.
func (c *RedisCluster) KeySlot(tb testing.TB, key string) int {
	tb.Helper()
	for _, r := range c.Nodes {
		if !r.Running() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: r.Addr})
		slot, err := cl.ClusterKeySlot(context.Background(), key).Result()
		_ = cl.Close()
		if err == nil {
			return int(slot)
		}
	}
	tb.Fatalf("no running node answered CLUSTER KEYSLOT %q", key)
	return 0
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// EachRedis runs f as two subtests on fresh servers: "standalone", a
// redis-server, and "cluster", a Redis Cluster of three masters. Stores
// pick their key layout from the client type (package rkeys), so the same
// test body checks both layouts.
func EachRedis(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Helper()
	t.Run("standalone", func(t *testing.T) { f(t, StartRedis(t).Client(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, StartRedisCluster(t, 3, 0).Client(t)) })
}

// FlushAll empties every master of rdb (each master of a cluster).
func FlushAll(tb testing.TB, rdb redis.UniversalClient) {
	tb.Helper()
	ctx := context.Background()
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.FlushAll(ctx).Err()
		})
	} else {
		err = rdb.FlushAll(ctx).Err()
	}
	if err != nil {
		tb.Fatalf("flushall: %v", err)
	}
}
