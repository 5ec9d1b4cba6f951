package offline_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/embedded"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
)

// env is what a scenario runs on: a store, the client under it and the key
// layout that client calls for.
type env struct {
	rdb   redis.UniversalClient
	store *offline.Store
	keys  rkeys.Layout
}

func newEnv(rdb redis.UniversalClient) *env {
	return &env{rdb: rdb, store: offline.New(rdb), keys: rkeys.Of(rdb)}
}

type scenario struct {
	name string
	run  func(t *testing.T, e *env)
	// stats: the scenario reads INFO commandstats, which miniredis lacks.
	stats bool
}

func scenarios() []scenario {
	return []scenario{
		{name: "key layout", run: testKeyLayout},
		{name: "same seq twice", run: testWriteTwice},
		{name: "shared body refcount", run: testSharedBody},
		{name: "body per user in the cluster layout", run: testBodyPerUser},
		{name: "trim to max count", run: testTrim},
		{name: "trim per platform policy", run: testTrimPerPlatform},
		{name: "expired members", run: testExpired},
		{name: "expired shared member keeps count", run: testExpiredShared},
		{name: "dropped seqs reported", run: testDroppedReported},
		{name: "ttls", run: testTTLs},
		{name: "ttl expiry", run: testTTLExpiry},
		{name: "reader clock behind redis", run: testReaderClockBehind},
		{name: "read pages", run: testReadPages},
		{name: "largest page", run: testLargestPage},
		{name: "equal timestamps order", run: testEqualTimestamps},
		{name: "missing body", run: testMissingBody},
		{name: "page of missing bodies", run: testPageOfMissingBodies},
		{name: "large numbers", run: testLargeNumbers},
		{name: "script cache flushed", run: testScriptFlush},
		{name: "store false skipped", run: testStoreFalse},
		{name: "lowest expiry", run: testLowestExpiry},
		{name: "held", run: testHeld},
		{name: "default page", run: testDefaultPage},
		{name: "cached scripts sent once", run: testCachedScriptsNoEval, stats: true},
		{name: "invalid arguments", run: testInvalid},
		{name: "canceled context", run: testCanceled},
		{name: "concurrent writes trims and acks", run: testConcurrent},
	}
}

// TestStore runs every scenario on a redis-server (standalone layout) and on
// a Redis Cluster of three masters (cluster layout), emptied between
// scenarios. The two layouts run side by side, the standalone one on a
// database of the test binary's shared redis-server (no other test of the
// package uses it, so the scenarios that look at the server's script cache
// and command statistics see only their own calls); the scenarios of one
// layout run one after the other for the same reason.
func TestStore(t *testing.T) {
	t.Parallel()
	each := func(t *testing.T, rdb redis.UniversalClient, flush func(t *testing.T)) {
		for _, sc := range scenarios() {
			t.Run(sc.name, func(t *testing.T) {
				flush(t)
				sc.run(t, newEnv(rdb))
			})
		}
	}
	testutil.EachLayout(t, each)
}

// TestStoreMiniredis runs the scenarios on miniredis, as `gomsg dev` runs
// the store, each on its own server.
func TestStoreMiniredis(t *testing.T) {
	t.Parallel()
	for _, sc := range scenarios() {
		if sc.stats {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			m, err := embedded.StartRedis("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			c := redis.NewClient(&redis.Options{Addr: m.Addr})
			t.Cleanup(func() { _ = c.Close() })
			sc.run(t, newEnv(c))
		})
	}
}

// --- scenarios --------------------------------------------------------------

// The key names are the standalone ones on a standalone Redis and carry the user's
// hash tag on a cluster, to the character.
func testKeyLayout(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli() - 1000
	mustWrite(t, e, "alice", 1, item("ios", hour, 0, 42, ts, "hello"))

	list, body, count := "msg/u:alice/p:ios/oms", "msg/om:42/m", "msg/om:42/n"
	if e.keys.IsCluster() {
		list, body, count = "msg/{u:alice}/p:ios/oms", "msg/{u:alice}/om:42/m", "msg/{u:alice}/om:42/n"
	}
	wantKeyNames(t, e, body, count, list)
	for key, typ := range map[string]string{body: "string", count: "string", list: "zset"} {
		if got := e.rdb.Type(ctx, key).Val(); got != typ {
			t.Errorf("TYPE %s = %q, want %q", key, got, typ)
		}
	}
	wantList(t, e, list, redis.Z{Score: float64(ts), Member: "42"})
	wantString(t, e, body, "hello")
	wantString(t, e, count, "1")
}

func testWriteTwice(t *testing.T, e *env) {
	ts := time.Now().UnixMilli()
	it := item("ios", hour, 0, 7, ts, "m7")
	mustWrite(t, e, "u", 1, it)
	mustWrite(t, e, "u", 0, it)
	mustWrite(t, e, "u", 1, it, it, item("ios", hour, 0, 8, ts, "m8")) // 7 again in the batch, 8 new
	wantList(t, e, e.keys.Offline("u", "ios"),
		redis.Z{Score: float64(ts), Member: "7"}, redis.Z{Score: float64(ts), Member: "8"})
	wantString(t, e, e.keys.Count("u", 7), "1")
	wantString(t, e, e.keys.Count("u", 8), "1")
	wantString(t, e, e.keys.Body("u", 7), "m7")
}

