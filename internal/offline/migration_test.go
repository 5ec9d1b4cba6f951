package offline_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
)

// TestSlotMigration moves a user's slot to another master the way
// redis-cli --cluster reshard does (SETSLOT IMPORTING / MIGRATING, MIGRATE of
// the keys, SETSLOT NODE), stopping halfway: the user's bodies (all but one)
// are on the target, its lists and counts still on the source. Redis then
// refuses every script and MGET that declares keys on both sides (TRYAGAIN,
// after an ASK) and runs nothing of it. A Delete, a Read and a Write of the
// user wait, retrying, until the migration is finished and then succeed
// whole; one whose context ends first fails having changed nothing. Counts
// match the lists afterwards.
//
// A script that touched a key it did not declare would run on the source,
// reach the moved key midway and stop there with "Script attempted to
// access a non local key", keeping its first changes.
func TestSlotMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := testutil.StartRedisCluster(t, 3, 0)
	rdb := c.Client(t)
	e := newEnv(rdb)
	keys := rkeys.Cluster
	const uid = "mig"
	base := time.Now().UnixMilli() - 60_000
	at := func(p string, max int, seqs ...int64) []offline.Item {
		var items []offline.Item
		for _, s := range seqs {
			items = append(items, item(p, hour, max, s, base+s, "body-"+strconv.FormatInt(s, 10)))
		}
		return items
	}
	mustWrite(t, e, uid, 6, at("ios", 0, 1, 2, 3, 4, 5, 6)...)
	mustWrite(t, e, uid, 4, at("android", 0, 1, 2, 3, 6)...)

	slot := c.KeySlot(t, keys.Offline(uid, "ios"))
	src := c.Master(t, slot)
	var dst *testutil.Redis
	for _, n := range c.Nodes {
		if n != src {
			dst = n
			break
		}
	}
	srcC, dstC := src.Client(t), dst.Client(t)
	srcID, dstID := c.NodeID(t, src), c.NodeID(t, dst)
	do(t, dstC, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	do(t, srcC, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	var moved []string
	for seq := int64(1); seq <= 5; seq++ {
		moved = append(moved, keys.Body(uid, seq))
	}
	migrate(t, srcC, dst, moved)

	tryAgains := func() int {
		n := 0
		for _, cl := range []*redis.Client{srcC, dstC} {
			info, err := cl.Info(ctx, "errorstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			n += errorCount(info, "TRYAGAIN")
		}
		return n
	}
	before := tryAgains()
	type result struct {
		op    string
		err   error
		read  []int64
		early bool // returned while the keys were split
	}
	results := make(chan result, 3)
	go func() {
		// 1 is on android too (count 2 -> 1); 4 only on ios (last reference).
		results <- result{op: "delete", err: e.store.Delete(ctx, uid, "ios", []int64{1, 4})}
	}()
	go func() {
		msgs, err := e.store.Read(ctx, uid, "android", time.Now(), hour, 0)
		results <- result{op: "read", err: err, read: seqsOf(msgs)}
	}()
	go func() {
		// 2 joins a third list, then leaves it again: web keeps 2 at most.
		added, err := e.store.Write(ctx, uid, at("web", 2, 2, 7, 8))
		if err == nil && added != 3 {
			err = fmt.Errorf("added %d, want 3", added)
		}
		results <- result{op: "write", err: err}
	}()

	// Go-redis alone gives up on a TRYAGAIN after MaxRedirects (3) retries;
	// the store keeps retrying. 20 refusals among the calls still waiting
	// show the store waiting out the split. None of them can succeed before
	// the migration is finished.
	var done []result
	testutil.WaitFor(t, 10*time.Second, func() error {
		for {
			select {
			case r := <-results:
				r.early = true
				done = append(done, r)
				continue
			default:
			}
			break
		}
		if len(done) == 3 {
			return nil
		}
		if n := tryAgains() - before; n < 20 {
			return fmt.Errorf("%d TRYAGAIN replies so far", n)
		}
		return nil
	})

	// A call whose context ends while the keys are split fails and changes
	// nothing.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := e.store.Delete(short, uid, "android", []int64{2}) // body 2 moved, list and count not
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Delete during the split with a 300ms deadline: err = %v, want DeadlineExceeded", err)
	}

	finishMigration(t, c, slot, src, dst, srcC, dstID)
	for len(done) < 3 {
		select {
		case r := <-results:
			done = append(done, r)
		case <-time.After(10 * time.Second):
			t.Fatal("a call still waits 10s after the migration finished")
		}
	}
	for _, r := range done {
		if r.early {
			t.Errorf("%s returned while the user's keys were split: %v", r.op, r.err)
		} else if r.err != nil {
			t.Errorf("%s after the migration: %v", r.op, r.err)
		}
		if r.op == "read" && r.err == nil && !slices.Equal(r.read, []int64{1, 2, 3, 6}) {
			t.Errorf("read android = %v, want [1 2 3 6]", r.read)
		}
	}
	if got := c.Master(t, slot); got != dst {
		t.Fatalf("slot %d is served by %s, want %s", slot, got.Addr, dst.Addr)
	}
	wantConsistent(t, e, []string{uid}, []string{"ios", "android", "web"}, []int64{1, 2, 3, 4, 5, 6, 7, 8})
	wantMembers(t, e, keys.Offline(uid, "ios"), "2", "3", "5", "6")
	wantMembers(t, e, keys.Offline(uid, "android"), "1", "2", "3", "6")
	wantMembers(t, e, keys.Offline(uid, "web"), "7", "8")
	wantMissing(t, e, keys.Body(uid, 4), keys.Count(uid, 4))
	wantString(t, e, keys.Count(uid, 1), "1")
	wantString(t, e, keys.Count(uid, 2), "2")
}

func do(t *testing.T, c *redis.Client, args ...any) {
	t.Helper()
	if err := c.Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("%s %v: %v", c.Options().Addr, args, err)
	}
}

