package device_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/embedded"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/testutil"
)

// TestStore runs every scenario on each server the store runs on: a real
// redis-server and a 3-master Redis Cluster (testutil.EachRedis, the two
// key layouts), and the in-process miniredis `gomsg dev` uses. One server
// each, one scenario after the other, each on an emptied server.
func TestStore(t *testing.T) {
	t.Parallel()
	scenarios := []struct {
		name string
		run  func(t *testing.T, rdb redis.UniversalClient)
	}{
		{"register idempotent, list filters", testRegisterIdempotent},
		{"cap under concurrent registrations", testCapConcurrent},
		{"re-register at the cap evicts nothing", testReregisterAtCap},
		{"oldest by registration time", testOldestEvicted},
		{"no cap", testNoCap},
		{"bad values are the oldest", testBadValueOldest},
		{"owner session checked", testOwner},
		{"script cache flushed", testScriptFlush},
		{"a token moves to the user who registers it", testTokenMoves},
		{"a refused registration leaves the token", testMoveRefused},
		{"a leftover entry of an earlier owner is hidden", testLeftoverHidden},
		{"concurrent owners: one keeps the token", testMoveConcurrent},
	}
	each := func(t *testing.T, rdb redis.UniversalClient) {
		for _, sc := range scenarios {
			t.Run(sc.name, func(t *testing.T) {
				testutil.FlushAll(t, rdb)
				sc.run(t, rdb)
			})
		}
	}
	testutil.EachRedis(t, each)
	t.Run("miniredis", func(t *testing.T) {
		m, err := embedded.StartRedis("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		c := redis.NewClient(&redis.Options{Addr: m.Addr})
		t.Cleanup(func() { _ = c.Close() })
		each(t, c)
	})
}

func register(t *testing.T, s *device.Store, d device.Device, limit int) device.Registered {
	t.Helper()
	r, err := s.Register(context.Background(), d, limit, nil)
	if err != nil {
		t.Fatalf("register %s: %v", d.Token, err)
	}
	return r
}

func tokens(t *testing.T, s *device.Store, uid string) []string {
	t.Helper()
	all, err := s.List(context.Background(), uid, "")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(all))
	for i, d := range all {
		out[i] = d.Token
	}
	sort.Strings(out)
	return out
}

func phone(uid, token string) device.Device {
	return device.Device{UID: uid, Platform: "ios", Provider: "apns", Token: token}
}

func testRegisterIdempotent(t *testing.T, rdb redis.UniversalClient) {
	s := device.New(rdb)
	ctx := context.Background()
	p := device.Device{UID: "u1", Platform: "ios", Provider: "apns", Token: "t1", AppID: "com.a"}
	first := register(t, s, p, 10)
	if !first.Added || first.RegisteredAt <= 0 || len(first.Evicted) != 0 {
		t.Fatalf("first register: %+v; want added", first)
	}
	p.AppID = "com.b"
	second := register(t, s, p, 10)
	if second.Added || second.RegisteredAt < first.RegisteredAt || len(second.Evicted) != 0 {
		t.Fatalf("second register: %+v; want refreshed", second)
	}
	register(t, s, device.Device{UID: "u1", Platform: "android", Provider: "fcm", Token: "t2"}, 10)
	gen, _, _ := strings.Cut(rdb.Get(ctx, rkeys.Of(rdb).DeviceOwner("ios/apns/t1")).Val(), " ")
	want := fmt.Sprintf(`{"app_id":"com.b","registered_at":%d,"gen":%s}`, second.RegisteredAt, gen)
	if v := rdb.HGet(ctx, rkeys.Of(rdb).Devices("u1"), "ios/apns/t1").Val(); v != want {
		t.Fatalf("stored value %q, want %q", v, want)
	}
	p.RegisteredAt = second.RegisteredAt
	all, err := s.List(ctx, "u1", "")
	if err != nil || len(all) != 2 || all[0].Token != "t2" || all[1] != p {
		t.Fatalf("List = %+v, %v; want t2 then the updated phone %+v", all, err, p)
	}
	ios, err := s.List(ctx, "u1", "ios")
	if err != nil || len(ios) != 1 || ios[0].Token != "t1" {
		t.Fatalf("List(ios) = %+v, %v", ios, err)
	}
	if removed, err := s.Remove(ctx, "u1", "ios", "apns", "t1"); err != nil || !removed {
		t.Fatalf("remove: %v, %v", removed, err)
	}
	if removed, _ := s.Remove(ctx, "u1", "ios", "apns", "t1"); removed {
		t.Fatal("second remove reported a removal")
	}
	if ios, _ := s.List(ctx, "u1", "ios"); len(ios) != 0 {
		t.Fatalf("List(ios) after remove = %+v", ios)
	}
}

