// Package rkeys names every key gomsg writes in Redis, in the two layouts it
// runs on.
//
// The standalone layout, for a Redis server:
//
//	msg/u:<uid>/ss                 hash  sessions of a user
//	msg/u:<uid>/so                 hash  connect order of a user's sessions
//	msg/u:<uid>/dv                 hash  device tokens of a user
//	msg/dt:<platform>/<provider>/<token>  string  the uid owning a device token
//	msg/u:<uid>/p:<platform>/oms   zset  offline seqs of a user on a platform
//	msg/om:<seq>/m                 string offline body, shared by every user list holding <seq>
//	msg/om:<seq>/n                 string how many user lists hold <seq>
//	msg/b:<boat>/ss                set   "<uid> <sid>" recorded for a boat (gomsg's addition)
//	msg/push/idem:<key>            string a Push idempotency key
//	msg/dl:<seq>/s                 hash  delivery steps of a seq (GetDelivery)
//	msg/dl:<seq>/t                 zset  the steps' fields, in order (GetDelivery's pages)
//	msg/nt:<shard>/due             zset  notify-if-unseen timer: entry → due (or lease end), ms
//	msg/nt:<shard>/pay             hash  notify-if-unseen timer: entry → its notifications
//	msg/nt:<shard>/idx             hash  notify-if-unseen timer: "<uid> <seq>" → entry
//	msg/dlq/handled                hash  dead letters redriven: "<partition>:<offset>" → dead_at ms
//	msg/dlq/purged                 string dead letters before this ms are purged
//
// Redis Cluster runs a script, a MULTI or a multi-key command only on keys of
// one hash slot. gomsg's atomic steps each concern one user: recording a
// session against the user's caps, registering a device token for a session,
// and the offline store's write, clean, read and delete. So in the cluster
// layout every key of a user carries the hash tag {u:<uid>}, which puts them
// all in one slot, and an offline body is kept per user:
//
//	msg/{u:<uid>}/ss
//	msg/{u:<uid>}/so
//	msg/{u:<uid>}/dv
//	msg/{u:<uid>}/p:<platform>/oms
//	msg/{u:<uid>}/om:<seq>/m       body, shared by the user's platform lists only
//	msg/{u:<uid>}/om:<seq>/n       how many of the user's platform lists hold <seq>
//	msg/b:<boat>/ss                (no tag: written on its own, see session.Store.Add)
//	msg/dt:<platform>/<provider>/<token>  (no tag: one key per script, see package device)
//	msg/push/idem:<key>            (no tag: one key per script)
//	msg/{dl:<seq>}/s               a seq's two delivery keys share a slot
//	msg/{dl:<seq>}/t
//	msg/{nt:<shard>}/due, /pay, /idx  (a shard's three keys share a slot)
//
// The notify-if-unseen timer (package unseen) is split in shards by uid, so
// that a cluster spreads it over slots while one user's entries, and every
// script on them, stay in one shard's slot.
//
// The tag is {u:<uid>}, not {<uid>}: Redis hashes the whole key when the
// braces hold nothing, so a uid starting with '}' would scatter a user's keys
// over slots under {<uid>}; "u:" keeps the tag non-empty for every uid, and
// whatever the uid holds, the tag is a function of the uid alone.
package rkeys

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Layout is one of the two key layouts; the zero value is the standalone one.
type Layout struct {
	cluster bool
}

var (
	// Standalone is the layout for a Redis server (with or without
	// replicas).
	Standalone = Layout{}
	// Cluster is the layout for Redis Cluster: a user's keys share a slot.
	Cluster = Layout{cluster: true}
)

// Of returns the layout for rdb: Cluster for a *redis.ClusterClient, else
// Standalone. The client decides, so a store cannot disagree with the
// Redis it talks to.
func Of(rdb redis.UniversalClient) Layout {
	if _, ok := rdb.(*redis.ClusterClient); ok {
		return Cluster
	}
	return Standalone
}

