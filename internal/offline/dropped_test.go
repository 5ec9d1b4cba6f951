package offline_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/offline"
)

// WriteDropping names what the lists gave up unread: members a write's
// clean found expired, and those trimmed to the maximum (not one an ACK
// removed first); Expire names the members it dropped.
func testDroppedReported(t *testing.T, e *env) {
	ctx := t.Context()
	now := time.Now()
	ms := now.UnixMilli()
	mustWrite(t, e, "u", 3,
		item("ios", 2*hour, 2, 51, ms-hourMs-60_000, "older than an hour"),
		item("ios", 2*hour, 2, 52, ms-1000, "b"),
		item("android", hour, 0, 52, ms-1000, "b"))
	// ios now keeps 1 hour and 2 members: 51 expired; 52, 53, 54 are one too
	// many, and 52 is the oldest.
	_, dropped, err := e.store.WriteDropping(ctx, "u", []offline.Item{
		item("ios", hour, 2, 53, ms-500, "c"), item("ios", hour, 2, 54, ms, "d")})
	if err != nil {
		t.Fatal(err)
	}
	want := []offline.Dropped{{Platform: "ios", Expired: []int64{51}}, {Platform: "ios", Trimmed: []int64{52}}}
	if !reflect.DeepEqual(dropped, want) {
		t.Fatalf("dropped %+v, want %+v", dropped, want)
	}
	wantMembers(t, e, e.keys.Offline("u", "ios"), "53", "54")

	if err := e.store.Delete(ctx, "u", "ios", []int64{53}); err != nil {
		t.Fatal(err)
	}
	_, dropped, err = e.store.WriteDropping(ctx, "u", []offline.Item{item("ios", hour, 2, 55, ms, "e")})
	if err != nil || dropped != nil {
		t.Fatalf("write within the limit dropped %+v, %v; want nothing", dropped, err)
	}

	expired, err := e.store.Expire(ctx, "u", "android", now.Add(2*time.Hour), hour)
	if err != nil || !reflect.DeepEqual(expired, []int64{52}) {
		t.Fatalf("Expire = %v, %v; want [52]", expired, err)
	}
	if expired, err := e.store.Expire(ctx, "u", "android", now.Add(2*time.Hour), hour); err != nil || expired != nil {
		t.Fatalf("Expire again = %v, %v; want nothing", expired, err)
	}
}