// 50 goroutines register distinct tokens for one uid with a cap of 10:
// exactly the 10 registered last remain, every other one was reported
// evicted once, and another uid's tokens are untouched.
func testCapConcurrent(t *testing.T, rdb redis.UniversalClient) {
	const n, limit = 50, 10
	s := device.New(rdb)
	for i := range 3 {
		register(t, s, phone("other", fmt.Sprintf("o%d", i)), limit)
	}
	results := make([]device.Registered, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = register(t, s, phone("u1", fmt.Sprintf("t%02d", i)), limit)
		}()
	}
	wg.Wait()

	type reg struct {
		token string
		at    int64
	}
	regs := make([]reg, n)
	evicted := map[string]int{}
	for i, r := range results {
		if !r.Added {
			t.Fatalf("t%02d not reported added: %+v", i, r)
		}
		regs[i] = reg{fmt.Sprintf("t%02d", i), r.RegisteredAt}
		for _, d := range r.Evicted {
			if d.UID != "u1" || d.Platform != "ios" || d.Provider != "apns" {
				t.Fatalf("evicted %+v", d)
			}
			evicted[d.Token]++
		}
	}
	sort.Slice(regs, func(i, j int) bool { return regs[i].at < regs[j].at })
	for i := 1; i < n; i++ {
		if regs[i].at == regs[i-1].at {
			t.Fatalf("%s and %s registered at the same ms %d", regs[i-1].token, regs[i].token, regs[i].at)
		}
	}
	var newest []string
	for _, r := range regs[n-limit:] {
		newest = append(newest, r.token)
	}
	sort.Strings(newest)
	if got := tokens(t, s, "u1"); !slices.Equal(got, newest) {
		t.Fatalf("remaining %v, want the %d newest %v", got, limit, newest)
	}
	if len(evicted) != n-limit {
		t.Fatalf("%d tokens reported evicted, want %d: %v", len(evicted), n-limit, evicted)
	}
	for tok, c := range evicted {
		if c != 1 || slices.Contains(newest, tok) {
			t.Fatalf("%s evicted %d times (remaining: %v)", tok, c, slices.Contains(newest, tok))
		}
	}
	if got := tokens(t, s, "other"); !slices.Equal(got, []string{"o0", "o1", "o2"}) {
		t.Fatalf("other uid's tokens %v", got)
	}
}

