package receipt_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/testutil"
)

// Tracked answers per uid and platform which of the seqs asked are
// tracked, in the order asked; forgets what it is told to; and its set
// lives twice the expiry it was last written with.
func TestTrackedAddFilterForget(t *testing.T) {
	t.Parallel()
	rdb := testutil.SharedRedis(t)
	tr := receipt.NewTracked(rdb)
	ctx := context.Background()
	if err := tr.Add(ctx, "ann", "ios", time.Hour); err != nil { // nothing to add
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, "msg/u:ann/p:ios/rcp").Result(); err != nil || n != 0 {
		t.Fatalf("adding nothing made the set: %d, %v", n, err)
	}
	now := time.Now().UnixMilli()
	if err := tr.Add(ctx, "ann", "ios", time.Hour, receipt.TrackedMsg{Seq: 5, SentAt: now}, receipt.TrackedMsg{Seq: 2, SentAt: now - 1}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Add(ctx, "ann", "web", time.Minute, receipt.TrackedMsg{Seq: 9, SentAt: now}); err != nil {
		t.Fatal(err)
	}
	filter := func(pl string, seqs ...int64) []int64 {
		t.Helper()
		got, err := tr.Filter(ctx, "ann", pl, seqs)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := filter("ios", 9, 5, 1, 2); !slices.Equal(got, []int64{5, 2}) {
		t.Fatalf("tracked of [9 5 1 2] on ios: %v, want [5 2]", got)
	}
	if got := filter("web", 5, 9); !slices.Equal(got, []int64{9}) {
		t.Fatalf("tracked of [5 9] on web: %v, want [9]", got)
	}
	if got := filter("ios"); got != nil {
		t.Fatalf("tracked of nothing: %v", got)
	}
	if got, err := tr.Filter(ctx, "bob", "ios", []int64{5}); err != nil || got != nil {
		t.Fatalf("another uid: %v, %v; want none", got, err)
	}
	ttl, err := rdb.PTTL(ctx, "msg/u:ann/p:web/rcp").Result()
	if err != nil || ttl <= time.Minute || ttl > 2*time.Minute {
		t.Fatalf("web set lives %s (%v), want within twice the minute of expiry", ttl, err)
	}
	if err := tr.Forget(ctx, "ann", "ios", []int64{5, 7}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Forget(ctx, "ann", "ios", nil); err != nil {
		t.Fatal(err)
	}
	if got := filter("ios", 5, 2); !slices.Equal(got, []int64{2}) {
		t.Fatalf("after forgetting 5: %v, want [2]", got)
	}
}

// A Redis that does not answer is an error of every call, naming it.
func TestTrackedRedisDown(t *testing.T) {
	t.Parallel()
	tr := receipt.NewTracked(downRedis(t))
	ctx := context.Background()
	errs := []error{
		tr.Add(ctx, "ann", "ios", time.Hour, receipt.TrackedMsg{Seq: 1}),
		tr.Forget(ctx, "ann", "ios", []int64{1}),
	}
	_, ferr := tr.Filter(ctx, "ann", "ios", []int64{1})
	for i, err := range append(errs, ferr) {
		if err == nil || errors.Is(err, context.Canceled) {
			t.Errorf("call %d with Redis down: %v, want an error", i, err)
		}
	}
}