// One user's platform lists share a body in both layouts.
func testSharedBody(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	platforms := []string{"ios", "android", "web"}
	for _, p := range platforms {
		mustWrite(t, e, "u", 1, item(p, hour, 0, 7, ts, "shared"))
	}
	wantKeys(t, e, 5) // one body, one count, three lists
	wantString(t, e, e.keys.Body("u", 7), "shared")
	wantString(t, e, e.keys.Count("u", 7), "3")

	for i, p := range platforms {
		if err := e.store.Delete(ctx, "u", p, []int64{7}); err != nil {
			t.Fatal(err)
		}
		// A repeated ACK must not take another list's reference.
		if err := e.store.Delete(ctx, "u", p, []int64{7}); err != nil {
			t.Fatal(err)
		}
		wantMissing(t, e, e.keys.Offline("u", p))
		left := len(platforms) - i - 1
		if left == 0 {
			wantMissing(t, e, e.keys.Body("u", 7), e.keys.Count("u", 7))
			continue
		}
		wantString(t, e, e.keys.Body("u", 7), "shared")
		wantString(t, e, e.keys.Count("u", 7), strconv.Itoa(left))
	}
	wantKeys(t, e, 0)
}

// A message pushed to several users is one body on a standalone Redis, and
// one body per user on a cluster, where a user's keys share a
// slot and a shared body would not.
func testBodyPerUser(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	users := []string{"u1", "u2", "u3"}
	for _, u := range users {
		mustWrite(t, e, u, 2, item("ios", hour, 0, 7, ts, "shared"), item("android", hour, 0, 7, ts, "shared"))
	}
	if e.keys.IsCluster() {
		wantKeys(t, e, 3*2+3*2) // per user: two lists, a body and a count
		for _, u := range users {
			if e.keys.Body(u, 7) == e.keys.Body(users[0], 7) && u != users[0] {
				t.Fatalf("users %s and %s share body key %s in the cluster layout", u, users[0], e.keys.Body(u, 7))
			}
			wantString(t, e, e.keys.Body(u, 7), "shared")
			wantString(t, e, e.keys.Count(u, 7), "2")
		}
	} else {
		wantKeys(t, e, 3*2+2) // six lists, one body, one count
		wantString(t, e, "msg/om:7/m", "shared")
		wantString(t, e, "msg/om:7/n", "6")
	}

	// u1 lets go of 7 on both platforms, twice (a repeated ACK).
	for range 2 {
		for _, p := range []string{"ios", "android"} {
			if err := e.store.Delete(ctx, "u1", p, []int64{7}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if e.keys.IsCluster() {
		wantMissing(t, e, e.keys.Body("u1", 7), e.keys.Count("u1", 7))
		wantString(t, e, e.keys.Count("u2", 7), "2")
		wantString(t, e, e.keys.Count("u3", 7), "2")
	} else {
		wantString(t, e, "msg/om:7/n", "4")
	}
	wantRead(t, e, "u2", "ios", time.Now(), hour, 0, 7)

	// A trim takes only its own list's references.
	mustWrite(t, e, "u2", 2, item("ios", hour, 1, 8, ts+1, "b8"), item("ios", hour, 1, 9, ts+2, "b9"))
	wantMembers(t, e, e.keys.Offline("u2", "ios"), "9")
	if e.keys.IsCluster() {
		wantString(t, e, e.keys.Count("u2", 7), "1")
		wantString(t, e, e.keys.Count("u3", 7), "2")
		wantMissing(t, e, e.keys.Body("u2", 8), e.keys.Count("u2", 8))
	} else {
		wantString(t, e, "msg/om:7/n", "3")
		wantMissing(t, e, "msg/om:8/m", "msg/om:8/n")
	}
	wantConsistent(t, e, users, []string{"ios", "android"}, []int64{7, 8, 9})
}

func testTrim(t *testing.T, e *env) {
	ts := time.Now().UnixMilli() - 10_000
	var shared, unlimited, alone []offline.Item
	for i := range int64(5) {
		shared = append(shared, item("ios", hour, 3, 1+i, ts+i, "s"))
		unlimited = append(unlimited, item("android", hour, 0, 1+i, ts+i, "s"))
		alone = append(alone, item("ios", hour, 2, 11+i, ts+i, "a"))
	}
	mustWrite(t, e, "a", 5, unlimited...)
	mustWrite(t, e, "a", 5, shared...)
	wantMembers(t, e, e.keys.Offline("a", "ios"), "3", "4", "5")
	wantMembers(t, e, e.keys.Offline("a", "android"), "1", "2", "3", "4", "5")
	for seq, n := range map[int64]string{1: "1", 2: "1", 3: "2", 4: "2", 5: "2"} {
		wantString(t, e, e.keys.Count("a", seq), n)
		wantString(t, e, e.keys.Body("a", seq), "s") // 1 and 2 are still android's
	}

	mustWrite(t, e, "c", 5, alone...)
	wantMembers(t, e, e.keys.Offline("c", "ios"), "14", "15")
	for _, seq := range []int64{11, 12, 13} {
		wantMissing(t, e, e.keys.Body("c", seq), e.keys.Count("c", seq))
	}
	wantString(t, e, e.keys.Count("c", 14), "1")
	wantString(t, e, e.keys.Count("c", 15), "1")

	// Trimming across writes keeps the newest by timestamp, not by seq.
	mustWrite(t, e, "d", 2, item("ios", hour, 3, 25, ts, "d"), item("ios", hour, 3, 24, ts+1, "d"))
	mustWrite(t, e, "d", 3, item("ios", hour, 3, 23, ts+2, "d"), item("ios", hour, 3, 22, ts+3, "d"),
		item("ios", hour, 3, 21, ts+4, "d"))
	wantMembers(t, e, e.keys.Offline("d", "ios"), "23", "22", "21")
	wantMissing(t, e, e.keys.Body("d", 24), e.keys.Body("d", 25), e.keys.Count("d", 24), e.keys.Count("d", 25))
	wantKeys(t, e, 4+2*5+2*2+2*3) // 4 lists; bodies and counts of 1-5, 14-15, 21-23
}

func testTrimPerPlatform(t *testing.T, e *env) {
	ts := time.Now().UnixMilli()
	var items []offline.Item
	for i := range int64(3) {
		items = append(items, item("ios", hour, 1, 1+i, ts+i, "x"), item("android", hour, 0, 1+i, ts+i, "x"))
	}
	mustWrite(t, e, "u", 6, items...)
	wantMembers(t, e, e.keys.Offline("u", "ios"), "3")
	wantMembers(t, e, e.keys.Offline("u", "android"), "1", "2", "3")
	wantString(t, e, e.keys.Count("u", 1), "1")
	wantString(t, e, e.keys.Count("u", 2), "1")
	wantString(t, e, e.keys.Count("u", 3), "2")
}

func testExpired(t *testing.T, e *env) {
	ctx := t.Context()
	now := time.Now()
	ms := now.UnixMilli()
	mustWrite(t, e, "u", 4,
		item("ios", hour, 0, 31, ms-2*hourMs, "old"),
		item("ios", hour, 0, 32, ms-hourMs-60_000, "old"),
		item("ios", hour, 0, 33, ms-hourMs+60_000, "fresh"),
		item("ios", hour, 0, 34, ms, "new"))
	// clean dropped the members older than now-expiry; their bodies and counts
	// were born expired.
	wantMembers(t, e, e.keys.Offline("u", "ios"), "33", "34")
	wantMissing(t, e, e.keys.Body("u", 31), e.keys.Count("u", 31), e.keys.Body("u", 32), e.keys.Count("u", 32))

	wantRead(t, e, "u", "ios", now, hour, 0, 33, 34)
	later := now.Add(2 * time.Minute) // 33 is past its expiry then
	wantRead(t, e, "u", "ios", later, hour, 0, 34)
	wantMembers(t, e, e.keys.Offline("u", "ios"), "33", "34") // Read does not drop
	if err := e.store.DropExpired(ctx, "u", "ios", later, hour); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, e, e.keys.Offline("u", "ios"), "34")
	wantRead(t, e, "u", "ios", later, hour, 0, 34)
}

// A member dropped for age leaves its count alone: the body
// and count go by their own expire-at, which GT kept at the longest expiry.
func testExpiredShared(t *testing.T, e *env) {
	ctx := t.Context()
	now := time.Now()
	ts := now.UnixMilli() - hourMs + 60_000
	mustWrite(t, e, "f", 1, item("ios", hour, 0, 40, ts, "b"))
	mustWrite(t, e, "f", 1, item("android", 2*hour, 0, 40, ts, "b"))
	later := now.Add(2 * time.Minute)
	if err := e.store.DropExpired(ctx, "f", "ios", later, hour); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, e, e.keys.Offline("f", "ios"))
	wantString(t, e, e.keys.Count("f", 40), "2")
	wantRead(t, e, "f", "android", later, 2*hour, 0, 40)
	wantPTTL(t, e, e.keys.Body("f", 40), time.Until(time.UnixMilli(ts+2*hourMs))+offline.KeyMargin)
}

func testTTLs(t *testing.T, e *env) {
	ts := time.Now().UnixMilli() - 10*60_000
	mustWrite(t, e, "u", 1, item("ios", hour, 0, 9, ts, "b"))
	left := time.Until(time.UnixMilli(ts+hourMs)) + offline.KeyMargin // about 51 minutes
	wantPTTL(t, e, e.keys.Body("u", 9), left)
	wantPTTL(t, e, e.keys.Count("u", 9), left)
	wantPTTL(t, e, e.keys.Offline("u", "ios"), time.Hour+offline.KeyMargin)

	// A platform with a longer expiry extends the shared body; a shorter one
	// does not cut it.
	mustWrite(t, e, "u", 1, item("android", 2*hour, 0, 9, ts, "b"))
	mustWrite(t, e, "u", 1, item("web", 30*time.Minute, 0, 9, ts+1, "b"))
	longer := time.Until(time.UnixMilli(ts+2*hourMs)) + offline.KeyMargin
	wantPTTL(t, e, e.keys.Body("u", 9), longer)
	wantPTTL(t, e, e.keys.Count("u", 9), longer)
	wantPTTL(t, e, e.keys.Offline("u", "android"), 2*time.Hour+offline.KeyMargin)
	wantPTTL(t, e, e.keys.Offline("u", "web"), 30*time.Minute+offline.KeyMargin)
	wantString(t, e, e.keys.Count("u", 9), "3")
}

// A reader whose clock is behind Redis's still counts a member alive after
// Redis's clock has passed the member's expiry: it must find the body (not
// delete the member as gone), and the member must then end by Expire,
// which returns its seq — what an EXPIRED receipt is made from.
func testReaderClockBehind(t *testing.T, e *env) {
	ctx := t.Context()
	const expiry = time.Second
	ts := time.Now().UnixMilli() - expiry.Milliseconds() + 200 // expires 200ms from now
	mustWrite(t, e, "k", 1, item("ios", expiry, 0, 7, ts, "b"))
	edge := time.UnixMilli(ts).Add(expiry) // the reader's now: the member's last alive millisecond
	testutil.WaitFor(t, 5*time.Second, func() error {
		if d := time.Until(edge); d > -100*time.Millisecond {
			return fmt.Errorf("redis's clock is %s short of 100ms past the expiry", d+100*time.Millisecond)
		}
		return nil
	})
	wantRead(t, e, "k", "ios", edge, expiry, 0, 7)
	expired, err := e.store.Expire(ctx, "k", "ios", edge.Add(time.Millisecond), expiry)
	if err != nil || !slices.Equal(expired, []int64{7}) {
		t.Fatalf("expired %v, %v; want [7]", expired, err)
	}
}

func testTTLExpiry(t *testing.T, e *env) {
	ctx := t.Context()
	const expiry = 1500 * time.Millisecond
	offline.SetKeyMargin(e.store, 0)
	defer offline.SetKeyMargin(e.store, offline.KeyMargin)
	mustWrite(t, e, "u", 1, item("ios", expiry, 0, 5, time.Now().UnixMilli(), "b"))
	wantString(t, e, e.keys.Body("u", 5), "b")
	testutil.WaitFor(t, 5*time.Second, func() error {
		n, err := e.rdb.Exists(ctx, e.keys.Body("u", 5), e.keys.Count("u", 5), e.keys.Offline("u", "ios")).Result()
		if err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%d of body, count and list still exist", n)
		}
		return nil
	})
	wantRead(t, e, "u", "ios", time.Now(), expiry, 0)
}

