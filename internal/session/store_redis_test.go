package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
)

// scenario is a test body run on both key layouts by eachLayout.
type scenario struct {
	name string
	run  func(t *testing.T, rdb redis.UniversalClient)
}

// eachLayout runs scenarios on a standalone server (a database of the
// shared one) and on a 3-master Redis Cluster, one scenario after the other
// per layout: each starts on an emptied database or cluster with a client
// of its own, so a hook it adds stays its own.
func eachLayout(t *testing.T, scenarios []scenario) {
	t.Helper()
	each := func(t *testing.T, rdb redis.UniversalClient, flush func(t *testing.T)) {
		for _, sc := range scenarios {
			t.Run(sc.name, func(t *testing.T) {
				flush(t)
				sc.run(t, newClient(t, rdb))
			})
		}
	}
	testutil.EachLayout(t, each)
}

// newClient opens another client like rdb (same servers, same type, so the
// same layout), closed by t.Cleanup.
func newClient(t testing.TB, rdb redis.UniversalClient) redis.UniversalClient {
	t.Helper()
	var c redis.UniversalClient
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		o := *r.Options()
		c = redis.NewClusterClient(&o)
	case *redis.Client:
		o := *r.Options()
		c = redis.NewClient(&o)
	default:
		t.Fatalf("client %T: want *redis.Client or *redis.ClusterClient", rdb)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestStore(t *testing.T) {
	t.Parallel()
	eachLayout(t, []scenario{
		{"layout and order", testLayoutAndOrder},
		{"caps under concurrent adds", testAddCaps},
		{"losers", testAddLosers},
		{"racing adds keep only the newest", testAddRaceKeepsOnlyNewest},
		{"newest by connect order, not by sid", testAddConnectOrder},
		{"reset boat", testResetBoat},
		{"remove many: one SREM per boat", testRemoveManySremPerBoat},
		{"scan boat", testScanBoat},
		{"index member added before the session", testIndexBeforeSession},
		{"failed writes keep the index a superset", testFailedWritesKeepIndexSuperset},
	})
}

// sremCounter counts the SREM commands a client sends, in pipelines or not.
type sremCounter struct{ n atomic.Int64 }

func (c *sremCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *sremCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c *sremCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}
func (c *sremCounter) count(cmd redis.Cmder) {
	if cmd.Name() == "srem" {
		c.n.Add(1)
	}
}

// RemoveMany takes a batch's members out of each boat's index with one SREM
// per boat, not one per session: 7 sessions on two boats (and one ref that
// names no boat) cost two.
func testRemoveManySremPerBoat(t *testing.T, rdb redis.UniversalClient) {
	l := rkeys.Of(rdb)
	s := New(rdb)
	ctx := context.Background()
	var refs []Ref
	for boat, n := range map[string]int{"b1": 4, "b2": 3} {
		var add []Ref
		for i := range n {
			add = append(add, Ref{UID: fmt.Sprint("u-", boat, "-", i), Sid: fmt.Sprint(100 + i)})
		}
		if err := s.AddMany(ctx, boat, add, slices.Repeat([]string{"ios"}, n)); err != nil {
			t.Fatal(err)
		}
		for _, r := range add {
			refs = append(refs, Ref{UID: r.UID, Sid: r.Sid, BoatID: boat})
		}
	}
	refs = append(refs, Ref{UID: "nobody", Sid: "1"})
	c := &sremCounter{}
	rdb.AddHook(c)
	removed, err := s.RemoveMany(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.n.Load(); got != 2 {
		t.Errorf("RemoveMany of 7 sessions on 2 boats sent %d SREM, want 2", got)
	}
	for i, r := range refs[:7] {
		if want := (Session{Sid: r.Sid, Platform: "ios", BoatID: r.BoatID}); removed[i] != want {
			t.Errorf("removed[%d] = %+v, want %+v", i, removed[i], want)
		}
	}
	if removed[7] != (Session{}) {
		t.Errorf("removed the never-recorded ref: %+v", removed[7])
	}
	for _, b := range []string{"b1", "b2"} {
		if n := rdb.SCard(ctx, l.BoatSessions(b)).Val(); n != 0 {
			t.Errorf("boat index of %s holds %d after its sessions were removed, want 0", b, n)
		}
	}
}

func testLayoutAndOrder(t *testing.T, rdb redis.UniversalClient) {
	l := rkeys.Of(rdb)
	s := New(rdb)
	ctx := context.Background()

	if _, err := s.Add(ctx, "alice", Session{Sid: "900", Platform: "ios", BoatID: "b1"}, Caps{}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(ctx, "alice", Session{Sid: "1000", Platform: "web", BoatID: "b-2"}, Caps{}, false); err != nil {
		t.Fatal(err)
	}
	all, err := s.List(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Sid != "900" || all[1].Sid != "1000" {
		t.Fatalf("sessions = %+v, want 900 then 1000 (numeric order)", all)
	}
	if all[1].Platform != "web" || all[1].BoatID != "b-2" {
		t.Fatalf("parsed %+v, want web on boat b-2", all[1])
	}
	// The layout's names (package rkeys checks them), read with real
	// commands.
	if typ := rdb.Type(ctx, l.Sessions("alice")).Val(); typ != "hash" {
		t.Fatalf("TYPE %s = %q, want hash", l.Sessions("alice"), typ)
	}
	if v := rdb.HGet(ctx, l.Sessions("alice"), "900").Val(); v != "ios-b1" {
		t.Fatalf("HGET = %q, want ios-b1", v)
	}
	got, ok, err := s.Get(ctx, "alice", "1000")
	if err != nil || !ok || got.BoatID != "b-2" {
		t.Fatalf("Get = %+v %v %v", got, ok, err)
	}
	if m := rdb.SMembers(ctx, l.BoatSessions("b-2")).Val(); !slices.Equal(m, []string{"alice 1000"}) {
		t.Fatalf("boat index of b-2 holds %v, want [alice 1000]", m)
	}
	if err := s.Remove(ctx, "alice", Session{Sid: "900", BoatID: "b1"}); err != nil {
		t.Fatal(err)
	}
	// RemoveMany reports what it removed, as recorded: bob's session was
	// never recorded, and a second removal of alice's finds nothing (each
	// end is reported once, which presence events rely on).
	removed, err := s.RemoveMany(ctx, []Ref{{"alice", "1000", "b-2"}, {"bob", "1", "b1"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Session{{Sid: "1000", Platform: "web", BoatID: "b-2"}, {}}; !slices.Equal(removed, want) {
		t.Fatalf("RemoveMany removed %+v, want %+v", removed, want)
	}
	if again, err := s.RemoveMany(ctx, []Ref{{"alice", "1000", "b-2"}}); err != nil || again[0] != (Session{}) {
		t.Fatalf("second RemoveMany = %+v, %v; want nothing removed", again, err)
	}
	for _, k := range []string{l.BoatSessions("b1"), l.BoatSessions("b-2")} {
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatalf("boat index %s left after every session was removed", k)
		}
	}
	if n := rdb.Exists(ctx, l.Sessions("alice")).Val(); n != 0 {
		t.Fatalf("hash still exists after removing every session")
	}
	if _, ok, _ := s.Get(ctx, "alice", "900"); ok {
		t.Fatal("removed session still found")
	}
}

// Caps hold under concurrent adds: the check and the write are one script,
// on the user's hash alone on a cluster.
func testAddCaps(t *testing.T, rdb redis.UniversalClient) {
	l := rkeys.Of(rdb)
	s := New(rdb)
	ctx := context.Background()
	caps := Caps{PerUID: 5, PerPlatform: 3}

	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, limited := 0, 0
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			platform := []string{"ios", "web"}[i%2]
			_, err := s.Add(ctx, "ann", Session{Sid: fmt.Sprint(1000 + i), Platform: platform, BoatID: "b1"}, caps, false)
			var le *LimitError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.As(err, &le):
				limited++
			default:
				t.Errorf("add: %v", err)
			}
		}()
	}
	wg.Wait()
	// 3 ios + 3 web would be 6 > 5: the per-uid cap stops at 5.
	if n := rdb.HLen(ctx, l.Sessions("ann")).Val(); n != 5 || ok != 5 || limited != 45 {
		t.Fatalf("hash holds %d, %d added, %d refused; want 5, 5, 45", n, ok, limited)
	}
	// On a cluster a refused add took its index member back.
	recorded := rdb.HKeys(ctx, l.Sessions("ann")).Val()
	members := rdb.SMembers(ctx, l.BoatSessions("b1")).Val()
	for i, sid := range recorded {
		recorded[i] = "ann " + sid
	}
	slices.Sort(recorded)
	slices.Sort(members)
	if !slices.Equal(members, recorded) {
		t.Fatalf("boat index holds %v, want the recorded %v (refused adds leave nothing)", members, recorded)
	}
	per := map[string]int{}
	for _, v := range rdb.HVals(ctx, l.Sessions("ann")).Val() {
		p, _, _ := ParseValue(v)
		per[p]++
	}
	if per["ios"] > 3 || per["web"] > 3 {
		t.Fatalf("per platform %v, want at most 3 each", per)
	}
	// The per-platform cap alone.
	for i := range 4 {
		_, err := s.Add(ctx, "bob", Session{Sid: fmt.Sprint(i), Platform: "ios", BoatID: "b1"}, Caps{PerPlatform: 3}, false)
		var le *LimitError
		if i < 3 && err != nil || i == 3 && (!errors.As(err, &le) || !le.Platform || le.Have != 3) {
			t.Fatalf("add %d of bob: %v", i, err)
		}
	}
	// An existing sid is written again whatever the caps.
	if _, err := s.Add(ctx, "bob", Session{Sid: "0", Platform: "ios", BoatID: "b2"}, Caps{PerPlatform: 3}, false); err != nil {
		t.Fatalf("re-add of a recorded sid: %v", err)
	}
}

// With keepNewest, Add returns every session of the platform but the newest
// connect (the add that ran last, whatever the sids say), and leaves other
// platforms alone.
func testAddLosers(t *testing.T, rdb redis.UniversalClient) {
	s := New(rdb)
	ctx := context.Background()
	sids := func(ss []Session) []string {
		out := []string{}
		for _, x := range ss {
			out = append(out, x.Sid)
		}
		return out
	}
	steps := []struct {
		sid, platform string
		want          []string
	}{
		{"500", "ios", []string{}},
		{"90", "web", []string{}},               // another platform: no loser
		{"1000", "ios", []string{"500"}},        // the later connect wins
		{"999", "ios", []string{"500", "1000"}}, // a smaller sid connecting later wins too
		{"1001", "ios", []string{"500", "999", "1000"}},
		{"95", "web", []string{"90"}},
		{"1000", "ios", []string{"500", "999", "1000"}}, // a sid recorded again keeps its place
	}
	for _, st := range steps {
		losers, err := s.Add(ctx, "ann", Session{Sid: st.sid, Platform: st.platform, BoatID: "b1"}, Caps{}, true)
		if err != nil {
			t.Fatal(err)
		}
		if got := sids(losers); fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Fatalf("add %s/%s: losers %v, want %v", st.sid, st.platform, got, st.want)
		}
		for _, l := range losers {
			if l.Platform != st.platform || l.BoatID != "b1" {
				t.Fatalf("loser %+v: want platform %s on b1", l, st.platform)
			}
		}
	}
	// Losers stay recorded: their kickout removes them.
	if all, _ := s.List(ctx, "ann"); len(all) != 6 {
		t.Fatalf("%d sessions recorded, want 6", len(all))
	}
	// Without keepNewest nothing is returned.
	if losers, err := s.Add(ctx, "ann", Session{Sid: "2000", Platform: "ios", BoatID: "b1"}, Caps{}, false); err != nil || len(losers) != 0 {
		t.Fatalf("keep-all add: losers %v, %v", losers, err)
	}
}

// A device whose old session is half open reconnects through a boat whose
// clock is behind: its new sid is smaller, and it must still be the one
// kept. A session restored without a connect number (AddMany) is older than
// every connect; numbers of ended sessions do not pile up.
func testAddConnectOrder(t *testing.T, rdb redis.UniversalClient) {
	s := New(rdb)
	l := rkeys.Of(rdb)
	ctx := context.Background()
	add := func(sid, boat string) []string {
		t.Helper()
		losers, err := s.Add(ctx, "dan", Session{Sid: sid, Platform: "ios", BoatID: boat}, Caps{}, true)
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, x := range losers {
			out = append(out, x.Sid)
		}
		return out
	}
	// Boat A's clock is ahead of boat B's.
	if got := add("1733000000500000", "a"); len(got) != 0 {
		t.Fatalf("first connect: losers %v", got)
	}
	if got := add("1733000000100000", "b"); fmt.Sprint(got) != "[1733000000500000]" {
		t.Fatalf("reconnect through the boat behind: losers %v; want the old session only", got)
	}
	// The old session's kickout removes it; the next connect of the device
	// is still newer than the one on boat b.
	if err := s.Remove(ctx, "dan", Session{Sid: "1733000000500000", BoatID: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := add("1733000000050000", "a"); fmt.Sprint(got) != "[1733000000100000]" {
		t.Fatalf("third connect: losers %v; want the session on b", got)
	}
	if n := rdb.HLen(ctx, l.SessionOrder("dan")).Val(); n != 3 { // "#" and the two recorded
		t.Fatalf("order hash holds %d fields, want 3: %v", n, rdb.HGetAll(ctx, l.SessionOrder("dan")).Val())
	}
	if ttl := rdb.TTL(ctx, l.SessionOrder("dan")).Val(); ttl <= 0 || ttl > orderTTL {
		t.Fatalf("order TTL %v; want (0, %v]", ttl, orderTTL)
	}
	// A boat restores a session (no connect number) with a larger sid: the
	// next connect still wins over it.
	if err := s.AddMany(ctx, "c", []Ref{{UID: "dan", Sid: "1733000009000000"}}, []string{"ios"}); err != nil {
		t.Fatal(err)
	}
	if got := add("1733000000010000", "b"); fmt.Sprint(got) != "[1733000000050000 1733000000100000 1733000009000000]" {
		t.Fatalf("connect after a restored session: losers %v", got)
	}
	// Readers rank the sessions as the script does: the restored one (no
	// number) first, then by connect, so the last is the survivor.
	order, err := s.ConnectOrder(ctx, "dan")
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 {
		t.Fatalf("connect order %v, want the three numbered sessions and no counter", order)
	}
	all, err := s.List(ctx, "dan")
	if err != nil {
		t.Fatal(err)
	}
	sids := make([]string, len(all))
	for i, x := range all {
		sids[i] = x.Sid
	}
	slices.SortStableFunc(sids, func(a, b string) int {
		if OlderConnect(order, a, b) {
			return -1
		}
		if OlderConnect(order, b, a) {
			return 1
		}
		return 0
	})
	if want := "[1733000009000000 1733000000100000 1733000000050000 1733000000010000]"; fmt.Sprint(sids) != want {
		t.Fatalf("by connect: %v, want %s", sids, want)
	}
}

// Racing adds of one uid and platform: once every add returned, exactly one
// sid was named a loser by no add: the survivor.
func testAddRaceKeepsOnlyNewest(t *testing.T, rdb redis.UniversalClient) {
	s := New(rdb)
	ctx := context.Background()
	for round := range 50 {
		uid := fmt.Sprint("u", round)
		const n = 8
		var mu sync.Mutex
		lost := map[string]bool{}
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				losers, err := s.Add(ctx, uid, Session{Sid: fmt.Sprint(1000 + (i*7)%n), Platform: "ios", BoatID: "b1"}, Caps{}, true)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, l := range losers {
					lost[l.Sid] = true
				}
			}()
		}
		wg.Wait()
		if len(lost) != n-1 {
			t.Fatalf("round %d: losers %v; want every sid but one", round, lost)
		}
	}
}

// ResetBoat removes every session of the boat, of 300 users spread over
// the slots (and masters) of a cluster, and nothing of another boat.
func testResetBoat(t *testing.T, rdb redis.UniversalClient) {
	l := rkeys.Of(rdb)
	s := New(rdb)
	ctx := context.Background()
	var refs []Ref
	var plats []string
	for i := range 1200 {
		refs = append(refs, Ref{UID: fmt.Sprint("u", i%300), Sid: fmt.Sprint(1000 + i)})
		plats = append(plats, "ios")
	}
	if err := s.AddMany(ctx, "old-boat", refs, plats); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(ctx, "u1", Session{Sid: "99999", Platform: "web", BoatID: "other"}, Caps{}, false); err != nil {
		t.Fatal(err)
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		masters := map[string]bool{}
		for i := range 300 {
			m, err := cc.MasterForKey(ctx, l.Sessions(fmt.Sprint("u", i)))
			if err != nil {
				t.Fatal(err)
			}
			masters[m.Options().Addr] = true
		}
		if len(masters) != 3 {
			t.Fatalf("300 users' hashes on %d masters, want all 3", len(masters))
		}
	}
	n, err := s.ResetBoat(ctx, "old-boat")
	if err != nil || n != 1200 {
		t.Fatalf("ResetBoat = %d, %v; want 1200", n, err)
	}
	for i := range 300 {
		uid := fmt.Sprint("u", i)
		all, err := s.List(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 && (len(all) != 1 || all[0].BoatID != "other") || i != 1 && len(all) != 0 {
			t.Fatalf("%s's sessions after the reset: %+v, want only the other boat's", uid, all)
		}
	}
	if rdb.Exists(ctx, l.Sessions("u2"), l.BoatSessions("old-boat")).Val() != 0 {
		t.Fatal("u2's hash or the boat's index still exists")
	}
}

// ScanBoat pages through a boat's index: every session once, only its own.
func testScanBoat(t *testing.T, rdb redis.UniversalClient) {
	s := New(rdb)
	ctx := context.Background()
	var refs []Ref
	var plats []string
	for i := range 1100 {
		refs = append(refs, Ref{UID: fmt.Sprint("u", i%70), Sid: fmt.Sprint(5000 + i)})
		plats = append(plats, "web")
	}
	if err := s.AddMany(ctx, "b1", refs, plats); err != nil {
		t.Fatal(err)
	}
	if err := s.AddMany(ctx, "b2", []Ref{{UID: "x", Sid: "1"}}, []string{"ios"}); err != nil {
		t.Fatal(err)
	}
	seen := map[Ref]int{}
	var cursor uint64
	for {
		page, next, err := s.ScanBoat(ctx, "b1", cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range page {
			seen[ref]++
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if len(seen) != len(refs) {
		t.Fatalf("scanned %d sessions, want %d", len(seen), len(refs))
	}
	for _, ref := range refs {
		ref.BoatID = "b1"
		if seen[ref] == 0 {
			t.Fatalf("%+v not scanned", ref)
		}
	}
}

// A session Add recorded is in its boat's index, so a reset of the boat
// removes it; a session refused at a cap is recorded nowhere. On a cluster
// the index member is added by its own SADD before the script: without it
// the reset would leave the session behind.
func testIndexBeforeSession(t *testing.T, rdb redis.UniversalClient) {
	l := rkeys.Of(rdb)
	s := New(rdb)
	ctx := context.Background()
	caps := Caps{PerUID: 1}
	if _, err := s.Add(ctx, "ann", Session{Sid: "1", Platform: "ios", BoatID: "b1"}, caps, false); err != nil {
		t.Fatal(err)
	}
	_, err := s.Add(ctx, "ann", Session{Sid: "2", Platform: "ios", BoatID: "b1"}, caps, false)
	if le := (*LimitError)(nil); !errors.As(err, &le) {
		t.Fatalf("add over the cap: %v, want a *LimitError", err)
	}
	if rdb.HExists(ctx, l.Sessions("ann"), "2").Val() {
		t.Fatal("a refused add left a hash entry")
	}
	if m := rdb.SMembers(ctx, l.BoatSessions("b1")).Val(); !slices.Equal(m, []string{"ann 1"}) {
		t.Fatalf("boat index holds %v, want [ann 1]", m)
	}
	if n, err := s.ResetBoat(ctx, "b1"); err != nil || n != 1 {
		t.Fatalf("ResetBoat = %d, %v; want 1", n, err)
	}
	if all, err := s.List(ctx, "ann"); err != nil || len(all) != 0 {
		t.Fatalf("sessions after the boat's reset: %+v, %v; want none", all, err)
	}
}

// faultHook fails every pipeline (on a cluster, every node's part of one)
// holding a command named fail, without sending it: a connection lost
// before the pipeline went out, or a cluster node that cannot be reached.
type faultHook struct {
	mu   sync.Mutex
	fail string
}

var errInjected = errors.New("injected fault")

func (h *faultHook) set(name string) {
	h.mu.Lock()
	h.fail = name
	h.mu.Unlock()
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		fail := h.fail
		h.mu.Unlock()
		if fail == "" || !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == fail }) {
			return next(ctx, cmds)
		}
		for _, c := range cmds {
			c.SetErr(errInjected)
		}
		return errInjected
	}
}

// addFaults puts a faultHook on rdb, or on every master of a cluster (a
// hook on a cluster client sees a pipeline before it is split by node).
func addFaults(t *testing.T, rdb redis.UniversalClient) *faultHook {
	t.Helper()
	h := &faultHook{}
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		rdb.AddHook(h)
		return h
	}
	err := cc.ForEachMaster(context.Background(), func(_ context.Context, m *redis.Client) error {
		m.AddHook(h)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// usersAwayFrom returns n uids whose session hashes are served by another
// master than key (any n uids on a standalone server): a pipeline of their
// commands and key's is split into parts that succeed or fail apart.
func usersAwayFrom(t *testing.T, rdb redis.UniversalClient, key string, n int) []string {
	t.Helper()
	var uids []string
	cc, ok := rdb.(*redis.ClusterClient)
	var keyNode string
	if ok {
		m, err := cc.MasterForKey(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		keyNode = m.Options().Addr
	}
	for i := 0; len(uids) < n; i++ {
		uid := fmt.Sprint("u", i)
		if ok {
			m, err := cc.MasterForKey(context.Background(), rkeys.Of(rdb).Sessions(uid))
			if err != nil {
				t.Fatal(err)
			}
			if m.Options().Addr == keyNode {
				continue
			}
		}
		uids = append(uids, uid)
	}
	return uids
}

// A write of many users' sessions that fails leaves the boat's index a
// superset of what is recorded for the boat, so the boat's retried reset
// clears all: AddMany writes no hash entry unless the index member is in,
// RemoveMany and ResetBoat drop no member whose entry may be left. On a
// cluster the index and the users' hashes are on different masters, whose
// parts of a pipeline fail apart.
func testFailedWritesKeepIndexSuperset(t *testing.T, rdb redis.UniversalClient) {
	l := rkeys.Of(rdb)
	s := New(rdb)
	faults := addFaults(t, rdb)
	ctx := context.Background()
	index := l.BoatSessions("b1")
	uids := usersAwayFrom(t, rdb, index, 20)
	refs := make([]Ref, len(uids))
	plats := make([]string, len(uids))
	var members []string
	for i, uid := range uids {
		refs[i] = Ref{UID: uid, Sid: fmt.Sprint(100 + i), BoatID: "b1"}
		plats[i] = "ios"
		members = append(members, boatMember(uid, refs[i].Sid))
	}
	slices.Sort(members)
	recorded := func() int {
		n := 0
		for _, r := range refs {
			if rdb.HExists(ctx, l.Sessions(r.UID), r.Sid).Val() {
				n++
			}
		}
		return n
	}
	indexed := func() []string {
		m := rdb.SMembers(ctx, index).Val()
		slices.Sort(m)
		return m
	}

	faults.set("sadd")
	if err := s.AddMany(ctx, "b1", refs, plats); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("AddMany with its SADD failing: %v, want ErrUnavailable", err)
	}
	if n := recorded(); n != 0 {
		t.Fatalf("AddMany whose index member was not added recorded %d sessions", n)
	}
	faults.set("")
	if err := s.AddMany(ctx, "b1", refs, plats); err != nil {
		t.Fatal(err)
	}

	faults.set("hdel")
	if _, err := s.RemoveMany(ctx, refs); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("RemoveMany with its HDELs failing: %v, want ErrUnavailable", err)
	}
	if got := indexed(); !slices.Equal(got, members) {
		t.Fatalf("RemoveMany whose HDELs failed left the index %v, want every member %v", got, members)
	}
	if _, err := s.ResetBoat(ctx, "b1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ResetBoat with its HDELs failing: %v, want ErrUnavailable", err)
	}
	if got := indexed(); !slices.Equal(got, members) {
		t.Fatalf("ResetBoat whose HDELs failed left the index %v, want every member %v", got, members)
	}

	faults.set("")
	if n, err := s.ResetBoat(ctx, "b1"); err != nil || n != len(refs) {
		t.Fatalf("retried ResetBoat = %d, %v; want %d", n, err, len(refs))
	}
	if n := recorded(); n != 0 {
		t.Fatalf("%d sessions left after the retried reset", n)
	}
	if got := indexed(); len(got) != 0 {
		t.Fatalf("index %v left after the retried reset", got)
	}
}

func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	s := New(r.Client(t))
	r.Stop()
	ctx := context.Background()
	if _, err := s.List(ctx, "alice"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("List with Redis down: %v, want ErrUnavailable", err)
	}
	if _, _, err := s.ScanBoat(ctx, "b1", 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ScanBoat with Redis down: %v, want ErrUnavailable", err)
	}
}

func TestLess(t *testing.T) {
	t.Parallel()
	cases := []struct {
		a, b string
		want bool
	}{{"9", "10", true}, {"10", "9", false}, {"123", "124", true}, {"124", "124", false}}
	for _, c := range cases {
		if got := Less(c.a, c.b); got != c.want {
			t.Errorf("Less(%q,%q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// A value needs both a platform and a boat; boat ids may hold '-'.
func TestParseValue(t *testing.T) {
	t.Parallel()
	cases := []struct {
		v, platform, boat string
		ok                bool
	}{
		{"ios-b1", "ios", "b1", true},
		{"web-b-2", "web", "b-2", true},
		{"-b1", "", "b1", false},
		{"ios-", "ios", "", false},
		{"ios", "ios", "", false},
		{"", "", "", false},
	}
	for _, c := range cases {
		p, b, ok := ParseValue(c.v)
		if p != c.platform || b != c.boat || ok != c.ok {
			t.Errorf("ParseValue(%q) = %q, %q, %v; want %q, %q, %v", c.v, p, b, ok, c.platform, c.boat, c.ok)
		}
	}
}
