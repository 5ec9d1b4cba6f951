package testutil

import (
	"context"
	"testing"
)

func TestSharedRedisGivesEachTestItsOwnDatabase(t *testing.T) {
	a, b := SharedRedis(t), SharedRedis(t)
	ctx := context.Background()
	if err := a.Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("second client sees the first's key: exists=%d err=%v", n, err)
	}
	if a.Options().Addr != b.Options().Addr {
		t.Fatalf("two servers started: %s and %s", a.Options().Addr, b.Options().Addr)
	}
}
