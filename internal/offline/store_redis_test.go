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
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/embedded"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/testutil"
)

// env is one scenario's own Redis: a real redis-server, or miniredis as
// `gomsg dev` runs it.
type env struct {
	rdb   *redis.Client
	store *offline.Store
	real  *testutil.Redis // nil on miniredis
}

type backend struct {
	name  string
	start func(t *testing.T) *env
}

func backends() []backend {
	return []backend{
		{"redis", func(t *testing.T) *env {
			r := testutil.StartRedis(t)
			c := r.Client(t)
			return &env{rdb: c, store: offline.New(c), real: r}
		}},
		{"miniredis", func(t *testing.T) *env {
			m, err := embedded.StartRedis("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close)
			c := redis.NewClient(&redis.Options{Addr: m.Addr})
			t.Cleanup(func() { _ = c.Close() })
			return &env{rdb: c, store: offline.New(c)}
		}},
	}
}

// TestStore runs every scenario against both backends, each on its own server.
func TestStore(t *testing.T) {
	t.Parallel()
	scenarios := []struct {
		name string
		run  func(t *testing.T, e *env)
	}{
		{"key layout", testKeyLayout},
		{"same seq twice", testWriteTwice},
		{"shared body refcount", testSharedBody},
		{"trim to max count", testTrim},
		{"trim per platform policy", testTrimPerPlatform},
		{"expired members", testExpired},
		{"expired shared member keeps count", testExpiredShared},
		{"ttls", testTTLs},
		{"ttl expiry", testTTLExpiry},
		{"read pages", testReadPages},
		{"largest page", testLargestPage},
		{"equal timestamps order", testEqualTimestamps},
		{"missing body", testMissingBody},
		{"page of missing bodies", testPageOfMissingBodies},
		{"large numbers", testLargeNumbers},
		{"script cache flushed", testScriptFlush},
		{"store false skipped", testStoreFalse},
		{"lowest expiry", testLowestExpiry},
		{"cached scripts sent once", testCachedScriptsNoEval},
		{"invalid arguments", testInvalid},
		{"canceled context", testCanceled},
	}
	for _, b := range backends() {
		for _, sc := range scenarios {
			t.Run(b.name+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				sc.run(t, b.start(t))
			})
		}
	}
}

// --- scenarios --------------------------------------------------------------

func testKeyLayout(t *testing.T, e *env) {
	ctx := t.Context()
	if got := offline.UserKey("alice", "ios"); got != "msg/u:alice/p:ios/oms" {
		t.Fatalf("UserKey = %q", got)
	}
	if got := offline.BodyKey(42); got != "msg/om:42/m" {
		t.Fatalf("BodyKey = %q", got)
	}
	if got := offline.CountKey(42); got != "msg/om:42/n" {
		t.Fatalf("CountKey = %q", got)
	}

	ts := time.Now().UnixMilli() - 1000
	mustWrite(t, e, "alice", 1, item("ios", hour, 0, 42, ts, "hello"))

	keys, err := e.rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	want := []string{"msg/om:42/m", "msg/om:42/n", "msg/u:alice/p:ios/oms"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys = %q, want %q", keys, want)
	}
	for key, typ := range map[string]string{
		"msg/om:42/m": "string", "msg/om:42/n": "string", "msg/u:alice/p:ios/oms": "zset",
	} {
		if got := e.rdb.Type(ctx, key).Val(); got != typ {
			t.Errorf("TYPE %s = %q, want %q", key, got, typ)
		}
	}
	wantList(t, e, "msg/u:alice/p:ios/oms", redis.Z{Score: float64(ts), Member: "42"})
	wantString(t, e, "msg/om:42/m", "hello")
	wantString(t, e, "msg/om:42/n", "1")
}

func testWriteTwice(t *testing.T, e *env) {
	ts := time.Now().UnixMilli()
	it := item("ios", hour, 0, 7, ts, "m7")
	mustWrite(t, e, "u", 1, it)
	mustWrite(t, e, "u", 0, it)
	mustWrite(t, e, "u", 1, it, it, item("ios", hour, 0, 8, ts, "m8")) // 7 again in the batch, 8 new
	wantList(t, e, offline.UserKey("u", "ios"),
		redis.Z{Score: float64(ts), Member: "7"}, redis.Z{Score: float64(ts), Member: "8"})
	wantString(t, e, offline.CountKey(7), "1")
	wantString(t, e, offline.CountKey(8), "1")
	wantString(t, e, offline.BodyKey(7), "m7")
}

