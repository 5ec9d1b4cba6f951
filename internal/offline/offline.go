// Package offline keeps the messages of users who were offline when they were
// sent, in Redis, in the layout of the original gomsg design (seed 000,
// "离线消息"):
//
//	msg/om:<seq>/m                string  message body
//	msg/om:<seq>/n                string  reference count: how many user lists hold <seq>
//	msg/u:<uid>/p:<platform>/oms  zset    members <seq> (decimal), score = send time, unix ms
//
// A body is stored once however many users wait for it; the count says how
// many lists still hold it, and the last list to let go deletes body and
// count. Body and count also expire on their own at send time + expiry, and a
// user list expires one expiry after its last write. Those TTLs are set to the
// millisecond (PEXPIREAT, PEXPIRE where seed 000 says EXPIREAT, EXPIRE), so a
// body lives exactly as long as Read's now-expiry bound keeps its seq; a body
// shared by platforms with different expiries lives for the longest.
//
// Every change runs in a Lua script (write.lua, clean.lua, read.lua,
// delete.lua, embedded below) so it is atomic. Redis runs Lua 5.1, whose
// numbers are doubles that print as 1.7e+12, so every timestamp, score bound
// and expiry is computed in Go and handed to the scripts as a decimal string;
// the scripts never print a number they computed.
//
// The layout is for a standalone Redis (or one primary with replicas), not
// Redis Cluster: clean.lua, read.lua and delete.lua learn seqs only inside
// the script and build their body and count keys there, from a prefix passed
// in ARGV, so they touch keys not declared in KEYS, and a user list and the
// bodies it points at live in different hash slots. Seed 000 lists a
// cluster-ready layout as a TODO; it would change the key names.
package offline

import (
	_ "embed"
	"errors"
	"strconv"
	"time"
)

// PageSize is the default number of messages a Read returns.
const PageSize = 50

// maxPageSize caps a Read: read.lua unpacks one page's body keys into a
// single MGET, and Lua's stack limits how many values unpack may return.
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

const (
	bodyPrefix  = "msg/om:" // body and count keys, also handed to the scripts
	bodySuffix  = "/m"
	countSuffix = "/n"
)

// UserKey is the zset of a user's offline seqs on one platform.
func UserKey(uid, platform string) string {
	return "msg/u:" + uid + "/p:" + platform + "/oms"
}

// BodyKey holds a message's body.
func BodyKey(seq int64) string { return bodyPrefix + strconv.FormatInt(seq, 10) + bodySuffix }

// CountKey holds how many user lists reference a message.
func CountKey(seq int64) string { return bodyPrefix + strconv.FormatInt(seq, 10) + countSuffix }

var (
	//go:embed write.lua
	writeLua string
	//go:embed clean.lua
	cleanLua string
	//go:embed read.lua
	readLua string
	//go:embed delete.lua
	deleteLua string
)
