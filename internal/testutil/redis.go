// Package testutil starts the real backends gomsg's tests talk to: a
// redis-server child process, an embedded etcd and an in-process
// Kafka-protocol broker, each on free loopback ports and stopped by t.Cleanup.
package testutil

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server process owned by a test.
type Redis struct {
	Addr string
	port int
	dir  string
	aof  bool
	// extra are more redis-server arguments (cluster mode).
	extra []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartRedis starts redis-server on a free loopback port with persistence off.
// The test fails when redis-server is not installed (scripts/test.sh installs it).
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	return startRedis(tb, false)
}

// StartRedisPersistent starts redis-server with an append-only file synced
// on every write, so a server killed and restarted keeps its data.
func StartRedisPersistent(tb testing.TB) *Redis {
	tb.Helper()
	return startRedis(tb, true)
}

func startRedis(tb testing.TB, aof bool, extra ...string) *Redis {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redis-server not found on PATH (run scripts/test.sh, which installs it): %v", err)
	}
	r := &Redis{dir: tb.TempDir(), aof: aof, extra: extra}
	if err := r.startOnFreePort(tb); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Stop)
	return r
}

// startOnFreePort starts the server on a port FreePort gives. That port can
// be taken by another test binary before redis-server binds it; the server
// then exits, and a new port is tried.
func (r *Redis) startOnFreePort(tb testing.TB) error {
	for attempt := 1; ; attempt++ {
		r.port = FreePort(tb)
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
		err := r.Restart()
		if err == nil || !errors.Is(err, errExited) || attempt == 5 {
			return err
		}
	}
}

// errExited is Restart's error when redis-server exited before answering
// (its port was taken, say).
var errExited = errors.New("redis-server exited")

// Restart starts the (stopped) server on its address, with its data when it
// is persistent, and waits until it answers.
func (r *Redis) Restart() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	aof := "no"
	if r.aof {
		aof = "yes"
	}
	args := append([]string{
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", aof, "--appendfsync", "always", "--daemonize", "no",
		"--dir", r.dir, "--loglevel", "warning"}, r.extra...)
	r.cmd = exec.Command("redis-server", args...)
	dieWithParent(r.cmd)
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	cmd, done := r.cmd, make(chan struct{})
	r.done = done
	go func() { _ = cmd.Wait(); close(done) }()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			r.cmd = nil
			return fmt.Errorf("%w on %s", errExited, r.Addr)
		default:
		}
		// The answer must come from this process, not from another test's
		// server that holds the port this one failed to bind.
		info, err := c.Info(context.Background(), "server").Result()
		if err == nil {
			if strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
				return nil
			}
			err = fmt.Errorf("another process answers on %s", r.Addr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not answering: %w", r.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Running reports whether the server process was started and not stopped.
func (r *Redis) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd != nil
}

// Stop kills the server (SIGKILL).
func (r *Redis) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		<-r.done
		r.cmd = nil
	}
}

// Client returns a client for the server, closed by t.Cleanup.
func (r *Redis) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// FreePort returns a loopback TCP port that is free now, for a server a
// test starts later (often in a child process). It is chosen at random
// below the kernel's ephemeral range: a port from that range (what
// listening on port 0 gives) can be taken, between this call and the
// server's bind, as the local port of any outgoing connection — the
// parallel tests make thousands — and `gomsg dev` failed with "address
// already in use" that way.
func FreePort(tb testing.TB) int {
	tb.Helper()
	low := ephemeralLow()
	for range 200 {
		port := minFreePort + rand.IntN(low-minFreePort)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken
		}
		_ = l.Close()
		return port
	}
	tb.Fatalf("free port: none of 200 random ports in [%d, %d) could be bound", minFreePort, low)
	return 0
}

// minFreePort is the lowest port FreePort picks: above the ports services
// commonly use (Redis 6379, NATS 4222, …).
const minFreePort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range; 32768, its default, where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= minFreePort+1000 {
		return 32768
	}
	return low
}

// WaitFor polls cond until it returns nil or the deadline passes, then fails
// the test with cond's last error.
func WaitFor(tb testing.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Errorf is shorthand for building WaitFor conditions.
func Errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// Collect receives n values from ch within timeout and returns them by
// key; it fails the test when they do not all come in time.
func Collect[T any, K comparable](tb testing.TB, ch <-chan T, n int, timeout time.Duration, key func(T) K) map[K]T {
	tb.Helper()
	got := make(map[K]T, n)
	deadline := time.After(timeout)
	for range n {
		select {
		case v := <-ch:
			got[key(v)] = v
		case <-deadline:
			tb.Fatalf("%d of %d results came within %s", len(got), n, timeout)
		}
	}
	return got
}

// sharedRedisDatabases is how many databases the shared server has: one per
// SharedRedis call in a test binary.
const sharedRedisDatabases = 10000

var shared struct {
	once sync.Once
	addr string
	err  error
	next atomic.Int32
}

// SharedRedis returns a client on a database of its own in one redis-server
// that all of a test binary's tests share. Starting a server per test is
// most of a Redis-backed package's test time, which mutation testing runs
// hundreds of times; a database per test keeps the tests' keys apart (Lua
// scripts are cached per server, which is harmless: a script is the same
// for every test) at a fraction of the cost. The server
// lives until the test binary exits (and dies with it). Tests that stop,
// restart or reconfigure their server use StartRedis.
func SharedRedis(tb testing.TB) *redis.Client {
	tb.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "gomsg-shared-redis-")
		if err != nil {
			shared.err = err
			return
		}
		r := &Redis{dir: dir, extra: []string{"--databases", strconv.Itoa(sharedRedisDatabases)}}
		shared.err = r.startOnFreePort(tb)
		shared.addr = r.Addr
	})
	if shared.err != nil {
		tb.Fatalf("shared redis-server: %v", shared.err)
	}
	db := int(shared.next.Add(1))
	if db >= sharedRedisDatabases {
		tb.Fatalf("shared redis-server: all %d databases used", sharedRedisDatabases)
	}
	c := redis.NewClient(&redis.Options{Addr: shared.addr, DB: db})
	tb.Cleanup(func() {
		_ = c.FlushDB(context.Background()).Err()
		_ = c.Close()
	})
	return c
}
