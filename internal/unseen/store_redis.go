package unseen

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gomsg/gomsg/internal/rkeys"
)

// Shards is how many shards the timer is split in, by uid. It is part of
// the data layout: a different count would leave entries in shards no
// poller reads.
const Shards = 16

var (
	//go:embed drop.lua
	dropLua string
	//go:embed schedule.lua
	scheduleLua string
	//go:embed claim.lua
	claimLua string
	//go:embed done.lua
	doneLua string
	//go:embed cancel.lua
	cancelLua string
	//go:embed peek.lua
	peekLua string
)

// Entry is one scheduled notification: the Notification tasks of one
// ToUid task (one per platform), to be published keyed by UID when Due
// comes unless a message of Seqs is ACKed first.
type Entry struct {
	UID string
	// Seqs are the messages the notifications are about; the first names
	// the entry.
	Seqs []int64
	// Due is when it is to be published (zero on entries read back).
	Due time.Time
	// Notifications are the records' values (marshalled mqpb.Payload).
	Notifications [][]byte
}

// Store is the timer's Redis state: per shard, a zset of entries by due
// time, a hash of their values and a hash indexing them by "<uid> <seq>".
// Each operation is one Lua script on one shard's keys. It is safe for
// concurrent use.
type Store struct {
	rdb                                    redis.UniversalClient
	keys                                   rkeys.Layout
	schedule, claim, done, cancel, peekOne *redis.Script
}

// NewStore returns the store on rdb, in the key layout rdb calls for.
func NewStore(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, keys: rkeys.Of(rdb),
		schedule: redis.NewScript(scheduleLua),
		claim:    redis.NewScript(claimLua),
		done:     redis.NewScript(dropLua + doneLua),
		cancel:   redis.NewScript(dropLua + cancelLua),
		peekOne:  redis.NewScript(peekLua),
	}
}

// Shard is the shard of uid's entries.
func Shard(uid string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return int(h.Sum32() % Shards)
}

func (s *Store) shardKeys(shard int) []string {
	due, pay, idx := s.keys.Unseen(shard)
	return []string{due, pay, idx}
}

// Schedule adds e, due at e.Due. An entry of the same uid and first seq
// already scheduled is kept unchanged (added false): handling a task again
// schedules nothing twice.
func (s *Store) Schedule(ctx context.Context, e Entry) (added bool, err error) {
	if e.UID == "" || len(e.Seqs) == 0 || len(e.Notifications) == 0 {
		return false, fmt.Errorf("unseen: schedule %q: needs a uid, seqs and notifications", e.UID)
	}
	n, err := s.schedule.Run(ctx, s.rdb, s.shardKeys(Shard(e.UID)), id(e.UID, e.Seqs[0]), e.Due.UnixMilli(), encode(e)).Int()
	if err != nil {
		return false, fmt.Errorf("unseen: schedule %q: %w", e.UID, err)
	}
	return n == 1, nil
}

// Claim takes up to limit entries of shard due at now, and makes each due
// again at now+lease: the claimer publishes them and then calls Done; if it
// does not (it crashed), they are claimed again after the lease.
func (s *Store) Claim(ctx context.Context, shard int, now time.Time, lease time.Duration, limit int) ([]Entry, error) {
	res, err := s.claim.Run(ctx, s.rdb, s.shardKeys(shard), now.UnixMilli(), now.Add(lease).UnixMilli(), limit).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("unseen: claim shard %d: %w", shard, err)
	}
	entries, bad := decodeAll(res)
	if len(bad) == 0 {
		return entries, nil
	}
	// Claimed again and again, an entry no version of gomsg wrote would
	// hold its shard's poller forever: drop it.
	if err := s.done.Run(ctx, s.rdb, s.shardKeys(shard), bad...).Err(); err != nil {
		return entries, fmt.Errorf("unseen: drop %d corrupt entries of shard %d: %w", len(bad), shard, err)
	}
	return entries, fmt.Errorf("%w: dropped %v", ErrCorrupt, bad)
}

// Done removes entries whose notifications were published.
func (s *Store) Done(ctx context.Context, entries []Entry) error {
	byShard := map[int][]any{}
	for _, e := range entries {
		sh := Shard(e.UID)
		byShard[sh] = append(byShard[sh], id(e.UID, e.Seqs[0]))
	}
	for sh, ids := range byShard {
		if err := s.done.Run(ctx, s.rdb, s.shardKeys(sh), ids...).Err(); err != nil {
			return fmt.Errorf("unseen: done shard %d: %w", sh, err)
		}
	}
	return nil
}