func testReregisterAtCap(t *testing.T, rdb redis.UniversalClient) {
	s := device.New(rdb)
	for _, tok := range []string{"a", "b", "c"} {
		register(t, s, phone("u1", tok), 3)
	}
	r := register(t, s, phone("u1", "a"), 3)
	if r.Added || len(r.Evicted) != 0 {
		t.Fatalf("re-register at the cap: %+v; want refreshed, nothing evicted", r)
	}
	if got := tokens(t, s, "u1"); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after re-register: %v", got)
	}
	// a is now the newest: the next token evicts b.
	r = register(t, s, phone("u1", "d"), 3)
	if !r.Added || len(r.Evicted) != 1 || r.Evicted[0].Token != "b" {
		t.Fatalf("fourth token: %+v; want b evicted", r)
	}
	if got := tokens(t, s, "u1"); !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Fatalf("after d: %v", got)
	}
	// A lowered cap does not make a re-registration evict.
	if r := register(t, s, phone("u1", "c"), 1); r.Added || len(r.Evicted) != 0 {
		t.Fatalf("re-register over a lowered cap: %+v", r)
	}
	// The next new token trims to the cap.
	r = register(t, s, phone("u1", "e"), 1)
	if len(r.Evicted) != 3 {
		t.Fatalf("new token over a lowered cap: %+v; want 3 evicted", r)
	}
	if got := tokens(t, s, "u1"); !slices.Equal(got, []string{"e"}) {
		t.Fatalf("after e: %v", got)
	}
}

// Order is registration time, not token or platform.
func testOldestEvicted(t *testing.T, rdb redis.UniversalClient) {
	s := device.New(rdb)
	register(t, s, phone("u1", "z"), 2)
	register(t, s, device.Device{UID: "u1", Platform: "android", Provider: "fcm", Token: "a"}, 2)
	r := register(t, s, phone("u1", "m"), 2)
	if len(r.Evicted) != 1 || r.Evicted[0] != phone("u1", "z") {
		t.Fatalf("evicted %+v, want the first registered (ios z)", r.Evicted)
	}
	if got := tokens(t, s, "u1"); !slices.Equal(got, []string{"a", "m"}) {
		t.Fatalf("remaining %v", got)
	}
}

func testNoCap(t *testing.T, rdb redis.UniversalClient) {
	s := device.New(rdb)
	for i := range 20 {
		if r := register(t, s, phone("u1", fmt.Sprint(i)), 0); len(r.Evicted) != 0 {
			t.Fatalf("no cap evicted %+v", r.Evicted)
		}
	}
	if got := tokens(t, s, "u1"); len(got) != 20 {
		t.Fatalf("%d tokens, want 20", len(got))
	}
}

func testBadValueOldest(t *testing.T, rdb redis.UniversalClient) {
	s := device.New(rdb)
	register(t, s, phone("u1", "good"), 2)
	if err := rdb.HSet(context.Background(), rkeys.Of(rdb).Devices("u1"), "ios/apns/bad", "not json").Err(); err != nil {
		t.Fatal(err)
	}
	r := register(t, s, phone("u1", "new"), 2)
	if len(r.Evicted) != 1 || r.Evicted[0].Token != "bad" {
		t.Fatalf("evicted %+v, want the unreadable one", r.Evicted)
	}
}

