// Package backoff holds gomsg's one retry timing: capped doubling waits with
// jitter, a context-aware sleep, and a loop that retries a call until it
// works. Carrier and horn time their retry topics with it, the queue its
// fetch and handler retries, boat and discovery their calls to station and
// etcd.
package backoff

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Policy is a capped doubling backoff: Min before the first retry, doubled
// for each one after, never more than Max.
type Policy struct {
	Min, Max time.Duration
}

// Default is the policy of calls retried until they work.
var Default = Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// Exp is the wait before retry n (1-based): Min·2^(n-1), capped at Max.
func (p Policy) Exp(n int) time.Duration {
	d := p.Min
	for i := 1; i < n && d < p.Max; i++ {
		d *= 2
	}
	return min(d, p.Max)
}

// Jitter scales d by a random factor in [lo, hi).
func Jitter(d time.Duration, lo, hi float64) time.Duration {
	return time.Duration(float64(d) * (lo + rand.Float64()*(hi-lo)))
}

// Sleep waits d and reports false when ctx ended first.
func Sleep(ctx context.Context, d time.Duration) bool {
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

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks an error that Retry returns at once instead of retrying.
func Permanent(err error) error { return permanent{err} }

// Retry calls f until it returns nil, waiting p's backoff (jittered to
// [½, 1]) after each failure, which onErr (may be nil) hears of first. It
// returns the error inside a Permanent one at once, and the last error with
// ctx's when ctx ends.
func Retry(ctx context.Context, p Policy, f func() error, onErr func(err error, wait time.Duration)) error {
	for n := 1; ; n++ {
		err := f()
		if err == nil {
			return nil
		}
		var perm permanent
		if errors.As(err, &perm) {
			return perm.err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		}
		wait := Jitter(p.Exp(n), 0.5, 1)
		if onErr != nil {
			onErr(err, wait)
		}
		if !Sleep(ctx, wait) {
			return fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		}
	}
}