// migrate moves keys from the node of src to dst with one MIGRATE.
func migrate(t *testing.T, src *redis.Client, dst *testutil.Redis, keys []string) {
	t.Helper()
	host, port, err := net.SplitHostPort(dst.Addr)
	if err != nil {
		t.Fatal(err)
	}
	args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	do(t, src, args...)
}

// finishMigration moves what is left of slot on src to dst and gives the
// slot to dst on every master, target first, as redis-cli does.
func finishMigration(t *testing.T, c *testutil.RedisCluster, slot int, src, dst *testutil.Redis, srcC *redis.Client, dstID string) {
	t.Helper()
	for {
		left, err := srcC.ClusterGetKeysInSlot(t.Context(), slot, 100).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		migrate(t, srcC, dst, left)
	}
	order := []*testutil.Redis{dst, src}
	for _, n := range c.Nodes {
		if n != dst && n != src {
			order = append(order, n)
		}
	}
	for _, n := range order {
		do(t, n.Client(t), "CLUSTER", "SETSLOT", slot, "NODE", dstID)
	}
}

// errorCount reads errorstat_<name>:count=N from INFO errorstats.
func errorCount(info, name string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+name+":count="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// A migration that stalls with a user's keys split does not hold a call
// for as long as its context lasts: the store gives up tryAgainFor (2s)
// after Redis first refused it, saying so, and has changed nothing.
func TestStalledSlotMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := testutil.StartRedisCluster(t, 3, 0)
	e := newEnv(c.Client(t))
	keys := rkeys.Cluster
	const uid = "stall"
	ts := time.Now().UnixMilli() - 60_000
	mustWrite(t, e, uid, 2, item("ios", hour, 0, 1, ts+1, "b1"), item("ios", hour, 0, 2, ts+2, "b2"))

	slot := c.KeySlot(t, keys.Offline(uid, "ios"))
	src := c.Master(t, slot)
	dst := c.Nodes[0]
	if dst == src {
		dst = c.Nodes[1]
	}
	srcC := src.Client(t)
	do(t, dst.Client(t), "CLUSTER", "SETSLOT", slot, "IMPORTING", c.NodeID(t, src))
	do(t, srcC, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.NodeID(t, dst))
	migrate(t, srcC, dst, []string{keys.Body(uid, 1)})

	// The last attempt starts up to one backoff (100ms) before the 2s are
	// up; the upper bound leaves room for a busy machine, and is still half
	// the context.
	long, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	err := e.store.Delete(long, uid, "ios", []int64{1})
	if took := time.Since(start); !errors.Is(err, offline.ErrTryAgainSpent) || took < 1500*time.Millisecond || took > 10*time.Second {
		t.Fatalf("Delete during a stalled migration: %v after %s; want ErrTryAgainSpent after about 2s", err, took)
	}
	wantMembers(t, e, keys.Offline(uid, "ios"), "1", "2")
	wantString(t, e, keys.Count(uid, 1), "1")
}
