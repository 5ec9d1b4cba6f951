package discovery

import (
	"context"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zaptest"
)

// TestJoinEndsWithItsContext: with an etcd that accepts connections and
// never answers, Join returns once its context ends (a SIGTERM during
// start-up) instead of waiting for the lease forever.
func TestJoinEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ln.Addr().String()}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Join(ctx, cli, zaptest.NewLogger(t), "/t", "station", "", "", 5*time.Second)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Join succeeded against an etcd that never answers")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Join still waiting 10s after its context ended")
	}
}
