package testutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSProcess is a nats-server child process with JetStream, its file store
// in a temporary directory of its own, on a free loopback port: a server a
// test can kill with SIGKILL and start again, on the same port and store,
// from outside gomsg's processes.
type NATSProcess struct {
	URL  string
	bin  string
	port int
	dir  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	out    *SyncBuffer
}

// StartNATSProcess starts Debian's nats-server (the nats-server package;
// scripts/test.sh installs it as root). The test fails when it is missing.
func StartNATSProcess(tb testing.TB) *NATSProcess {
	tb.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		bin, err = exec.LookPath("/usr/sbin/nats-server") // Debian's place, not on a user's PATH
	}
	if err != nil {
		tb.Fatalf("nats-server not found (install Debian's nats-server package; scripts/test.sh does as root): %v", err)
	}
	n := &NATSProcess{bin: bin, dir: tb.TempDir()}
	tb.Cleanup(n.Kill)
	for attempt := 1; ; attempt++ {
		n.port = FreePort(tb)
		n.URL = "nats://127.0.0.1:" + strconv.Itoa(n.port)
		err := n.Restart()
		if err == nil {
			return n
		}
		if attempt == 5 {
			tb.Fatal(err)
		}
	}
}

// Restart starts the server (again, after Kill) with the same port and
// store, and waits until it accepts connections.
func (n *NATSProcess) Restart() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	n.out = &SyncBuffer{}
	cmd := exec.Command(n.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(n.port), "-js", "-sd", n.dir)
	cmd.Stdout, cmd.Stderr = n.out, n.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)), time.Second)
		if err == nil {
			_ = c.Close()
			n.cmd, n.exited = cmd, exited
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("nats-server on port %d exited: %s", n.port, n.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("nats-server on port %d did not listen within 15s: %s", n.port, n.out.String())
		}
	}
}

// Kill stops the server with SIGKILL and waits until it is gone; calling it
// again does nothing.
func (n *NATSProcess) Kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	n.cmd = nil
}

// Output is what the server printed since its last start.
func (n *NATSProcess) Output() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.out == nil {
		return ""
	}
	return n.out.String()
}

// SyncBuffer is a bytes.Buffer that several goroutines (a child process's
// output, a test reading it) may use at once.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// NATSStreamRecords calls fn with every record of stream on the server at
// url, in stream order; a stream not created yet holds none.
func NATSStreamRecords(ctx context.Context, url, stream string, fn func(*jetstream.RawStreamMsg)) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		fn(m)
	}
	return nil
}
