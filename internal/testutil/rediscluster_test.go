package testutil

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Clusters of fewer than 3 masters, which redis-cli will not create, are
// joined by hand: every slot is served, by the masters asked for, each
// with its replicas, and keys of any slot can be written.
func TestSmallRedisCluster(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ masters, replicas int }{{1, 0}, {2, 1}} {
		t.Run(fmt.Sprintf("%d masters %d replicas", c.masters, c.replicas), func(t *testing.T) {
			t.Parallel()
			cl := StartRedisCluster(t, c.masters, c.replicas)
			rdb := cl.Client(t)
			ctx := context.Background()
			// A replica is in sync when StartRedisCluster returns; the node
			// asked may learn of it by gossip a little later.
			WaitFor(t, 30*time.Second, func() error {
				ranges, err := rdb.ClusterSlots(ctx).Result()
				if err != nil {
					return err
				}
				covered, masters := 0, map[string]bool{}
				for _, r := range ranges {
					covered += r.End - r.Start + 1
					masters[r.Nodes[0].Addr] = true
					if len(r.Nodes) != 1+c.replicas {
						return Errorf("slots %d-%d served by %d nodes, want a master and %d replicas", r.Start, r.End, len(r.Nodes), c.replicas)
					}
				}
				if covered != 16384 || len(masters) != c.masters {
					return Errorf("%d slots served by %d masters, want 16384 by %d", covered, len(masters), c.masters)
				}
				return nil
			})
			for i := range 100 {
				if err := rdb.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
