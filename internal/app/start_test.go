package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// The error names why the backend was not there, not the timeout that cut
// the last attempt short.
func TestWaitReachableReportsTheCauseNotTheCutAttempt(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	attempts := 0
	probe := func(ctx context.Context) error {
		attempts++
		if attempts == 1 {
			return refused
		}
		<-ctx.Done() // the next attempt is still dialling when the timeout ends
		return errors.New("dial tcp 127.0.0.1:1: i/o timeout")
	}
	err := waitReachable(context.Background(), 200*time.Millisecond, "etcd", "127.0.0.1:1", probe)
	if !errors.Is(err, ErrNotReachable) || !errors.Is(err, refused) {
		t.Fatalf("err %v, want ErrNotReachable wrapping %v", err, refused)
	}
	if attempts != 2 {
		t.Fatalf("%d attempts, want 2", attempts)
	}
}

func TestWaitReachableReportsTheOnlyAttempt(t *testing.T) {
	probe := func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("dial tcp 10.0.0.1:2379: i/o timeout")
	}
	err := waitReachable(context.Background(), 100*time.Millisecond, "etcd", "10.0.0.1:2379", probe)
	if err == nil || !strings.HasSuffix(err.Error(), "(--start-timeout): dial tcp 10.0.0.1:2379: i/o timeout") {
		t.Fatalf("err %v, want the timeout as the cause", err)
	}
}

func TestWaitReachableReturnsOnSuccess(t *testing.T) {
	n := 0
	probe := func(context.Context) error {
		n++
		if n < 3 {
			return errors.New("connection refused")
		}
		return nil
	}
	if err := waitReachable(context.Background(), 5*time.Second, "redis", "x", probe); err != nil || n != 3 {
		t.Fatalf("err %v after %d probes, want nil after 3", err, n)
	}
}
