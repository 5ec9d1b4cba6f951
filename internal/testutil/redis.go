// Package testutil starts the real backends gomsg's tests talk to: a
// redis-server child process, an embedded etcd and an in-process
// Kafka-protocol broker, each on free loopback ports and stopped by t.Cleanup.
package testutil

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
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

	mu  sync.Mutex
	cmd *exec.Cmd
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

func startRedis(tb testing.TB, aof bool) *Redis {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redis-server not found on PATH (run scripts/test.sh, which installs it): %v", err)
	}
	r := &Redis{port: FreePort(tb), dir: tb.TempDir(), aof: aof}
	r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
	if err := r.Restart(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Stop)
	return r
}

// Restart starts the (stopped) server on its address, with its data when it
// is persistent, and waits until it answers.
func (r *Redis) Restart() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	aof := "no"
	if r.aof {
		aof = "yes"
	}
	r.cmd = exec.Command("redis-server",
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", aof, "--appendfsync", "always", "--daemonize", "no",
		"--dir", r.dir, "--loglevel", "warning")
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not answering: %w", r.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL).
func (r *Redis) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// Client returns a client for the server, closed by t.Cleanup.
func (r *Redis) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
