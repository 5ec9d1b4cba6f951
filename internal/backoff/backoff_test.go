package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestExp(t *testing.T) {
	t.Parallel()
	p := Policy{Min: time.Second, Max: 30 * time.Second}
	want := []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 30 * time.Second, 30 * time.Second}
	for n, w := range want {
		if got := p.Exp(n); got != w {
			t.Errorf("Exp(%d) = %s, want %s", n, got, w)
		}
	}
}

func TestJitterStaysInRange(t *testing.T) {
	t.Parallel()
	for range 1000 {
		if d := Jitter(time.Second, 0.8, 1.2); d < 800*time.Millisecond || d >= 1200*time.Millisecond {
			t.Fatalf("Jitter = %s, outside [0.8s, 1.2s)", d)
		}
	}
}

func TestRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := Policy{Min: time.Millisecond, Max: 2 * time.Millisecond}
	calls, heard := 0, 0
	err := Retry(ctx, p, func() error {
		calls++
		if calls < 4 {
			return errors.New("not yet")
		}
		return nil
	}, func(error, time.Duration) { heard++ })
	if err != nil || calls != 4 || heard != 3 {
		t.Fatalf("Retry = %v after %d calls, %d failures heard; want nil after 4 and 3", err, calls, heard)
	}

	boom := errors.New("boom")
	calls = 0
	err = Retry(ctx, p, func() error { calls++; return Permanent(boom) }, nil)
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("permanent: %v after %d calls, want boom after 1", err, calls)
	}

	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err = Retry(cctx, p, func() error { return boom }, nil)
	if !errors.Is(err, boom) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx end: %v, want boom and DeadlineExceeded", err)
	}
}

func TestSleepStopsWithContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep on a cancelled context reported true")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep reported false without cancellation")
	}
}
