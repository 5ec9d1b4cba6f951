package idgen

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/testutil"
)

func TestNextIsUniqueAndIncreasing(t *testing.T) {
	t.Parallel()
	g, err := New(7)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000 // more than one millisecond's counter
	prev := int64(0)
	for i := 0; i < n; i++ {
		id := g.Next()
		if id <= prev {
			t.Fatalf("id %d after %d is not increasing", id, prev)
		}
		prev = id
	}
}

func TestNextConcurrentUnique(t *testing.T) {
	t.Parallel()
	g, _ := New(1)
	var mu sync.Mutex
	seen := make(map[int64]bool)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]int64, 0, 5000)
			for i := 0; i < 5000; i++ {
				local = append(local, g.Next())
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				if seen[id] {
					t.Errorf("duplicate id %d", id)
				}
				seen[id] = true
			}
		}()
	}
	wg.Wait()
	if len(seen) != 40000 {
		t.Fatalf("got %d unique ids, want 40000", len(seen))
	}
}

func TestClockStepBack(t *testing.T) {
	t.Parallel()
	g, _ := New(3)
	now := time.Now()
	g.now = func() time.Time { return now }
	a := g.Next()
	now = now.Add(-time.Second)
	b := g.Next()
	if b <= a {
		t.Fatalf("id after clock step back %d <= %d", b, a)
	}
}

func TestTimeRoundTrip(t *testing.T) {
	t.Parallel()
	g, _ := New(MaxNode)
	before := time.Now().Truncate(time.Millisecond)
	id := g.Next()
	got := Time(id)
	if got.Before(before) || got.After(time.Now()) {
		t.Fatalf("Time(id) = %v, want within [%v, now]", got, before)
	}
}

func TestNewRejectsBadNode(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, MaxNode + 1} {
		if _, err := New(n); err == nil {
			t.Errorf("New(%d) succeeded", n)
		}
	}
}

func TestClaimGivesDistinctNodes(t *testing.T) {
	t.Parallel()
	cli := testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	lease1, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	lease2, _ := cli.Grant(ctx, 30)
	a, err := Claim(ctx, cli, "/gomsg", lease1.ID, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Claim(ctx, cli, "/gomsg", lease2.ID, "b")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("two claims got the same node %d", a)
	}
	// Revoking a's lease frees its id for the next claimant.
	if _, err := cli.Revoke(ctx, lease1.ID); err != nil {
		t.Fatal(err)
	}
	lease3, _ := cli.Grant(ctx, 30)
	c, err := Claim(ctx, cli, "/gomsg", lease3.ID, "c")
	if err != nil {
		t.Fatal(err)
	}
	if c != a {
		t.Fatalf("claim after revoke got %d, want freed node %d", c, a)
	}
}