func testSharedBody(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	users := []string{"u1", "u2", "u3"}
	for _, u := range users {
		mustWrite(t, e, u, 1, item("ios", hour, 0, 7, ts, "shared"))
	}
	wantKeys(t, e, 5) // one body, one count, three lists
	wantString(t, e, offline.BodyKey(7), "shared")
	wantString(t, e, offline.CountKey(7), "3")

	for i, u := range users {
		if err := e.store.Delete(ctx, u, "ios", []int64{7}); err != nil {
			t.Fatal(err)
		}
		// A repeated ACK must not take another user's reference.
		if err := e.store.Delete(ctx, u, "ios", []int64{7}); err != nil {
			t.Fatal(err)
		}
		wantMissing(t, e, offline.UserKey(u, "ios"))
		left := len(users) - i - 1
		if left == 0 {
			wantMissing(t, e, offline.BodyKey(7), offline.CountKey(7))
			continue
		}
		wantString(t, e, offline.BodyKey(7), "shared")
		wantString(t, e, offline.CountKey(7), strconv.Itoa(left))
	}
	wantKeys(t, e, 0)
}

func testTrim(t *testing.T, e *env) {
	ts := time.Now().UnixMilli() - 10_000
	var shared, unlimited, alone []offline.Item
	for i := range int64(5) {
		shared = append(shared, item("ios", hour, 3, 1+i, ts+i, "s"))
		unlimited = append(unlimited, item("ios", hour, 0, 1+i, ts+i, "s"))
		alone = append(alone, item("ios", hour, 2, 11+i, ts+i, "a"))
	}
	mustWrite(t, e, "b", 5, unlimited...)
	mustWrite(t, e, "a", 5, shared...)
	wantMembers(t, e, offline.UserKey("a", "ios"), "3", "4", "5")
	wantMembers(t, e, offline.UserKey("b", "ios"), "1", "2", "3", "4", "5")
	for seq, n := range map[int64]string{1: "1", 2: "1", 3: "2", 4: "2", 5: "2"} {
		wantString(t, e, offline.CountKey(seq), n)
		wantString(t, e, offline.BodyKey(seq), "s") // 1 and 2 are still b's
	}

	mustWrite(t, e, "c", 5, alone...)
	wantMembers(t, e, offline.UserKey("c", "ios"), "14", "15")
	wantMissing(t, e, offline.BodyKey(11), offline.CountKey(11), offline.BodyKey(12),
		offline.CountKey(12), offline.BodyKey(13), offline.CountKey(13))
	wantString(t, e, offline.CountKey(14), "1")
	wantString(t, e, offline.CountKey(15), "1")

	// Trimming across writes keeps the newest by timestamp, not by seq.
	mustWrite(t, e, "d", 2, item("ios", hour, 3, 25, ts, "d"), item("ios", hour, 3, 24, ts+1, "d"))
	mustWrite(t, e, "d", 3, item("ios", hour, 3, 23, ts+2, "d"), item("ios", hour, 3, 22, ts+3, "d"),
		item("ios", hour, 3, 21, ts+4, "d"))
	wantMembers(t, e, offline.UserKey("d", "ios"), "23", "22", "21")
	wantMissing(t, e, offline.BodyKey(24), offline.BodyKey(25), offline.CountKey(24), offline.CountKey(25))
	wantKeys(t, e, 4+2*5+2*2+2*3) // 4 lists; bodies and counts of 1-5, 14-15, 21-23
}

func testTrimPerPlatform(t *testing.T, e *env) {
	ts := time.Now().UnixMilli()
	var items []offline.Item
	for i := range int64(3) {
		items = append(items, item("ios", hour, 1, 1+i, ts+i, "x"), item("android", hour, 0, 1+i, ts+i, "x"))
	}
	mustWrite(t, e, "u", 6, items...)
	wantMembers(t, e, offline.UserKey("u", "ios"), "3")
	wantMembers(t, e, offline.UserKey("u", "android"), "1", "2", "3")
	wantString(t, e, offline.CountKey(1), "1")
	wantString(t, e, offline.CountKey(2), "1")
	wantString(t, e, offline.CountKey(3), "2")
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
	wantMembers(t, e, offline.UserKey("u", "ios"), "33", "34")
	wantMissing(t, e, offline.BodyKey(31), offline.CountKey(31), offline.BodyKey(32), offline.CountKey(32))

	wantRead(t, e, "u", now, hour, 0, 33, 34)
	later := now.Add(2 * time.Minute) // 33 is past its expiry then
	wantRead(t, e, "u", later, hour, 0, 34)
	wantMembers(t, e, offline.UserKey("u", "ios"), "33", "34") // Read does not drop
	if err := e.store.DropExpired(ctx, "u", "ios", later, hour); err != nil {
		t.Fatal(err)
	}
	wantMembers(t, e, offline.UserKey("u", "ios"), "34")
	wantRead(t, e, "u", later, hour, 0, 34)
}