func testReadPages(t *testing.T, e *env) {
	ctx := t.Context()
	now := time.Now()
	base := now.UnixMilli() - 60_000
	var items []offline.Item
	for i := range int64(120) {
		items = append(items, item("ios", hour, 0, 1001+i, base+i, "body-"+strconv.FormatInt(1001+i, 10)))
	}
	mustWrite(t, e, "u", 120, items...)
	for _, page := range [][2]int64{{1001, 1050}, {1051, 1100}, {1101, 1120}} {
		got, err := e.store.Read(ctx, "u", "ios", now, hour, offline.PageSize)
		if err != nil {
			t.Fatal(err)
		}
		var want []offline.Message
		for seq := page[0]; seq <= page[1]; seq++ {
			want = append(want, offline.Message{Seq: seq, Timestamp: base + seq - 1001,
				Body: []byte("body-" + strconv.FormatInt(seq, 10))})
		}
		wantMessages(t, got, want)
		seqs := make([]int64, len(got))
		for i, m := range got {
			seqs[i] = m.Seq
		}
		if err := e.store.Delete(ctx, "u", "ios", seqs); err != nil {
			t.Fatal(err)
		}
	}
	wantRead(t, e, "u", "ios", now, hour, 0)
	if err := e.store.DropExpired(ctx, "u", "ios", now, hour); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, e, 0)
}

