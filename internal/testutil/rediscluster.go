package testutil

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
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
// (cluster_state:ok) and every replica is in sync. The test fails when
// redis-server or redis-cli is missing (scripts/test.sh installs them).
// One or two masters are joined by hand (join), as redis-cli needs three.
func StartRedisCluster(tb testing.TB, masters, replicas int) *RedisCluster {
	tb.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		tb.Fatalf("redis-cli not found on PATH (run scripts/test.sh, which installs it): %v", err)
	}
	c := &RedisCluster{}
	n := masters * (1 + replicas)
	for range n {
		// The cluster bus listens on a port of its own, by default the
		// client port + 10000: in the kernel's ephemeral range, where an
		// outgoing connection may hold it, or another server's port, so a
		// node failed to start now and then. FreePort picks it as it picks
		// the client port.
		c.Nodes = append(c.Nodes, startRedis(tb, false,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(FreePort(tb)),
			"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10)))
	}
	if masters < 3 {
		c.join(tb, masters, replicas)
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

// join makes a cluster of fewer than 3 masters, which `redis-cli --cluster
// create` refuses to: each master takes an equal share of the slots, every
// node meets the first, and the replicas of master i (the nodes after the
// masters, replicas at a time) replicate it once they know it.
func (c *RedisCluster) join(tb testing.TB, masters, replicas int) {
	tb.Helper()
	ctx := context.Background()
	do := func(r *Redis, args ...any) {
		tb.Helper()
		cl := redis.NewClient(&redis.Options{Addr: r.Addr})
		defer cl.Close()
		if err := cl.Do(ctx, args...).Err(); err != nil {
			tb.Fatalf("%s: %v: %v", r.Addr, args, err)
		}
	}
	const slots = 16384
	for i, m := range c.Nodes[:masters] {
		do(m, "CLUSTER", "ADDSLOTSRANGE", i*slots/masters, (i+1)*slots/masters-1)
	}
	host, port, _ := strings.Cut(c.Nodes[0].Addr, ":")
	first := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr})
	bus, err := first.ConfigGet(ctx, "cluster-port").Result()
	_ = first.Close()
	if err != nil {
		tb.Fatalf("%s: config get cluster-port: %v", c.Nodes[0].Addr, err)
	}
	for _, r := range c.Nodes[1:] {
		do(r, "CLUSTER", "MEET", host, port, bus["cluster-port"])
	}
	for i, m := range c.Nodes[:masters] {
		id := c.NodeID(tb, m)
		for _, r := range c.Nodes[masters+i*replicas : masters+(i+1)*replicas] {
			// A node can replicate only a master it knows, which it learns
			// from the gossip the MEETs started.
			WaitFor(tb, 30*time.Second, func() error {
				cl := redis.NewClient(&redis.Options{Addr: r.Addr})
				defer cl.Close()
				return cl.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			})
		}
	}
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

// EachLayout runs run side by side on the two Redis layouts gomsg supports:
// "standalone", a database of the test binary's shared redis-server (whose
// start is paid once), and "cluster", a 3-master Redis Cluster. flush
// empties the layout's data between a test's cases.
func EachLayout(t *testing.T, run func(t *testing.T, rdb redis.UniversalClient, flush func(t *testing.T))) {
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		rdb := SharedRedis(t)
		run(t, rdb, func(t *testing.T) {
			if err := rdb.FlushDB(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		rdb := StartRedisCluster(t, 3, 0).Client(t)
		run(t, rdb, func(t *testing.T) { FlushAll(t, rdb) })
	})
}

// UsedMemory returns INFO memory's used_memory of the server, or its sum
// over a cluster's masters: what a benchmark's writes cost in Redis memory
// is the growth of it.
func UsedMemory(tb testing.TB, rdb redis.UniversalClient) int64 {
	tb.Helper()
	var mu sync.Mutex
	var total int64
	read := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return fmt.Errorf("used_memory %q: %w", v, err)
				}
				mu.Lock()
				total += n
				mu.Unlock()
				return nil
			}
		}
		return fmt.Errorf("%s: no used_memory in INFO memory", c.Options().Addr)
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(context.Background(), read)
	} else {
		err = read(context.Background(), rdb.(*redis.Client))
	}
	if err != nil {
		tb.Fatal(err)
	}
	return total
}