// A member dropped for age leaves its count alone, as seed 000 does: the body
// and count go by their own expire-at, which GT kept at the longest expiry.
func testExpiredShared(t *testing.T, e *env) {
	ctx := t.Context()
	now := time.Now()
	ts := now.UnixMilli() - hourMs + 60_000
	mustWrite(t, e, "f", 1, item("ios", hour, 0, 40, ts, "b"))
	mustWrite(t, e, "g", 1, item("ios", 2*hour, 0, 40, ts, "b"))
	later := now.Add(2 * time.Minute)
	if err := e.store.DropExpired(ctx, "f", "ios", later, hour); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, e, offline.UserKey("f", "ios"))
	wantString(t, e, offline.CountKey(40), "2")
	wantRead(t, e, "g", later, 2*hour, 0, 40)
	wantPTTL(t, e, offline.BodyKey(40), time.Until(time.UnixMilli(ts+2*hourMs)))
}

func testTTLs(t *testing.T, e *env) {
	ts := time.Now().UnixMilli() - 10*60_000
	mustWrite(t, e, "u", 1, item("ios", hour, 0, 9, ts, "b"))
	left := time.Until(time.UnixMilli(ts + hourMs)) // about 50 minutes
	wantPTTL(t, e, offline.BodyKey(9), left)
	wantPTTL(t, e, offline.CountKey(9), left)
	wantPTTL(t, e, offline.UserKey("u", "ios"), time.Hour)

	// A platform with a longer expiry extends the shared body; a shorter one
	// does not cut it.
	mustWrite(t, e, "u", 1, item("android", 2*hour, 0, 9, ts, "b"))
	mustWrite(t, e, "u", 1, item("web", 30*time.Minute, 0, 9, ts+1, "b"))
	longer := time.Until(time.UnixMilli(ts + 2*hourMs))
	wantPTTL(t, e, offline.BodyKey(9), longer)
	wantPTTL(t, e, offline.CountKey(9), longer)
	wantPTTL(t, e, offline.UserKey("u", "android"), 2*time.Hour)
	wantPTTL(t, e, offline.UserKey("u", "web"), 30*time.Minute)
	wantString(t, e, offline.CountKey(9), "3")
}

func testTTLExpiry(t *testing.T, e *env) {
	ctx := t.Context()
	const expiry = 1500 * time.Millisecond
	mustWrite(t, e, "u", 1, item("ios", expiry, 0, 5, time.Now().UnixMilli(), "b"))
	wantString(t, e, offline.BodyKey(5), "b")
	testutil.WaitFor(t, 5*time.Second, func() error {
		n, err := e.rdb.Exists(ctx, offline.BodyKey(5), offline.CountKey(5), offline.UserKey("u", "ios")).Result()
		if err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%d of body, count and list still exist", n)
		}
		return nil
	})
	wantRead(t, e, "u", time.Now(), expiry, 0)
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
	wantRead(t, e, "u", now, hour, 0)
	if err := e.store.DropExpired(ctx, "u", "ios", now, hour); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, e, 0)
}

// A page is capped at 1000: read.lua hands all its body keys to one MGET.
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
		kv = append(kv, offline.BodyKey(seq), "b", offline.CountKey(seq), "1")
	}
	if err := e.rdb.ZAdd(ctx, offline.UserKey("u", "ios"), members...).Err(); err != nil {
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
	wantRead(t, e, "u", time.Now(), hour, 0, 8, 10, 11, 9)
}

func testMissingBody(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	var items []offline.Item
	for i := range int64(5) {
		items = append(items, item("ios", hour, 0, 1+i, ts+i, "b"))
	}
	mustWrite(t, e, "m", 5, items...)
	mustWrite(t, e, "n", 1, items[1]) // seq 2 is shared
	if err := e.rdb.Del(ctx, offline.BodyKey(2), offline.BodyKey(4)).Err(); err != nil {
		t.Fatal(err)
	}
	wantRead(t, e, "m", time.Now(), hour, 0, 1, 3, 5)
	// The bodiless seqs left m's list with their references.
	wantMembers(t, e, offline.UserKey("m", "ios"), "1", "3", "5")
	wantMissing(t, e, offline.CountKey(4))
	wantString(t, e, offline.CountKey(2), "1")
	wantRead(t, e, "n", time.Now(), hour, 0)
	wantMissing(t, e, offline.UserKey("n", "ios"), offline.CountKey(2))
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
			bodies = append(bodies, offline.BodyKey(1+i))
		}
	}
	mustWrite(t, e, "p", 60, items...)
	if err := e.rdb.Del(ctx, bodies...).Err(); err != nil {
		t.Fatal(err)
	}
	wantRead(t, e, "p", time.Now(), hour, 20, 56, 57, 58, 59, 60)
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
		wantString(t, e, offline.BodyKey(m.Seq), string(m.Body))
		wantString(t, e, offline.CountKey(m.Seq), "1")
	}
	wantList(t, e, offline.UserKey("u", "ios"), want...)
	if got := e.rdb.Exists(ctx, "msg/om:4611686018427400249/m", "msg/om:9223372036854775807/n").Val(); got != 2 {
		t.Fatalf("literal keys of large seqs: %d of 2 exist", got)
	}
	got, err := e.store.Read(ctx, "u", "ios", now, hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantMessages(t, got, msgs)
	wantPTTL(t, e, offline.BodyKey(1<<62+1), time.Until(time.UnixMilli(4102444800123+hourMs)))
	if err := e.store.Delete(ctx, "u", "ios", []int64{1<<53 + 1, 1<<62 + 12345, math.MaxInt64, 1<<62 + 1}); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, e, 0)
}

