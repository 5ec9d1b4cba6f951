package idempotency

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
)

// A reservation settles only while it is the caller's: once it lapsed and
// another call reserved the key, Complete and Release leave the other's
// reservation alone. On a standalone server and on a cluster.
func TestSettleOnlyOwnReservation(t *testing.T) {
	t.Parallel()
	testutil.EachRedis(t, testSettleOnlyOwnReservation)
}

func testSettleOnlyOwnReservation(t *testing.T, rdb redis.UniversalClient) {
	key := rkeys.Of(rdb).Idempotency("k")
	s := New(rdb)
	ctx := context.Background()
	first, err := s.Reserve(ctx, "k", "fp", time.Minute)
	if err != nil || first.State != Reserved {
		t.Fatalf("first reserve: %+v %v", first, err)
	}
	// The first reservation lapses; a retry takes the key.
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	second, err := s.Reserve(ctx, "k", "fp", time.Minute)
	if err != nil || second.State != Reserved {
		t.Fatalf("second reserve: %+v %v", second, err)
	}
	if ok, err := s.Complete(ctx, first, []int64{1}, time.Hour); err != nil || ok {
		t.Fatalf("Complete of a lapsed reservation: %v %v, want false", ok, err)
	}
	if err := s.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Reserve(ctx, "k", "fp", time.Minute); err != nil || r.State != InFlight {
		t.Fatalf("after the lapsed one settled: %+v %v, want the second still in flight", r, err)
	}
	if ok, err := s.Complete(ctx, second, []int64{7, 8}, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v %v", ok, err)
	}
	r, err := s.Reserve(ctx, "k", "fp", time.Minute)
	if err != nil || r.State != Done || !slices.Equal(r.Seqs, []int64{7, 8}) {
		t.Fatalf("after Complete: %+v %v, want Done [7 8]", r, err)
	}
	if r, err := s.Reserve(ctx, "k", "other", time.Minute); err != nil || r.State != Conflict {
		t.Fatalf("other fingerprint: %+v %v, want Conflict", r, err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= time.Minute || ttl > time.Hour {
		t.Fatalf("TTL %v, want the window (1h)", ttl)
	}
}