// A page is capped at 1000: its bodies come back from one MGET.
func testLargestPage(t *testing.T, e *env) {
	ctx := t.Context()
	// Laid out with two commands, not 1001 writes: miniredis (ClockTTL) walks
	// and sorts every key on every command, which makes 1001 writes slow there.
	ts := time.Now().UnixMilli() - 60_000
	members := make([]redis.Z, 1001)
	var kv []any
	for i := range members {
		seq := int64(i)
		members[i] = redis.Z{Score: float64(ts + seq), Member: strconv.FormatInt(seq, 10)}
		kv = append(kv, e.keys.Body("u", seq), "b", e.keys.Count("u", seq), "1")
	}
	if err := e.rdb.ZAdd(ctx, e.keys.Offline("u", "ios"), members...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.MSet(ctx, kv...).Err(); err != nil {
		t.Fatal(err)
	}
	msgs, err := e.store.Read(ctx, "u", "ios", time.Now(), hour, 5000)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1000 || msgs[0].Seq != 0 || msgs[999].Seq != 999 {
		t.Fatalf("Read(limit 5000) returned %d messages, want seqs 0..999", len(msgs))
	}
}

// Equal timestamps come in the zset's member order, which compares seqs as
// strings.
func testEqualTimestamps(t *testing.T, e *env) {
	ts := time.Now().UnixMilli()
	mustWrite(t, e, "u", 4, item("ios", hour, 0, 9, ts, "9"), item("ios", hour, 0, 11, ts, "11"),
		item("ios", hour, 0, 10, ts, "10"), item("ios", hour, 0, 8, ts-1, "8"))
	wantRead(t, e, "u", "ios", time.Now(), hour, 0, 8, 10, 11, 9)
}

func testMissingBody(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	var items []offline.Item
	for i := range int64(5) {
		items = append(items, item("ios", hour, 0, 1+i, ts+i, "b"))
	}
	mustWrite(t, e, "m", 5, items...)
	shared := items[1] // seq 2, on android too
	shared.Platform = "android"
	mustWrite(t, e, "m", 1, shared)
	if err := e.rdb.Del(ctx, e.keys.Body("m", 2), e.keys.Body("m", 4)).Err(); err != nil {
		t.Fatal(err)
	}
	wantRead(t, e, "m", "ios", time.Now(), hour, 0, 1, 3, 5)
	// The bodiless seqs left the ios list with their references.
	wantMembers(t, e, e.keys.Offline("m", "ios"), "1", "3", "5")
	wantMissing(t, e, e.keys.Count("m", 4))
	wantString(t, e, e.keys.Count("m", 2), "1")
	wantRead(t, e, "m", "android", time.Now(), hour, 0)
	wantMissing(t, e, e.keys.Offline("m", "android"), e.keys.Count("m", 2))
}

// Bodiless seqs filling whole pages must not hide the messages behind them.
func testPageOfMissingBodies(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	var items []offline.Item
	var bodies []string
	for i := range int64(60) {
		items = append(items, item("ios", hour, 0, 1+i, ts+i, "b"))
		if i < 55 {
			bodies = append(bodies, e.keys.Body("p", 1+i))
		}
	}
	mustWrite(t, e, "p", 60, items...)
	if err := e.rdb.Del(ctx, bodies...).Err(); err != nil {
		t.Fatal(err)
	}
	wantRead(t, e, "p", "ios", time.Now(), hour, 20, 56, 57, 58, 59, 60)
	wantKeys(t, e, 1+2*5)
}

func testLargeNumbers(t *testing.T, e *env) {
	ctx := t.Context()
	now := time.Now()
	msgs := []offline.Message{
		{Seq: 1<<53 + 1, Timestamp: now.UnixMilli() - 3, Body: []byte("not a float64")},
		{Seq: 1<<62 + 12345, Timestamp: now.UnixMilli() - 2, Body: []byte{0, 1, 2, 255}},
		{Seq: math.MaxInt64, Timestamp: now.UnixMilli() - 1, Body: []byte("max")},
		{Seq: 1<<62 + 1, Timestamp: 4102444800123, Body: []byte("2100")},
	}
	var items []offline.Item
	for _, m := range msgs {
		items = append(items, offline.Item{Platform: "ios", Policy: offline.Policy{Store: true, Expiry: hour}, Msg: m})
	}
	mustWrite(t, e, "u", len(msgs), items...)
	var want []redis.Z
	for _, m := range msgs {
		want = append(want, redis.Z{Score: float64(m.Timestamp), Member: strconv.FormatInt(m.Seq, 10)})
		wantString(t, e, e.keys.Body("u", m.Seq), string(m.Body))
		wantString(t, e, e.keys.Count("u", m.Seq), "1")
	}
	wantList(t, e, e.keys.Offline("u", "ios"), want...)
	prefix := e.keys.BodyPrefix("u")
	if got := e.rdb.Exists(ctx, prefix+"4611686018427400249/m", prefix+"9223372036854775807/n").Val(); got != 2 {
		t.Fatalf("literal keys of large seqs: %d of 2 exist", got)
	}
	got, err := e.store.Read(ctx, "u", "ios", now, hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantMessages(t, got, msgs)
	wantPTTL(t, e, e.keys.Body("u", 1<<62+1), time.Until(time.UnixMilli(4102444800123+hourMs))+offline.KeyMargin)
	if err := e.store.Delete(ctx, "u", "ios", []int64{1<<53 + 1, 1<<62 + 12345, math.MaxInt64, 1<<62 + 1}); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, e, 0)
}

// A Redis that lost its script cache (restart, SCRIPT FLUSH, a cluster node a
// slot moved to) answers EVALSHA with NOSCRIPT; every operation must still
// do all its work once.
func testScriptFlush(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	mustWrite(t, e, "u", 1, item("ios", hour, 2, 1, ts, "b"))
	flush := func() {
		t.Helper()
		if err := e.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	flush()
	// Only clean.lua cached: the cleans run before the re-sent writes land, so
	// they must be re-sent after them to still see all 3 writes.
	loadScript(t, e, "clean.lua")
	mustWrite(t, e, "u", 3, item("ios", hour, 2, 2, ts+1, "b"), item("ios", hour, 2, 3, ts+2, "b"),
		item("ios", hour, 2, 4, ts+3, "b"))
	wantMembers(t, e, e.keys.Offline("u", "ios"), "3", "4")
	wantMissing(t, e, e.keys.Body("u", 1), e.keys.Body("u", 2))
	// The trim's delete.lua is not cached either.
	flush()
	loadScript(t, e, "write.lua")
	loadScript(t, e, "clean.lua")
	mustWrite(t, e, "u", 1, item("ios", hour, 2, 5, ts+4, "b"))
	wantMembers(t, e, e.keys.Offline("u", "ios"), "4", "5")
	wantMissing(t, e, e.keys.Body("u", 3), e.keys.Count("u", 3))
	flush()
	wantRead(t, e, "u", "ios", time.Now(), hour, 0, 4, 5)
	flush()
	if err := e.store.Delete(ctx, "u", "ios", []int64{4}); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, e, e.keys.Body("u", 4), e.keys.Count("u", 4))
	flush()
	if err := e.store.DropExpired(ctx, "u", "ios", time.Now().Add(2*time.Hour), hour); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, e, e.keys.Offline("u", "ios"))
}

