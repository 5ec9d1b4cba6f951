package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/gomsg/gomsg/internal/testutil"
)

func TestStoreLayoutAndOrder(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := r.Client(t)
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
	// Seed 000's layout, checked with real commands.
	if typ := rdb.Type(ctx, "msg/u:alice/ss").Val(); typ != "hash" {
		t.Fatalf("TYPE = %q, want hash", typ)
	}
	if v := rdb.HGet(ctx, "msg/u:alice/ss", "900").Val(); v != "ios-b1" {
		t.Fatalf("HGET = %q, want ios-b1", v)
	}
	got, ok, err := s.Get(ctx, "alice", "1000")
	if err != nil || !ok || got.BoatID != "b-2" {
		t.Fatalf("Get = %+v %v %v", got, ok, err)
	}
	if n := rdb.SCard(ctx, "msg/b:b-2/ss").Val(); n != 1 {
		t.Fatalf("boat index of b-2 holds %d, want 1", n)
	}
	if err := s.Remove(ctx, "alice", Session{Sid: "900", BoatID: "b1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveMany(ctx, []Ref{{"alice", "1000", "b-2"}, {"bob", "1", "b1"}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"msg/b:b1/ss", "msg/b:b-2/ss"} {
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Fatalf("boat index %s left after every session was removed", k)
		}
	}
	if n := rdb.Exists(ctx, "msg/u:alice/ss").Val(); n != 0 {
		t.Fatalf("hash still exists after removing every session")
	}
	if _, ok, _ := s.Get(ctx, "alice", "900"); ok {
		t.Fatal("removed session still found")
	}
}

func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	s := New(r.Client(t))
	r.Stop()
	_, err := s.List(context.Background(), "alice")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
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

func TestResetBoat(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := r.Client(t)
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
	n, err := s.ResetBoat(ctx, "old-boat")
	if err != nil || n != 1200 {
		t.Fatalf("ResetBoat = %d, %v; want 1200", n, err)
	}
	all, _ := s.List(ctx, "u1")
	if len(all) != 1 || all[0].BoatID != "other" {
		t.Fatalf("u1 sessions after reset = %+v, want only the other boat's", all)
	}
	if rdb.Exists(ctx, "msg/u:u2/ss").Val() != 0 {
		t.Fatal("u2's hash still exists")
	}
}

// Caps hold under concurrent adds: the check and the write are one script.
func TestAddCaps(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	rdb := r.Client(t)
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
	if n := rdb.HLen(ctx, Key("ann")).Val(); n != 5 || ok != 5 || limited != 45 {
		t.Fatalf("hash holds %d, %d added, %d refused; want 5, 5, 45", n, ok, limited)
	}
	if n := rdb.SCard(ctx, BoatKey("b1")).Val(); n != 5 {
		t.Fatalf("boat index holds %d, want 5 (refused adds write nothing)", n)
	}
	per := map[string]int{}
	for _, v := range rdb.HVals(ctx, Key("ann")).Val() {
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

// With keepNewest, Add returns every session of the platform but the newest,
// whatever the order of the adds, and leaves other platforms alone.
func TestAddLosers(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	s := New(r.Client(t))
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
		{"90", "web", []string{}},              // another platform: no loser
		{"1000", "ios", []string{"500"}},       // newer (longer): the older goes
		{"999", "ios", []string{"500", "999"}}, // older than 1000: itself too
		{"1001", "ios", []string{"500", "999", "1000"}},
		{"95", "web", []string{"90"}},
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

// Racing adds of one uid and platform: once every add returned, the sids no
// add named a loser are exactly the newest one, and no add named it.
func TestAddRaceKeepsOnlyNewest(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	s := New(r.Client(t))
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
		newest := fmt.Sprint(1000 + n - 1)
		if lost[newest] || len(lost) != n-1 {
			t.Fatalf("round %d: losers %v; want every sid but %s", round, lost, newest)
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

// ScanBoat pages through a boat's index: every session once, only its own.
func TestScanBoat(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedis(t)
	s := New(r.Client(t))
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
	r.Stop()
	if _, _, err := s.ScanBoat(ctx, "b1", 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("scan with Redis down: %v, want ErrUnavailable", err)
	}
}
