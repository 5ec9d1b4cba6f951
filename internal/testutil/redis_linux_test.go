package testutil

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRedisDiesWithTheTestBinary runs a test binary that starts a
// redis-server, kills the binary with SIGKILL (as `go test -timeout` and
// mutation runs do) and expects the server to go with it.
func TestRedisDiesWithTheTestBinary(t *testing.T) {
	if os.Getenv("GOMSG_TESTUTIL_CHILD") == "1" {
		r := StartRedis(t)
		info, err := r.Client(t).Info(context.Background(), "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if pid, ok := strings.CutPrefix(l, "process_id:"); ok {
				fmt.Println("redis-pid", pid)
			}
		}
		time.Sleep(time.Minute) // killed by the parent long before
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedisDiesWithTheTestBinary$", "-test.v")
	cmd.Env = append(os.Environ(), "GOMSG_TESTUTIL_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := 0
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if p, ok := strings.CutPrefix(sc.Text(), "redis-pid "); ok {
			pid, _ = strconv.Atoi(p)
			break
		}
	}
	if pid == 0 {
		t.Fatal("the child printed no redis-server pid")
	}
	defer func() { _ = syscall.Kill(pid, syscall.SIGKILL) }()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	WaitFor(t, 10*time.Second, func() error {
		// Signal 0 reports whether the process is still there.
		if err := syscall.Kill(pid, 0); err == nil {
			return fmt.Errorf("redis-server %d still running after its test binary was killed", pid)
		}
		return nil
	})
}