func testStoreFalse(t *testing.T, e *env) {
	ts := time.Now().UnixMilli()
	off := item("android", hour, 0, 1, ts, "b")
	off.Policy.Store = false
	off.Policy.Expiry = 0 // not checked for platforms that do not store
	mustWrite(t, e, "u", 1, off, item("ios", hour, 0, 1, ts, "b"))
	mustWrite(t, e, "u", 0, off)
	wantMissing(t, e, e.keys.Offline("u", "android"))
	wantMembers(t, e, e.keys.Offline("u", "ios"), "1")
	wantString(t, e, e.keys.Count("u", 1), "1")
}

// An expiry of exactly 1ms is the lowest accepted.
func testLowestExpiry(t *testing.T, e *env) {
	mustWrite(t, e, "u", 1, item("ios", time.Millisecond, 0, 1, time.Now().UnixMilli(), "b"))
}

// Once Redis knows the scripts, a write is one pipeline of EVALSHAs: nothing
// is sent again as EVAL (a NOSCRIPT retry happens only after a NOSCRIPT),
// and a write that trims nothing is one write.lua and one clean.lua: no
// second round trip for delete.lua.
func testCachedScriptsNoEval(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	mustWrite(t, e, "u", 1, item("ios", hour, 5, 1, ts, "b")) // loads the scripts
	eachMaster(t, e, func(m *redis.Client) error { return m.ConfigResetStat(ctx).Err() })
	mustWrite(t, e, "u", 1, item("ios", hour, 5, 2, ts, "b"))
	var all strings.Builder
	evalsha := 0
	eachMaster(t, e, func(m *redis.Client) error {
		stats, err := m.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		if strings.Contains(stats, "cmdstat_eval:") {
			return fmt.Errorf("%s ran EVAL after the scripts were cached:\n%s", m.Options().Addr, stats)
		}
		if _, rest, ok := strings.Cut(stats, "cmdstat_evalsha:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			if err != nil {
				return err
			}
			evalsha += n
		}
		all.WriteString(stats)
		return nil
	})
	if evalsha != 2 {
		t.Fatalf("%d EVALSHA ran for a write within the list's maximum, want 2 (write.lua, clean.lua):\n%s", evalsha, all.String())
	}
}