// A registration by a session writes only while the session store holds
// that session of the device's uid, with that platform and boat: the script
// reads the session hash next to the device hash (one slot on a cluster).
func testOwner(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	s := device.New(rdb)
	sessions := session.New(rdb)
	for _, r := range []struct {
		uid string
		ss  session.Session
	}{
		{"u1", session.Session{Sid: "s1", Platform: "ios", BoatID: "boat1"}},
		{"u2", session.Session{Sid: "s9", Platform: "ios", BoatID: "boat1"}},
	} {
		if _, err := sessions.Add(ctx, r.uid, r.ss, session.Caps{}, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []device.Owner{
		{Sid: "s2", Value: "ios-boat1"},     // no such sid
		{Sid: "s1", Value: "ios-boat2"},     // another boat
		{Sid: "s1", Value: "android-boat1"}, // another platform
		{Sid: "s9", Value: "ios-boat1"},     // another uid's session
	} {
		_, err := s.Register(ctx, phone("u1", "t"), 10, &o)
		if !errors.Is(err, device.ErrNoSession) {
			t.Fatalf("owner %+v: %v; want ErrNoSession", o, err)
		}
		if n := rdb.Exists(ctx, rkeys.Of(rdb).Devices("u1")).Val(); n != 0 {
			t.Fatalf("owner %+v: device hash written", o)
		}
	}
	r, err := s.Register(ctx, phone("u1", "t"), 10, &device.Owner{Sid: "s1", Value: session.Value("ios", "boat1")})
	if err != nil || !r.Added {
		t.Fatalf("own session: %+v, %v", r, err)
	}
	if got := tokens(t, s, "u1"); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("tokens %v", got)
	}
	// Once the session ended, its registrations are refused again.
	if err := sessions.Remove(ctx, "u1", session.Session{Sid: "s1", BoatID: "boat1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(ctx, phone("u1", "t2"), 10, &device.Owner{Sid: "s1", Value: "ios-boat1"}); !errors.Is(err, device.ErrNoSession) {
		t.Fatalf("registration by an ended session: %v; want ErrNoSession", err)
	}
}

func testScriptFlush(t *testing.T, rdb redis.UniversalClient) {
	s := device.New(rdb)
	register(t, s, phone("u1", "a"), 1)
	if err := rdb.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if r := register(t, s, phone("u1", "b"), 1); !r.Added || len(r.Evicted) != 1 {
		t.Fatalf("after SCRIPT FLUSH: %+v", r)
	}
	if got := tokens(t, s, "u1"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("tokens %v", got)
	}
}

// A shared device signs out of alice and into bob: its token is bob's now,
// and alice's notifications must not reach it.
func testTokenMoves(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	s := device.New(rdb)
	keys := rkeys.Of(rdb)
	alice := phone("alice", "t")
	alice.AppID = "com.a"
	register(t, s, alice, 10)
	register(t, s, phone("alice", "other"), 10)
	r := register(t, s, phone("bob", "t"), 10)
	if !r.Added || r.MovedFrom != "alice" {
		t.Fatalf("bob's registration: %+v; want added, moved from alice", r)
	}
	if got := tokens(t, s, "alice"); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("alice's tokens %v; want [other]", got)
	}
	if got := tokens(t, s, "bob"); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("bob's tokens %v; want [t]", got)
	}
	if rdb.HExists(ctx, keys.Devices("alice"), device.Field("ios", "apns", "t")).Val() {
		t.Fatal("alice's hash still holds the moved token")
	}
	// Registering again as the owner moves nothing.
	if r := register(t, s, phone("bob", "t"), 10); r.Added || r.MovedFrom != "" {
		t.Fatalf("bob again: %+v", r)
	}
	// Back to alice.
	if r := register(t, s, alice, 10); !r.Added || r.MovedFrom != "bob" {
		t.Fatalf("alice again: %+v", r)
	}
	if got := tokens(t, s, "bob"); len(got) != 0 {
		t.Fatalf("bob's tokens %v; want none", got)
	}
	// bob removing the token he no longer owns leaves alice's.
	if _, err := s.Remove(ctx, "bob", "ios", "apns", "t"); err != nil {
		t.Fatal(err)
	}
	if got := tokens(t, s, "alice"); !slices.Equal(got, []string{"other", "t"}) {
		t.Fatalf("alice's tokens %v; want [other t]", got)
	}
	// alice removing it frees it: nothing of it is left.
	if ok, err := s.Remove(ctx, "alice", "ios", "apns", "t"); err != nil || !ok {
		t.Fatalf("remove: %v %v", ok, err)
	}
	if n := rdb.Exists(ctx, rkeys.Of(rdb).DeviceOwner(device.Field("ios", "apns", "t"))).Val(); n != 0 {
		t.Fatal("owner key left after the owner removed the token")
	}
	// Tokens evicted by the cap leave no owner key behind.
	register(t, s, phone("carol", "c1"), 1)
	if r := register(t, s, phone("carol", "c2"), 1); len(r.Evicted) != 1 {
		t.Fatalf("evicted %v", r.Evicted)
	}
	if n := rdb.Exists(ctx, rkeys.Of(rdb).DeviceOwner(device.Field("ios", "apns", "c1"))).Val(); n != 0 {
		t.Fatal("owner key of an evicted token left")
	}
}

