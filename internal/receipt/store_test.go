package receipt_test

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

	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

const day = 24 * time.Hour

// downRedis returns a client of a Redis that is down: a loopback port
// nothing listens on, so every dial is refused at once, tried once.
func downRedis(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t))),
		MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore returns a store on a database of the test binary's shared
// redis-server.
func newStore(t *testing.T) *receipt.Store {
	t.Helper()
	return receipt.NewStore(testutil.SharedRedis(t))
}

func write(t *testing.T, s *receipt.Store, retention time.Duration, rs ...*receiptpb.Receipt) {
	t.Helper()
	if err := s.Write(context.Background(), retention, rs); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, s *receipt.Store, seq int64, uid string, size int, token string) receipt.Page {
	t.Helper()
	p, err := s.Get(context.Background(), seq, uid, size, token)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// states lists a target's steps as "STATE@at".
func states(t *pushpb.DeliveryTarget) string {
	var out []string
	for _, s := range t.GetSteps() {
		out = append(out, fmt.Sprintf("%s@%d", s.GetState(), s.GetAt()))
	}
	return strings.Join(out, " ")
}

// The same step written twice, even with another time, is one step (the
// later write's); steps that differ in state, sid or attempt are kept apart.
func TestWriteIsIdempotentPerStep(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	acc := &receiptpb.Receipt{Seq: 7, Uid: "ann", Platform: "ios", State: receiptpb.State_ACCEPTED, At: 100}
	del := &receiptpb.Receipt{Seq: 7, Uid: "ann", Platform: "ios", State: receiptpb.State_DELIVERED, At: 110, Sid: "s1", BoatId: "b1"}
	write(t, s, day, acc, del)
	write(t, s, day, acc) // the same record again
	again := &receiptpb.Receipt{Seq: 7, Uid: "ann", Platform: "ios", State: receiptpb.State_DELIVERED, At: 120, Sid: "s1", BoatId: "b1", Acked: true}
	write(t, s, day, again) // the same step handled again
	write(t, s, day, &receiptpb.Receipt{Seq: 7, Uid: "ann", Platform: "ios", State: receiptpb.State_DELIVERED, At: 130, Sid: "s2", BoatId: "b2"})
	write(t, s, day, &receiptpb.Receipt{Seq: 7, Uid: "ann", Platform: "ios", State: receiptpb.State_RETRIED, At: 140, Attempt: 1},
		&receiptpb.Receipt{Seq: 7, Uid: "ann", Platform: "ios", State: receiptpb.State_RETRIED, At: 150, Attempt: 2},
		&receiptpb.Receipt{Seq: 7, Uid: "ann", Platform: "ios", State: receiptpb.State_RETRIED, At: 150, Attempt: 2})
	p := get(t, s, 7, "", 10, "")
	if len(p.Targets) != 1 {
		t.Fatalf("%d targets, want 1: %v", len(p.Targets), p.Targets)
	}
	got := states(p.Targets[0])
	if want := "ACCEPTED@100 DELIVERED@120 DELIVERED@130 RETRIED@140 RETRIED@150"; got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
	if st := p.Targets[0].Steps[1]; !st.Acked || st.Sid != "s1" || st.BoatId != "b1" {
		t.Fatalf("the step written again: %v, want the later write (acked, s1 on b1)", st)
	}
	if p.Next != "" {
		t.Fatalf("next page token %q on the only page", p.Next)
	}
}

// Steps come oldest first whatever order they were written in, ties in
// state order; a target's state is its latest step's; targets are sorted by
// uid, then platform.
func TestStepsOrderAndLatestState(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	r := func(uid, platform string, st receiptpb.State, at int64) *receiptpb.Receipt {
		return &receiptpb.Receipt{Seq: 9, Uid: uid, Platform: platform, State: st, At: at}
	}
	write(t, s, day,
		r("bob", "web", receiptpb.State_NOTIFIED, 300),
		r("bob", "web", receiptpb.State_STORED, 200),
		r("al", "web", receiptpb.State_DROPPED, 50),
		r("bob", "web", receiptpb.State_ACCEPTED, 100),
		r("bob", "ios", receiptpb.State_REPLAYED, 500),
		r("bob", "ios", receiptpb.State_STORED, 500), // same time: state order
		r("bob", "ios", receiptpb.State_ACCEPTED, 100),
		r("al", "web", receiptpb.State_ACCEPTED, 50),
		r("alice", "android", receiptpb.State_ACCEPTED, 10),
		// Same time again, in the other order of their fields' bytes ("10" < "2").
		r("cat", "ios", receiptpb.State_NOTIFY_CANCELLED, 5),
		r("cat", "ios", receiptpb.State_DELIVERED, 5),
		r("cat", "ios", receiptpb.State_ACCEPTED, 1),
		// Time order is not state order.
		r("dan", "web", receiptpb.State_DELIVERED, 200),
		r("dan", "web", receiptpb.State_RETRIED, 100),
		r("dan", "web", receiptpb.State_ACCEPTED, 1),
	)
	p := get(t, s, 9, "", 100, "")
	var got []string
	for _, t := range p.Targets {
		got = append(got, fmt.Sprintf("%s/%s %s: %s", t.Uid, t.Platform, t.State, states(t)))
	}
	want := []string{
		"al/web DROPPED: ACCEPTED@50 DROPPED@50",
		"alice/android ACCEPTED: ACCEPTED@10",
		"bob/ios REPLAYED: ACCEPTED@100 STORED@500 REPLAYED@500",
		"bob/web NOTIFIED: ACCEPTED@100 STORED@200 NOTIFIED@300",
		"cat/ios NOTIFY_CANCELLED: ACCEPTED@1 DELIVERED@5 NOTIFY_CANCELLED@5",
		"dan/web DELIVERED: ACCEPTED@1 RETRIED@100 DELIVERED@200",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("targets:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Only bob's; "al" does not match "alice".
	p = get(t, s, 9, "bob", 100, "")
	if len(p.Targets) != 2 || p.Targets[0].Uid != "bob" || p.Targets[1].Uid != "bob" {
		t.Fatalf("uid bob: %v", p.Targets)
	}
	if p = get(t, s, 9, "al", 100, ""); len(p.Targets) != 1 || p.Targets[0].Uid != "al" {
		t.Fatalf("uid al: %v", p.Targets)
	}
	if p = get(t, s, 10, "", 100, ""); len(p.Targets) != 0 {
		t.Fatalf("seq 10 never written: %v", p.Targets)
	}
}

// A push to 2,500 targets with 1 to 4 steps each, read 100 targets a page:
// 25 pages, every target exactly once with all its steps, in order across
// pages; pages of a uid's targets likewise.
func TestPagingEveryTargetOnce(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	const users, size = 1250, 100
	platforms := []string{"ios", "web"}
	var rs []*receiptpb.Receipt
	steps := map[string]int{}
	for i := range users {
		for j, p := range platforms {
			n := 1 + (i+j)%4
			key := fmt.Sprintf("u%04d/%s", i, p)
			steps[key] = n
			for k := range n {
				rs = append(rs, &receiptpb.Receipt{Seq: 42, Uid: fmt.Sprintf("u%04d", i), Platform: p,
					State: receiptpb.State_RETRIED, Attempt: int32(k + 1), At: int64(1000 + k)})
			}
		}
	}
	for chunk := range slices.Chunk(rs, 1000) {
		write(t, s, day, chunk...)
	}
	var seen []string
	token, pages := "", 0
	for {
		p := get(t, s, 42, "", size, token)
		pages++
		if len(p.Targets) != size {
			t.Fatalf("page %d has %d targets, want %d", pages, len(p.Targets), size)
		}
		for _, tg := range p.Targets {
			key := tg.Uid + "/" + tg.Platform
			if len(tg.Steps) != steps[key] {
				t.Fatalf("%s: %d steps, want %d", key, len(tg.Steps), steps[key])
			}
			seen = append(seen, key)
		}
		if p.Next == "" {
			break
		}
		token = p.Next
		if pages > 100 {
			t.Fatal("paging does not end")
		}
	}
	if pages != 25 || len(seen) != 2*users {
		t.Fatalf("%d pages, %d targets; want 25 pages, %d targets", pages, len(seen), 2*users)
	}
	if !slices.IsSorted(seen) {
		t.Fatal("targets are not sorted across pages")
	}
	if len(slices.Compact(slices.Clone(seen))) != len(seen) {
		t.Fatal("a target came twice")
	}
	// One uid, a page of one target each.
	p := get(t, s, 42, "u0007", 1, "")
	if len(p.Targets) != 1 || p.Targets[0].Platform != "ios" || p.Next == "" {
		t.Fatalf("u0007 first page: %v next %q", p.Targets, p.Next)
	}
	p = get(t, s, 42, "u0007", 1, p.Next)
	if len(p.Targets) != 1 || p.Targets[0].Platform != "web" || p.Next != "" {
		t.Fatalf("u0007 second page: %v next %q", p.Targets, p.Next)
	}
}

// A page token is good only for the seq (and uid) it was handed out for.
func TestPageTokenChecked(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	for _, uid := range []string{"a", "b", "c"} {
		write(t, s, day, &receiptpb.Receipt{Seq: 5, Uid: uid, Platform: "web", State: receiptpb.State_ACCEPTED, At: 1},
			&receiptpb.Receipt{Seq: 6, Uid: uid, Platform: "web", State: receiptpb.State_ACCEPTED, At: 1})
	}
	p := get(t, s, 5, "", 1, "")
	if p.Next == "" {
		t.Fatal("no next page token")
	}
	for name, c := range map[string]struct {
		seq        int64
		uid, token string
	}{
		"other seq":  {6, "", p.Next},
		"other uid":  {5, "b", p.Next},
		"not base64": {5, "", "!!"},
		"garbage":    {5, "", "aGVsbG8"},
	} {
		if _, err := s.Get(context.Background(), c.seq, c.uid, 1, c.token); !errors.Is(err, receipt.ErrPageToken) {
			t.Errorf("%s: %v, want ErrPageToken", name, err)
		}
	}
	if p = get(t, s, 5, "", 1, p.Next); len(p.Targets) != 1 || p.Targets[0].Uid != "b" {
		t.Fatalf("second page: %v", p.Targets)
	}
}

// Records expire retention after the last write to the seq.
func TestRecordsExpire(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	write(t, s, 300*time.Millisecond, &receiptpb.Receipt{Seq: 3, Uid: "a", Platform: "web", State: receiptpb.State_ACCEPTED, At: 1})
	if p := get(t, s, 3, "", 10, ""); len(p.Targets) != 1 {
		t.Fatalf("right after the write: %v", p.Targets)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if p := get(t, s, 3, "", 10, ""); len(p.Targets) != 0 {
			return fmt.Errorf("still %d targets", len(p.Targets))
		}
		return nil
	})
}

// A long detail is cut at a rune boundary, one of MaxDetailBytes is kept
// whole; names of MaxNameBytes are kept; Check refuses what the store does
// not keep.
func TestBounds(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	long := strings.Repeat("é", receipt.MaxDetailBytes) // 2 bytes a rune
	write(t, s, day, &receiptpb.Receipt{Seq: 4, Uid: "a", Platform: "ios", State: receiptpb.State_DEAD_LETTERED, At: 1, Detail: "x" + long})
	d := get(t, s, 4, "", 10, "").Targets[0].Steps[0].Detail
	if len(d) > receipt.MaxDetailBytes || len(d) < receipt.MaxDetailBytes-1 || !strings.HasPrefix(d, "xé") || strings.ToValidUTF8(d, "?") != d {
		t.Fatalf("detail of %d bytes kept as %d bytes %q…", len(long)+1, len(d), d[:8])
	}
	name := func(c string) string { return strings.Repeat(c, receipt.MaxNameBytes) }
	full := &receiptpb.Receipt{Seq: 5, Uid: name("u"), Platform: name("p"), State: receiptpb.State_DELIVERED, At: 1,
		Sid: name("s"), BoatId: name("b"), Detail: name("d")[:receipt.MaxDetailBytes]}
	if err := receipt.Check(full); err != nil {
		t.Fatalf("names of %d bytes refused: %v", receipt.MaxNameBytes, err)
	}
	write(t, s, day, full)
	tg := get(t, s, 5, "", 10, "").Targets[0]
	if st := tg.GetSteps()[0]; tg.GetUid() != full.Uid || st.GetSid() != full.Sid || st.GetBoatId() != full.BoatId || st.GetDetail() != full.Detail {
		t.Fatalf("names of %d bytes and a detail of %d stored as uid %d, sid %d, boat %d, detail %d bytes", receipt.MaxNameBytes,
			receipt.MaxDetailBytes, len(tg.GetUid()), len(st.GetSid()), len(st.GetBoatId()), len(st.GetDetail()))
	}
	for name, rc := range map[string]*receiptpb.Receipt{
		"no seq":      {Uid: "a", Platform: "ios", State: receiptpb.State_ACCEPTED},
		"no uid":      {Seq: 1, Platform: "ios", State: receiptpb.State_ACCEPTED},
		"no platform": {Seq: 1, Uid: "a", State: receiptpb.State_ACCEPTED},
		"no state":    {Seq: 1, Uid: "a", Platform: "ios"},
		"state 99":    {Seq: 1, Uid: "a", Platform: "ios", State: 99},
		"NUL in uid":  {Seq: 1, Uid: "a\x00b", Platform: "ios", State: receiptpb.State_ACCEPTED},
		"NUL first":   {Seq: 1, Uid: "a", Platform: "\x00ios", State: receiptpb.State_ACCEPTED},
		"long sid":    {Seq: 1, Uid: "a", Platform: "ios", State: receiptpb.State_ACCEPTED, Sid: strings.Repeat("s", receipt.MaxNameBytes+1)},
	} {
		if receipt.Check(rc) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := receipt.Check(&receiptpb.Receipt{Seq: 1, Uid: "a", Platform: "ios", State: receiptpb.State_NOTIFY_CANCELLED}); err != nil {
		t.Errorf("a good receipt refused: %v", err)
	}
}

// With Redis down, reads and writes fail with ErrUnavailable.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	s := receipt.NewStore(downRedis(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Write(ctx, day, []*receiptpb.Receipt{{Seq: 1, Uid: "a", Platform: "ios", State: receiptpb.State_ACCEPTED}}); !errors.Is(err, receipt.ErrUnavailable) {
		t.Errorf("write: %v, want ErrUnavailable", err)
	}
	if _, err := s.Get(ctx, 1, "", 10, ""); !errors.Is(err, receipt.ErrUnavailable) {
		t.Errorf("get: %v, want ErrUnavailable", err)
	}
}

// Targets with more steps than one read of the index takes (page size 2:
// reads of 16 fields): each page still holds every step of its targets,
// once.
func TestPagingTargetsWithManySteps(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	var rs []*receiptpb.Receipt
	for i := range 9 {
		for k := range 13 {
			rs = append(rs, &receiptpb.Receipt{Seq: 8, Uid: fmt.Sprintf("u%d", i), Platform: "ios",
				State: receiptpb.State_RETRIED, Attempt: int32(k + 1), At: int64(k)})
		}
	}
	write(t, s, day, rs...)
	token, n := "", 0
	for {
		p := get(t, s, 8, "", 2, token)
		for _, tg := range p.Targets {
			if tg.Uid != fmt.Sprintf("u%d", n) || len(tg.Steps) != 13 {
				t.Fatalf("target %d: %s with %d steps, want u%d with 13", n, tg.Uid, len(tg.Steps), n)
			}
			for k, st := range tg.Steps {
				if st.Attempt != int32(k+1) {
					t.Fatalf("%s step %d: attempt %d", tg.Uid, k, st.Attempt)
				}
			}
			n++
		}
		if token = p.Next; token == "" {
			break
		}
	}
	if n != 9 {
		t.Fatalf("%d targets, want 9", n)
	}
}