func testInvalid(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	good := item("ios", hour, 0, 1, ts, "b")
	cases := []struct {
		name string
		call func() error
	}{
		{"write empty uid", func() error { _, err := e.store.Write(ctx, "", []offline.Item{good}); return err }},
		{"write empty platform", func() error {
			_, err := e.store.Write(ctx, "u", []offline.Item{good, item("", hour, 0, 2, ts, "b")})
			return err
		}},
		{"write zero expiry", func() error {
			_, err := e.store.Write(ctx, "u", []offline.Item{good, item("ios", 0, 0, 2, ts, "b")})
			return err
		}},
		{"read zero expiry", func() error { _, err := e.store.Read(ctx, "u", "ios", time.Now(), 0, 0); return err }},
		{"read empty platform", func() error { _, err := e.store.Read(ctx, "u", "", time.Now(), hour, 0); return err }},
		{"read empty uid", func() error { _, err := e.store.Read(ctx, "", "ios", time.Now(), hour, 0); return err }},
		{"delete empty uid", func() error { return e.store.Delete(ctx, "", "ios", []int64{1}) }},
		{"drop expired sub-ms expiry", func() error {
			return e.store.DropExpired(ctx, "u", "ios", time.Now(), time.Microsecond)
		}},
	}
	for _, c := range cases {
		if err := c.call(); !errors.Is(err, offline.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", c.name, err)
		}
	}
	wantKeys(t, e, 0) // nothing half written
}