// A Redis that lost its script cache (restart, SCRIPT FLUSH) answers EVALSHA
// with NOSCRIPT; every operation must still do all its work once.
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
	clean, err := os.ReadFile("clean.lua")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.ScriptLoad(ctx, string(clean)).Err(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, e, "u", 3, item("ios", hour, 2, 2, ts+1, "b"), item("ios", hour, 2, 3, ts+2, "b"),
		item("ios", hour, 2, 4, ts+3, "b"))
	wantMembers(t, e, offline.UserKey("u", "ios"), "3", "4")
	wantMissing(t, e, offline.BodyKey(1), offline.BodyKey(2))
	flush()
	wantRead(t, e, "u", time.Now(), hour, 0, 3, 4)
	flush()
	if err := e.store.Delete(ctx, "u", "ios", []int64{3}); err != nil {
		t.Fatal(err)
	}
	flush()
	if err := e.store.DropExpired(ctx, "u", "ios", time.Now().Add(2*time.Hour), hour); err != nil {
		t.Fatal(err)
	}
	wantMissing(t, e, offline.UserKey("u", "ios"))

	if e.real == nil {
		return
	}
	e.real.Stop()
	if err := e.real.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error { return e.rdb.Ping(ctx).Err() })
	mustWrite(t, e, "u", 2, item("ios", hour, 0, 5, ts, "b"), item("ios", hour, 0, 6, ts, "b"))
	wantRead(t, e, "u", time.Now(), hour, 0, 5, 6)
}

func testStoreFalse(t *testing.T, e *env) {
	ts := time.Now().UnixMilli()
	off := item("android", hour, 0, 1, ts, "b")
	off.Policy.Store = false
	off.Policy.Expiry = 0 // not checked for platforms that do not store
	mustWrite(t, e, "u", 1, off, item("ios", hour, 0, 1, ts, "b"))
	mustWrite(t, e, "u", 0, off)
	wantMissing(t, e, offline.UserKey("u", "android"))
	wantMembers(t, e, offline.UserKey("u", "ios"), "1")
	wantString(t, e, offline.CountKey(1), "1")
}

// An expiry of exactly 1ms is the lowest accepted.
func testLowestExpiry(t *testing.T, e *env) {
	mustWrite(t, e, "u", 1, item("ios", time.Millisecond, 0, 1, time.Now().UnixMilli(), "b"))
}

// Once Redis knows the scripts, a write is one pipeline of EVALSHAs: nothing
// is sent again as EVAL (a NOSCRIPT retry happens only after a NOSCRIPT).
func testCachedScriptsNoEval(t *testing.T, e *env) {
	if e.real == nil {
		t.Skip("miniredis keeps no command statistics")
	}
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	mustWrite(t, e, "u", 1, item("ios", hour, 5, 1, ts, "b")) // loads the scripts
	if err := e.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, e, "u", 1, item("ios", hour, 5, 2, ts, "b"))
	stats, err := e.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stats, "cmdstat_eval:") || !strings.Contains(stats, "cmdstat_evalsha:") {
		t.Fatalf("commands after the scripts were cached:\n%s\nwant EVALSHA only", stats)
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

func wantRead(t *testing.T, e *env, uid string, now time.Time, expiry time.Duration, limit int, seqs ...int64) {
	t.Helper()
	msgs, err := e.store.Read(t.Context(), uid, "ios", now, expiry, limit)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]int64, 0, len(msgs))
	for _, m := range msgs {
		got = append(got, m.Seq)
	}
	if !slices.Equal(got, seqs) {
		t.Fatalf("Read(%s) seqs = %v, want %v", uid, got, seqs)
	}
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
		if n := e.rdb.Exists(t.Context(), key).Val(); n != 0 {
			t.Fatalf("%s exists, want it gone", key)
		}
	}
}

func wantKeys(t *testing.T, e *env, n int) {
	t.Helper()
	keys, err := e.rdb.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != n {
		slices.Sort(keys)
		t.Fatalf("%d keys %q, want %d", len(keys), keys, n)
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