// IsCluster reports whether this is the cluster layout.
func (l Layout) IsCluster() bool { return l.cluster }

// String names the layout.
func (l Layout) String() string {
	if l.cluster {
		return "cluster"
	}
	return "standalone"
}

// user is the prefix of every key of uid.
func (l Layout) user(uid string) string {
	if l.cluster {
		return "msg/{u:" + uid + "}"
	}
	return "msg/u:" + uid
}

// Sessions is the hash of a user's sessions: field sid, value
// "<platform>-<boat_id>".
func (l Layout) Sessions(uid string) string { return l.user(uid) + "/ss" }

// SessionOrder is the hash of the order in which a user's sessions
// connected: field sid, value a per-user counter (field "#" holds the last).
func (l Layout) SessionOrder(uid string) string { return l.user(uid) + "/so" }

// BoatSessions is the set of "<uid> <sid>" a boat's sessions are recorded
// under, the same in both layouts.
func (l Layout) BoatSessions(boatID string) string { return "msg/b:" + boatID + "/ss" }

// Devices is the hash of a user's device tokens.
func (l Layout) Devices(uid string) string { return l.user(uid) + "/dv" }

// DeviceOwner names the uid owning a device token (field is
// "<platform>/<provider>/<token>"); the same in both layouts.
func (l Layout) DeviceOwner(field string) string { return "msg/dt:" + field }

// Offline is the zset of a user's offline seqs on one platform.
func (l Layout) Offline(uid, platform string) string {
	return l.user(uid) + "/p:" + platform + "/oms"
}

// Tracked is the zset of a user's offline seqs on one platform whose
// messages asked NEED_RECEIPTS (package receipt's Tracked).
func (l Layout) Tracked(uid, platform string) string {
	return l.user(uid) + "/p:" + platform + "/rcp"
}

// BodyPrefix is what an offline body or count key of uid starts with; the
// offline scripts append "<seq>/m" or "<seq>/n".
func (l Layout) BodyPrefix(uid string) string {
	if l.cluster {
		return l.user(uid) + "/om:"
	}
	return "msg/om:"
}

// Body holds an offline message's body.
func (l Layout) Body(uid string, seq int64) string {
	return l.BodyPrefix(uid) + strconv.FormatInt(seq, 10) + "/m"
}

// Count holds how many lists reference an offline body.
func (l Layout) Count(uid string, seq int64) string {
	return l.BodyPrefix(uid) + strconv.FormatInt(seq, 10) + "/n"
}

// Idempotency is a Push idempotency key's record, the same in both layouts.
func (l Layout) Idempotency(key string) string { return "msg/push/idem:" + key }

// delivery is the prefix of a seq's delivery keys.
func (l Layout) delivery(seq int64) string {
	if l.cluster {
		return "msg/{dl:" + strconv.FormatInt(seq, 10) + "}"
	}
	return "msg/dl:" + strconv.FormatInt(seq, 10)
}

// DeliverySteps is the hash of a seq's delivery steps (package receipt):
// field uid, platform, state, sid and attempt; value the step's time,
// acked, boat and detail.
func (l Layout) DeliverySteps(seq int64) string { return l.delivery(seq) + "/s" }

// DeliveryIndex is the sorted set of DeliverySteps' fields, all of score 0,
// so that GetDelivery reads them in (uid, platform) order, a page at a time.
func (l Layout) DeliveryIndex(seq int64) string { return l.delivery(seq) + "/t" }

// Unseen holds the three keys of one shard of the notify-if-unseen timer:
// due is the zset of entries by due time, pay the hash of their
// notifications, idx the hash of "<uid> <seq>" → entry. They share a hash
// tag in the cluster layout.
func (l Layout) Unseen(shard int) (due, pay, idx string) {
	p := "msg/nt:" + strconv.Itoa(shard)
	if l.cluster {
		p = "msg/{nt:" + strconv.Itoa(shard) + "}"
	}
	return p + "/due", p + "/pay", p + "/idx"
}