// Cancel removes uid's entries about any of seqs and returns them.
func (s *Store) Cancel(ctx context.Context, uid string, seqs []int64) ([]Entry, error) {
	return s.byIndex(ctx, s.cancel, "cancel", uid, seqs)
}

// Peek returns uid's entries about any of seqs, changing nothing.
func (s *Store) Peek(ctx context.Context, uid string, seqs []int64) ([]Entry, error) {
	return s.byIndex(ctx, s.peekOne, "peek", uid, seqs)
}

func (s *Store) byIndex(ctx context.Context, script *redis.Script, op, uid string, seqs []int64) ([]Entry, error) {
	if len(seqs) == 0 {
		return nil, nil
	}
	fields := make([]any, len(seqs))
	for i, seq := range seqs {
		fields[i] = id(uid, seq)
	}
	res, err := script.Run(ctx, s.rdb, s.shardKeys(Shard(uid)), fields...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("unseen: %s %q: %w", op, uid, err)
	}
	entries, bad := decodeAll(res)
	if len(bad) > 0 {
		return entries, fmt.Errorf("%w: %v", ErrCorrupt, bad)
	}
	return entries, nil
}

// Backlog counts the entries scheduled (claimed ones included) and those
// of them due at now, over every shard, in one pipeline.
func (s *Store) Backlog(ctx context.Context, now time.Time) (scheduled, due int64, err error) {
	pipe := s.rdb.Pipeline()
	cards := make([]*redis.IntCmd, Shards)
	counts := make([]*redis.IntCmd, Shards)
	for sh := range Shards {
		k, _, _ := s.keys.Unseen(sh)
		cards[sh] = pipe.ZCard(ctx, k)
		counts[sh] = pipe.ZCount(ctx, k, "-inf", strconv.FormatInt(now.UnixMilli(), 10))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, fmt.Errorf("unseen: backlog: %w", err)
	}
	for sh := range Shards {
		scheduled += cards[sh].Val()
		due += counts[sh].Val()
	}
	return scheduled, due, nil
}

// id names uid's entry (or index field) of seq. A uid holds no space
// (station refuses one); the scripts take the uid as what precedes the
// last space anyway.
func id(uid string, seq int64) string { return uid + " " + strconv.FormatInt(seq, 10) }

// encode makes an entry's value: its seqs in decimal, comma-separated (the
// scripts read them to index the entry), '|', then each notification as
// field 1 of a protobuf message (repeated bytes).
func encode(e Entry) string {
	var b []byte
	for i, seq := range e.Seqs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, seq, 10)
	}
	b = append(b, '|')
	for _, n := range e.Notifications {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, n)
	}
	return string(b)
}

// ErrCorrupt reports entries whose value gomsg cannot read.
var ErrCorrupt = errors.New("unseen: corrupt entry")

func decode(entryID, v string) (Entry, error) {
	uid, _, ok := cutLast(entryID, ' ')
	head, rest, found := strings.Cut(v, "|")
	if !ok || !found {
		return Entry{}, fmt.Errorf("%w %q", ErrCorrupt, entryID)
	}
	e := Entry{UID: uid}
	for _, f := range strings.Split(head, ",") {
		seq, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return Entry{}, fmt.Errorf("%w %q: seq %q", ErrCorrupt, entryID, f)
		}
		e.Seqs = append(e.Seqs, seq)
	}
	b := []byte(rest)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return Entry{}, fmt.Errorf("%w %q: bad tag", ErrCorrupt, entryID)
		}
		b = b[n:]
		val, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return Entry{}, fmt.Errorf("%w %q: bad notification", ErrCorrupt, entryID)
		}
		e.Notifications = append(e.Notifications, val)
		b = b[n:]
	}
	return e, nil
}

// decodeAll reads a script's id, value, … answer; bad are the ids of the
// values it could not read.
func decodeAll(res []string) (out []Entry, bad []any) {
	out = make([]Entry, 0, len(res)/2)
	for i := 0; i+1 < len(res); i += 2 {
		e, err := decode(res[i], res[i+1])
		if err != nil {
			bad = append(bad, res[i])
			continue
		}
		out = append(out, e)
	}
	return out, bad
}

func cutLast(s string, sep byte) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}
