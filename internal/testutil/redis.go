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
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server process owned by a test.
type Redis struct {
	Addr string
	cmd  *exec.Cmd
	port int
}

// StartRedis starts redis-server on a free loopback port with persistence off.
// The test fails when redis-server is not installed (scripts/test.sh installs it).
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not found on PATH (run scripts/test.sh, which installs it): %v", err)
	}
	r := &Redis{port: FreePort(tb)}
	r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
	r.start(tb, path)
	tb.Cleanup(r.Stop)
	return r
}

func (r *Redis) start(tb testing.TB, path string) {
	tb.Helper()
	r.cmd = exec.Command(path,
		"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", tb.TempDir(), "--loglevel", "warning")
	if err := r.cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer c.Close()
	WaitFor(tb, 10*time.Second, func() error {
		return c.Ping(context.Background()).Err()
	})
}

// Stop kills the server; Restart brings it back on the same port, empty.
func (r *Redis) Stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// Restart starts a stopped server again on the same address.
func (r *Redis) Restart(tb testing.TB) {
	tb.Helper()
	path, _ := exec.LookPath("redis-server")
	r.start(tb, path)
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
