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

	if _, err := s.Add(ctx, "alice", Session{Sid: "900", Platform: "ios", BoatID: "b1"}, Caps{}); err != nil {
		t.Fatal(err)
	}
	all, err := s.Add(ctx, "alice", Session{Sid: "1000", Platform: "web", BoatID: "b-2"}, Caps{})
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
	if _, err := s.Add(ctx, "u1", Session{Sid: "99999", Platform: "web", BoatID: "other"}, Caps{}); err != nil {
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
			_, err := s.Add(ctx, "ann", Session{Sid: fmt.Sprint(1000 + i), Platform: platform, BoatID: "b1"}, caps)
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
		_, err := s.Add(ctx, "bob", Session{Sid: fmt.Sprint(i), Platform: "ios", BoatID: "b1"}, Caps{PerPlatform: 3})
		var le *LimitError
		if i < 3 && err != nil || i == 3 && (!errors.As(err, &le) || !le.Platform || le.Have != 3) {
			t.Fatalf("add %d of bob: %v", i, err)
		}
	}
	// An existing sid is written again whatever the caps.
	if _, err := s.Add(ctx, "bob", Session{Sid: "0", Platform: "ios", BoatID: "b2"}, Caps{PerPlatform: 3}); err != nil {
		t.Fatalf("re-add of a recorded sid: %v", err)
	}
}
