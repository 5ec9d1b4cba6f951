// Package offline keeps the messages of users who were offline when they were
// sent, in Redis. The key names come from package rkeys, which picks the
// layout from the client: the standalone names on a standalone Redis (or one
// primary with replicas), names tagged with the user on Redis Cluster.
//
//	standalone                        cluster
//	msg/u:<uid>/p:<platform>/oms      msg/{u:<uid>}/p:<platform>/oms  zset   members <seq> (decimal), score = send time, unix ms
//	msg/om:<seq>/m                    msg/{u:<uid>}/om:<seq>/m        string message body
//	msg/om:<seq>/n                    msg/{u:<uid>}/om:<seq>/n        string reference count: how many lists hold <seq>
//
// On a standalone Redis a body is stored once however many users wait for
// it. On a cluster it is stored once per user, shared by
// that user's platform lists: a script runs on the keys of one hash slot, a
// user's keys share a slot through the tag, and a body shared across users
// would sit in a slot of its own. The count says how many lists (of the user,
// on a cluster) still hold the body, and the last list to let go deletes body
// and count. Body and count also expire on their own at send time + expiry
// + KeyMargin, and a user list expires expiry + KeyMargin after its last
// write; a body shared by platforms with different expiries lives for the
// longest. The margin is there because two clocks decide: Redis expires keys
// by its own, while Read and Expire judge a member by the caller's now. Were
// the keys to go at the very millisecond a member expires, a caller whose
// clock is a little behind Redis's would find a member it still counts as
// alive without its body (Read then deletes it as gone) or find no list at
// all — either way the message ends without Expire ever returning its seq,
// and an EXPIRED receipt asked for is never sent. With the margin, members
// end only by Expire (or by a Write's clean); the TTLs only collect what
// nobody came back for.
//
// Every change runs in a Lua script (write.lua, clean.lua, delete.lua,
// embedded below) so it is atomic. Redis runs Lua 5.1, whose numbers are
// doubles that print as 1.7e+12, so every timestamp, score bound and expiry is
// computed in Go and handed to the scripts as a decimal string; the scripts
// never print a number they computed.
//
// Every script declares every key it touches in KEYS, in both layouts; none
// builds a key name inside Lua. On a cluster that is what keeps a script
// whole while a slot migrates: Redis checks the declared keys before running
// a script and, when some of them have already moved, answers ASK or TRYAGAIN
// without running anything (go-redis follows ASK; the store retries TRYAGAIN
// for a bounded time, see exec). A key a script only names once running is
// checked only when it is reached, and if it has moved by then the script
// stops there with "Script attempted to access a non local key", keeping what
// it did so far: a ZREM without its DECR. So scripts never learn a key from
// the data: Read takes two steps (the page, then its bodies), and clean.lua
// returns the seqs a list must give up for length, which Go hands to
// delete.lua with their keys declared.
package offline

import (
	_ "embed"
	"errors"
	"time"
)

// PageSize is the default number of messages a Read returns.
const PageSize = 50

// maxPageSize caps a Read: a page's bodies come back from one MGET, and a
// cap keeps that reply (up to maxPageSize bodies) bounded.
const maxPageSize = 1000

// ErrInvalid reports arguments the store rejects before touching Redis.
var ErrInvalid = errors.New("invalid argument")

// Policy says whether and how long a platform keeps offline messages.
type Policy struct {
	Store    bool
	Expiry   time.Duration // at least a millisecond when Store is set
	MaxCount int           // longest list per user and platform; <= 0: unlimited
}

// Message is one stored message.
type Message struct {
	Seq       int64
	Timestamp int64 // send time, unix ms; the zset score
	Body      []byte
}

// Item is one message to keep for one platform of a user.
type Item struct {
	Platform string
	Policy   Policy
	Msg      Message
}

var (
	//go:embed write.lua
	writeLua string
	//go:embed clean.lua
	cleanLua string
	//go:embed delete.lua
	deleteLua string
)
