package rkeys_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
)

// The standalone names, character for character: what a running cluster
// wrote under them must stay readable after an upgrade.
func TestStandaloneNames(t *testing.T) {
	l := rkeys.Standalone
	for got, want := range map[string]string{
		l.Sessions("alice"):       "msg/u:alice/ss",
		l.Devices("alice"):        "msg/u:alice/dv",
		l.Offline("alice", "ios"): "msg/u:alice/p:ios/oms",
		l.Tracked("alice", "ios"): "msg/u:alice/p:ios/rcp",
		l.Body("alice", 42):       "msg/om:42/m",
		l.Count("alice", 42):      "msg/om:42/n",
		l.BodyPrefix("alice"):     "msg/om:",
		l.BoatSessions("boat-1"):  "msg/b:boat-1/ss",
		l.Idempotency("order-7"):  "msg/push/idem:order-7",
		l.DeliverySteps(42):       "msg/dl:42/s",
		l.DeliveryIndex(42):       "msg/dl:42/t",
	} {
		if got != want {
			t.Errorf("standalone key %q, want %q", got, want)
		}
	}
	if rkeys.Of(redis.NewClient(&redis.Options{})).IsCluster() {
		t.Error("a *redis.Client got the cluster layout")
	}
	if !rkeys.Of(redis.NewClusterClient(&redis.ClusterOptions{})).IsCluster() {
		t.Error("a *redis.ClusterClient got the standalone layout")
	}
}

// Every key of one user hashes to one slot in the cluster layout, whatever
// the uid holds (braces included), as a real cluster node computes it; and
// users are spread, not all in one slot.
func TestClusterKeysOfAUserShareASlot(t *testing.T) {
	c := testutil.StartRedisCluster(t, 3, 0)
	l := rkeys.Cluster
	slots := map[int]bool{}
	for _, uid := range []string{"alice", "bob", "}x", "{", "}", "a{b}c", "{}", "user-0042", "名前"} {
		keys := []string{l.Sessions(uid), l.Devices(uid), l.Offline(uid, "ios"),
			l.Offline(uid, "web"), l.Body(uid, 1), l.Count(uid, 1), l.Body(uid, 1<<40), l.Tracked(uid, "ios")}
		want := c.KeySlot(t, keys[0])
		slots[want] = true
		for _, k := range keys[1:] {
			if got := c.KeySlot(t, k); got != want {
				t.Errorf("uid %q: key %q in slot %d, %q in slot %d", uid, keys[0], want, k, got)
			}
		}
	}
	if len(slots) < 3 {
		t.Errorf("9 users took only %d slots: the tag does not depend on the uid", len(slots))
	}
	// A seq's two delivery keys share a slot too.
	for _, seq := range []int64{1, 42, 1 << 60} {
		if a, b := c.KeySlot(t, l.DeliverySteps(seq)), c.KeySlot(t, l.DeliveryIndex(seq)); a != b {
			t.Errorf("seq %d: delivery keys in slots %d and %d", seq, a, b)
		}
	}
}