// A registration refused because its session is gone writes nothing and
// leaves the token with its owner.
func testMoveRefused(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	s := device.New(rdb)
	register(t, s, phone("alice", "t"), 10)
	_, err := s.Register(ctx, phone("bob", "t"), 10, &device.Owner{Sid: "gone", Value: "ios-boat1"})
	if !errors.Is(err, device.ErrNoSession) {
		t.Fatalf("bob without a session: %v; want ErrNoSession", err)
	}
	if got := tokens(t, s, "alice"); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("alice's tokens %v; want [t]", got)
	}
	if got := tokens(t, s, "bob"); len(got) != 0 {
		t.Fatalf("bob's tokens %v", got)
	}
	// A refusal of an unowned token leaves no owner key.
	if _, err := s.Register(ctx, phone("bob", "new"), 10, &device.Owner{Sid: "gone", Value: "ios-boat1"}); !errors.Is(err, device.ErrNoSession) {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, rkeys.Of(rdb).DeviceOwner(device.Field("ios", "apns", "new"))).Val(); n != 0 {
		t.Fatal("owner key left by a refused registration")
	}
}

// An entry the earlier owner's clean-up missed (it runs after the move, on
// another slot) is never listed, and listing removes it.
func testLeftoverHidden(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	s := device.New(rdb)
	keys := rkeys.Of(rdb)
	f := device.Field("ios", "apns", "t")
	register(t, s, phone("alice", "t"), 10)
	register(t, s, phone("bob", "t"), 10)
	if err := rdb.HSet(ctx, keys.Devices("alice"), f, `{"registered_at":1}`).Err(); err != nil {
		t.Fatal(err)
	}
	if got := tokens(t, s, "alice"); len(got) != 0 {
		t.Fatalf("alice's tokens %v; want none", got)
	}
	if rdb.HExists(ctx, keys.Devices("alice"), f).Val() {
		t.Fatal("listing left the leftover entry")
	}
	if got := tokens(t, s, "bob"); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("bob's tokens %v", got)
	}
}

// Two users register one token at once, again and again: whoever claimed
// it last owns it, lists it and holds it; the other neither lists nor holds
// it. An earlier owner's clean-up must not remove the entry the last owner
// wrote.
func testMoveConcurrent(t *testing.T, rdb redis.UniversalClient) {
	ctx := context.Background()
	s := device.New(rdb)
	keys := rkeys.Of(rdb)
	f := device.Field("ios", "apns", "t")
	for round := range 30 {
		var wg sync.WaitGroup
		for _, uid := range []string{"alice", "bob"} {
			wg.Go(func() {
				for range 3 {
					if _, err := s.Register(ctx, phone(uid, "t"), 10, nil); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		ov := rdb.Get(ctx, keys.DeviceOwner(f)).Val()
		_, uid, _ := strings.Cut(ov, " ")
		other := map[string]string{"alice": "bob", "bob": "alice"}[uid]
		if other == "" {
			t.Fatalf("round %d: owner key %q", round, ov)
		}
		if !rdb.HExists(ctx, keys.Devices(uid), f).Val() {
			t.Fatalf("round %d: the owner %s's entry was removed", round, uid)
		}
		if got := tokens(t, s, uid); !slices.Equal(got, []string{"t"}) {
			t.Fatalf("round %d: owner %s lists %v", round, uid, got)
		}
		if got := tokens(t, s, other); len(got) != 0 {
			t.Fatalf("round %d: %s lists %v after %s took the token", round, other, got, uid)
		}
		if rdb.HExists(ctx, keys.Devices(other), f).Val() {
			t.Fatalf("round %d: %s still holds the token", round, other)
		}
	}
}
