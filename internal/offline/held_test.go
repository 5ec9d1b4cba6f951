package offline_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/offline"
)

// Held answers, in the order asked, which seqs the user's platform list
// holds: not those of another platform or user, not those ACKed.
func testHeld(t *testing.T, e *env) {
	ctx := t.Context()
	ts := time.Now().UnixMilli()
	mustWrite(t, e, "u", 4,
		item("ios", hour, 0, 1, ts, "a"), item("ios", hour, 0, 2, ts+1, "b"),
		item("ios", hour, 0, 3, ts+2, "c"), item("android", hour, 0, 4, ts, "d"))
	mustWrite(t, e, "v", 1, item("ios", hour, 0, 5, ts, "e"))
	if err := e.store.Delete(ctx, "u", "ios", []int64{2}); err != nil {
		t.Fatal(err)
	}
	held, err := e.store.Held(ctx, "u", "ios", []int64{3, 9, 2, 4, 5, 1})
	if err != nil || !slices.Equal(held, []int64{3, 1}) {
		t.Fatalf("Held = %v, %v; want [3 1]", held, err)
	}
	if held, err := e.store.Held(ctx, "u", "ios", nil); err != nil || held != nil {
		t.Fatalf("Held of no seqs = %v, %v; want nothing", held, err)
	}
	for _, c := range []struct{ uid, platform string }{{"", "ios"}, {"u", ""}} {
		if _, err := e.store.Held(ctx, c.uid, c.platform, []int64{1}); !errors.Is(err, offline.ErrInvalid) {
			t.Errorf("Held(%q, %q): %v, want ErrInvalid", c.uid, c.platform, err)
		}
	}
}

// A Read with no limit returns a page of PageSize, the oldest first.
func testDefaultPage(t *testing.T, e *env) {
	ts := time.Now().UnixMilli()
	var items []offline.Item
	var want []int64
	for seq := int64(1); seq <= offline.PageSize+1; seq++ {
		items = append(items, item("ios", hour, 0, seq, ts+seq, "b"))
		if seq <= offline.PageSize {
			want = append(want, seq)
		}
	}
	mustWrite(t, e, "u", len(items), items...)
	wantRead(t, e, "u", "ios", time.Now(), hour, 0, want...)
}
