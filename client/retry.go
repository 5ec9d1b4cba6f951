package client

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// The SDK is a module of its own, which links nothing of the server's: the
// few lines of backoff it needs are here.

// connectParams is how often the gRPC connection tries to reach a boat it
// lost: from 0.2 s, growing to at most 1 s (grpc-go's default grows to
// 120 s, which would leave a device offline for up to two minutes after its
// boat came back). The session's own reconnects follow WithBackoff.
var connectParams = grpc.ConnectParams{
	Backoff:           grpcbackoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 20 * time.Second,
}

// backoffWait is the wait before attempt n (1, 2, …): min doubled n-1
// times, at most max, jittered down to [d/2, d) so that clients cut off
// together do not come back together.
func backoffWait(min, max time.Duration, n int) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = time.Duration(float64(d) * (0.5 + rand.Float64()*0.5))
	if d <= 0 {
		return min
	}
	return d
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
