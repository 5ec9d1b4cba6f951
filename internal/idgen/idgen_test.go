package idgen

import (
	"context"
	"errors"
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
		id := mustNext(t, g)
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
				id, err := g.Next()
				if err != nil {
					t.Error(err)
					return
				}
				local = append(local, id)
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
	a := mustNext(t, g)
	now = now.Add(-time.Second)
	b := mustNext(t, g)
	if b <= a {
		t.Fatalf("id after clock step back %d <= %d", b, a)
	}
}

func TestTimeRoundTrip(t *testing.T) {
	t.Parallel()
	g, _ := New(MaxNode)
	before := time.Now().Truncate(time.Millisecond)
	id := mustNext(t, g)
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

func mustNext(t *testing.T, g *Generator) int64 {
	t.Helper()
	id, err := g.Next()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestFencedGeneratorStopsAtDeadline: with an injected clock, Next works up
// to the last instant before the claim's deadline, fails from the deadline
// on, works again after Extend, and fails at once after Fence until Hold.
func TestFencedGeneratorStopsAtDeadline(t *testing.T) {
	t.Parallel()
	g := NewFenced()
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	now := start
	g.now = func() time.Time { return now }
	if _, err := g.Next(); !errors.Is(err, ErrFenced) {
		t.Fatalf("Next before any claim: %v, want ErrFenced", err)
	}
	deadline := start.Add(5 * time.Second)
	claim, err := g.Hold(9, deadline)
	if err != nil {
		t.Fatal(err)
	}
	now = deadline.Add(-time.Nanosecond)
	id := mustNext(t, g)
	if node := id >> counterBits & MaxNode; node != 9 {
		t.Fatalf("id's node %d, want 9", node)
	}
	now = deadline
	if _, err := g.Next(); !errors.Is(err, ErrFenced) {
		t.Fatalf("Next at the deadline: %v, want ErrFenced", err)
	}
	// A deadline inside a millisecond: fenced from that instant, although
	// the millisecond began before it.
	claimMid, _ := g.Hold(9, deadline.Add(500*time.Microsecond))
	now = deadline.Add(500 * time.Microsecond)
	if _, err := g.Next(); !errors.Is(err, ErrFenced) {
		t.Fatalf("Next at a deadline inside a millisecond: %v, want ErrFenced", err)
	}
	g.Fence(claimMid)
	claim, _ = g.Hold(9, deadline)
	now = deadline
	// A renewal moves the deadline; a stale (earlier) one does not.
	g.Extend(claim, deadline.Add(5*time.Second))
	g.Extend(claim, deadline.Add(time.Second))
	now = deadline.Add(5*time.Second - time.Millisecond)
	id2 := mustNext(t, g)
	if id2 <= id {
		t.Fatalf("id %d after renewal not above %d", id2, id)
	}
	// Fence ends the claim at once; an old claim's renewal does not revive it.
	g.Fence(claim)
	if _, err := g.Next(); !errors.Is(err, ErrFenced) {
		t.Fatalf("Next after Fence: %v, want ErrFenced", err)
	}
	claim2, _ := g.Hold(4, now.Add(time.Minute))
	g.Fence(claim)
	g.Extend(claim, now.Add(time.Hour))
	id3 := mustNext(t, g)
	if node := id3 >> counterBits & MaxNode; node != 4 || id3 <= id2 {
		t.Fatalf("id %d after new claim: node %d, want 4 and above %d", id3, node, id2)
	}
	now = now.Add(time.Minute)
	if _, err := g.Next(); !errors.Is(err, ErrFenced) {
		t.Fatalf("Next past the new claim's deadline (old claim extended): %v, want ErrFenced", err)
	}
	g.Fence(claim2)
	g.Extend(claim2, now.Add(time.Hour))
	if _, err := g.Next(); err != nil {
		t.Fatalf("Extend after Fence of the held claim (keepalive answered): %v", err)
	}
}

// TestFencedIDTimeBeforeDeadline: an id whose millisecond would start at or
// after the deadline (the clock stepped back after ids ran ahead) is refused,
// so every id carries a time before its claim's deadline.
func TestFencedIDTimeBeforeDeadline(t *testing.T) {
	t.Parallel()
	g := NewFenced()
	deadline := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	now := deadline.Add(-time.Millisecond)
	g.now = func() time.Time { return now }
	if _, err := g.Hold(1, deadline); err != nil {
		t.Fatal(err)
	}
	// 4096 ids fill the last millisecond; the next would borrow the deadline's.
	for i := 0; i <= maxCounter; i++ {
		if Time(mustNext(t, g)) != now {
			t.Fatalf("id %d not in the last millisecond", i)
		}
	}
	if _, err := g.Next(); !errors.Is(err, ErrFenced) {
		t.Fatalf("id borrowing the deadline's millisecond: %v, want ErrFenced", err)
	}
}