func testCanceled(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.store.Write(ctx, "u", []offline.Item{item("ios", hour, 0, 1, 1, "b")}); !errors.Is(err, context.Canceled) {
		t.Errorf("Write err = %v, want context.Canceled", err)
	}
	if _, err := e.store.Read(ctx, "u", "ios", time.Now(), hour, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Read err = %v, want context.Canceled", err)
	}
	wantKeys(t, e, 0)
}

// Writes that trim (clean.lua names the seqs, delete.lua removes them in a
// second step) racing reads and ACKs of the same seqs leave every count equal
// to the number of lists holding its body, and no body without a list.
func testConcurrent(t *testing.T, e *env) {
	ctx := t.Context()
	users := []string{"c1", "c2"}
	platforms := []string{"ios", "android"}
	const n = 60
	base := time.Now().UnixMilli() - 60_000
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for _, u := range users {
		wg.Go(func() {
			for seq := int64(1); seq <= n; seq += 3 {
				var items []offline.Item
				for s := seq; s < seq+3; s++ {
					items = append(items, item("ios", hour, 4, s, base+s, "b"), item("android", hour, 9, s, base+s, "b"))
				}
				if _, err := e.store.Write(ctx, u, items); err != nil {
					errs <- err
					return
				}
			}
		})
		for _, p := range platforms {
			wg.Go(func() {
				for range 2 * n / 3 {
					msgs, err := e.store.Read(ctx, u, p, time.Now(), hour, 3)
					if err != nil {
						errs <- err
						return
					}
					seqs := make([]int64, 0, len(msgs))
					for _, m := range msgs {
						seqs = append(seqs, m.Seq)
					}
					// ACK twice, as a client retrying its ACK would.
					for range 2 {
						if err := e.store.Delete(ctx, u, p, seqs); err != nil {
							errs <- err
							return
						}
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seqs := make([]int64, n)
	for i := range seqs {
		seqs[i] = int64(i + 1)
	}
	wantConsistent(t, e, users, platforms, seqs)
}

// TestScriptsAfterRestart: a redis-server restarted without persistence has
// lost its scripts (and data); the next writes load them again.
func TestScriptsAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	r := testutil.StartRedis(t)
	e := newEnv(r.Client(t))
	ts := time.Now().UnixMilli()
	mustWrite(t, e, "u", 1, item("ios", hour, 1, 1, ts, "b"))
	r.Stop()
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error { return e.rdb.Ping(ctx).Err() })
	mustWrite(t, e, "u", 3, item("ios", hour, 1, 5, ts, "b"), item("ios", hour, 1, 6, ts+1, "b"),
		item("ios", hour, 1, 7, ts+2, "b"))
	wantMembers(t, e, e.keys.Offline("u", "ios"), "7")
	wantRead(t, e, "u", "ios", time.Now(), hour, 0, 7)
	wantKeys(t, e, 3)
}

// --- helpers ----------------------------------------------------------------

const (
	hour   = time.Hour
	hourMs = int64(time.Hour / time.Millisecond)
)

func item(platform string, expiry time.Duration, maxCount int, seq, ts int64, body string) offline.Item {
	return offline.Item{
		Platform: platform,
		Policy:   offline.Policy{Store: true, Expiry: expiry, MaxCount: maxCount},
		Msg:      offline.Message{Seq: seq, Timestamp: ts, Body: []byte(body)},
	}
}

func loadScript(t *testing.T, e *env, name string) {
	t.Helper()
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.ScriptLoad(t.Context(), string(src)).Err(); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, e *env, uid string, wantAdded int, items ...offline.Item) {
	t.Helper()
	added, err := e.store.Write(t.Context(), uid, items)
	if err != nil {
		t.Fatal(err)
	}
	if added != wantAdded {
		t.Fatalf("Write(%s) added %d, want %d", uid, added, wantAdded)
	}
}

func wantRead(t *testing.T, e *env, uid, platform string, now time.Time, expiry time.Duration, limit int, seqs ...int64) {
	t.Helper()
	msgs, err := e.store.Read(t.Context(), uid, platform, now, expiry, limit)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(msgs); !slices.Equal(got, seqs) {
		t.Fatalf("Read(%s, %s) seqs = %v, want %v", uid, platform, got, seqs)
	}
}

func seqsOf(msgs []offline.Message) []int64 {
	out := make([]int64, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, m.Seq)
	}
	return out
}

func wantMessages(t *testing.T, got, want []offline.Message) {
	t.Helper()
	if !slices.EqualFunc(got, want, func(a, b offline.Message) bool {
		return a.Seq == b.Seq && a.Timestamp == b.Timestamp && string(a.Body) == string(b.Body)
	}) {
		t.Fatalf("messages\n got %v\nwant %v", got, want)
	}
}

func wantList(t *testing.T, e *env, key string, want ...redis.Z) {
	t.Helper()
	got, err := e.rdb.ZRangeWithScores(t.Context(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ZRANGE %s 0 -1 WITHSCORES = %v, want %v", key, got, want)
	}
}

func wantMembers(t *testing.T, e *env, key string, want ...string) {
	t.Helper()
	got, err := e.rdb.ZRange(t.Context(), key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ZRANGE %s 0 -1 = %q, want %q", key, got, want)
	}
}

func wantString(t *testing.T, e *env, key, want string) {
	t.Helper()
	got, err := e.rdb.Get(t.Context(), key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	if got != want {
		t.Fatalf("GET %s = %q, want %q", key, got, want)
	}
}

func wantMissing(t *testing.T, e *env, keys ...string) {
	t.Helper()
	for _, key := range keys {
		n, err := e.rdb.Exists(t.Context(), key).Result()
		if err != nil {
			t.Fatalf("EXISTS %s: %v", key, err)
		}
		if n != 0 {
			t.Fatalf("%s exists, want it gone", key)
		}
	}
}

// eachMaster runs f on the standalone server, or on every master of a
// cluster, one at a time.
func eachMaster(t *testing.T, e *env, f func(m *redis.Client) error) {
	t.Helper()
	var err error
	switch c := e.rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err = c.ForEachMaster(t.Context(), func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return f(m)
		})
	case *redis.Client:
		err = f(c)
	default:
		t.Fatalf("client %T is neither a *redis.Client nor a *redis.ClusterClient", e.rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// allKeys lists every key, on every master of a cluster.
func allKeys(t *testing.T, e *env) []string {
	t.Helper()
	var keys []string
	eachMaster(t, e, func(m *redis.Client) error {
		k, err := m.Keys(t.Context(), "*").Result()
		keys = append(keys, k...)
		return err
	})
	slices.Sort(keys)
	return keys
}

func wantKeys(t *testing.T, e *env, n int) {
	t.Helper()
	if keys := allKeys(t, e); len(keys) != n {
		t.Fatalf("%d keys %q, want %d", len(keys), keys, n)
	}
}

func wantKeyNames(t *testing.T, e *env, want ...string) {
	t.Helper()
	slices.Sort(want)
	if keys := allKeys(t, e); !slices.Equal(keys, want) {
		t.Fatalf("keys = %q, want %q", keys, want)
	}
}

// wantPTTL checks a key's TTL against want within a second.
func wantPTTL(t *testing.T, e *env, key string, want time.Duration) {
	t.Helper()
	got, err := e.rdb.PTTL(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := got - want; d < -time.Second || d > time.Second {
		t.Fatalf("PTTL %s = %s, want %s within 1s", key, got, want)
	}
}

// wantConsistent checks the reference counts of seqs against the lists of
// users on platforms: each body key's count is the number of those lists
// holding a seq stored under it (on a standalone Redis users share a body,
// on a cluster they do not), and body and count exist exactly when that
// number is above zero. It assumes no member has expired.
func wantConsistent(t *testing.T, e *env, users, platforms []string, seqs []int64) {
	t.Helper()
	ctx := t.Context()
	refs := map[string]int{}
	for _, u := range users {
		for _, p := range platforms {
			members, err := e.rdb.ZRange(ctx, e.keys.Offline(u, p), 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range members {
				seq, err := strconv.ParseInt(m, 10, 64)
				if err != nil {
					t.Fatalf("member %q of %s: %v", m, e.keys.Offline(u, p), err)
				}
				refs[e.keys.Body(u, seq)]++
			}
		}
	}
	for _, u := range users {
		for _, seq := range seqs {
			body, count := e.keys.Body(u, seq), e.keys.Count(u, seq)
			n := refs[body]
			got, err := e.rdb.Get(ctx, count).Result()
			if errors.Is(err, redis.Nil) {
				got = "(none)"
			} else if err != nil {
				t.Fatal(err)
			}
			exists, err := e.rdb.Exists(ctx, body).Result()
			if err != nil {
				t.Fatal(err)
			}
			want, wantBody := strconv.Itoa(n), int64(1)
			if n == 0 {
				want, wantBody = "(none)", 0
			}
			if got != want || exists != wantBody {
				t.Errorf("%s = %s and %s exists %d times, but %d lists hold seq %d", count, got, body, exists, n, seq)
			}
		}
	}
}
