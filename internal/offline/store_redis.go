package offline

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
)

// Store is the Redis offline message store. It is safe for concurrent use.
type Store struct {
	rdb                redis.UniversalClient
	keys               rkeys.Layout
	write, clean, drop *redis.Script
	margin             time.Duration // KeyMargin; shorter in tests that wait for keys to expire
}

// KeyMargin is how much longer than its members' expiry a body, its count
// and a user list live in Redis (see the package comment): more than the
// clocks of gomsg's hosts and Redis's may differ by.
const KeyMargin = time.Minute

// New returns a store on rdb, in the key layout rdb calls for: the cluster
// layout on a *redis.ClusterClient, the standalone layout on any
// other client (see the package comment).
func New(rdb redis.UniversalClient) *Store {
	return &Store{
		rdb:    rdb,
		keys:   rkeys.Of(rdb),
		write:  redis.NewScript(writeLua),
		clean:  redis.NewScript(cleanLua),
		drop:   redis.NewScript(deleteLua),
		margin: KeyMargin,
	}
}

// Write stores items for one uid. Each item is one EVALSHA of write.lua, and
// after them clean.lua runs once per distinct platform (with the policy of
// that platform's last item), all in one pipeline; the seqs a clean finds
// over the platform's maximum are then removed by delete.lua, in a second
// pipeline. Between the two a list may hold more than its maximum, which a
// concurrent Read may see; delete.lua decrements only the counts of seqs it
// really removed, so an ACK of a seq between the two steps costs no count.
//
// Items whose Policy.Store is false are skipped; the others are all checked
// before anything is written. It returns how many items were newly added to
// their user list: writing a seq the list already holds is a no-op, so
// retrying a Write is safe. On an error, added counts the items Redis
// confirmed before it. All three scripts are idempotent, so go-redis may
// replay a pipeline that timed out (it does, up to MaxRetries) without
// corrupting counts; only added then undercounts, as the replayed writes find
// their seqs already listed.
func (s *Store) Write(ctx context.Context, uid string, items []Item) (added int, err error) {
	added, _, err = s.WriteDropping(ctx, uid, items)
	return added, err
}

// Dropped lists the messages a user's platform list gave up unread.
type Dropped struct {
	Platform string
	// Expired were sent before now-expiry.
	Expired []int64
	// Trimmed were the oldest over the platform's maximum length.
	Trimmed []int64
}

// WriteDropping is Write that also returns, per platform that gave any up,
// the seqs its list dropped unread: expired, or trimmed to the maximum
// length (those delete.lua really removed, so not a seq an ACK removed
// between the two steps). A pipeline sent again after Redis refused it
// reports only what its last run dropped.
func (s *Store) WriteDropping(ctx context.Context, uid string, items []Item) (added int, dropped []Dropped, err error) {
	if uid == "" {
		return 0, nil, fmt.Errorf("offline: write uid %q: empty uid: %w", uid, ErrInvalid)
	}
	var writes []*call
	var platforms []string
	policies := make(map[string]Policy)
	for i, it := range items {
		if !it.Policy.Store {
			continue
		}
		if it.Platform == "" {
			return 0, nil, fmt.Errorf("offline: write uid %q: item %d: empty platform: %w", uid, i, ErrInvalid)
		}
		if it.Policy.Expiry < time.Millisecond {
			return 0, nil, fmt.Errorf("offline: write uid %q: item %d: expiry %s is under 1ms: %w",
				uid, i, it.Policy.Expiry, ErrInvalid)
		}
		ms := it.Policy.Expiry.Milliseconds()
		seq := it.Msg.Seq
		writes = append(writes, &call{
			script: s.write,
			keys:   []string{s.keys.Offline(uid, it.Platform), s.keys.Body(uid, seq), s.keys.Count(uid, seq)},
			args: []any{
				itoa(it.Msg.Timestamp),
				itoa(seq),
				it.Msg.Body,
				itoa(it.Msg.Timestamp + ms + s.margin.Milliseconds()),
				itoa(ms + s.margin.Milliseconds()),
			},
		})
		if _, ok := policies[it.Platform]; !ok {
			platforms = append(platforms, it.Platform)
		}
		policies[it.Platform] = it.Policy
	}
	if len(writes) == 0 {
		return 0, nil, nil
	}
	now := time.Now()
	cleans := make([]*call, 0, len(platforms))
	for _, p := range platforms {
		cleans = append(cleans, s.cleanCall(uid, p, now, policies[p]))
	}
	execErr := s.exec(ctx, writes, cleans)
	for _, c := range writes {
		if n, err := c.cmd.Int(); err == nil {
			added += n
		}
	}
	if execErr != nil {
		return added, nil, fmt.Errorf("offline: write uid %q: %w", uid, execErr)
	}

	var trims []*call
	var trimmed []string // platform of each trim
	for i, c := range cleans {
		expired, over, err := cleanReply(c.cmd)
		if err != nil {
			return added, dropped, fmt.Errorf("offline: write uid %q platform %q: clean.lua reply: %w", uid, platforms[i], err)
		}
		if len(expired) > 0 {
			dropped = append(dropped, Dropped{Platform: platforms[i], Expired: expired})
		}
		if len(over) > 0 {
			trims = append(trims, s.deleteCall(uid, platforms[i], over))
			trimmed = append(trimmed, platforms[i])
		}
	}
	if len(trims) == 0 {
		return added, dropped, nil
	}
	if err := s.exec(ctx, trims, nil); err != nil {
		return added, dropped, fmt.Errorf("offline: write uid %q: trim: %w", uid, err)
	}
	for i, c := range trims {
		seqs, err := seqsOf(c.cmd.Val())
		if err != nil {
			return added, dropped, fmt.Errorf("offline: write uid %q platform %q: delete.lua reply: %w", uid, trimmed[i], err)
		}
		if len(seqs) > 0 {
			dropped = append(dropped, Dropped{Platform: trimmed[i], Trimmed: seqs})
		}
	}
	return added, dropped, nil
}

// cleanReply parses clean.lua's reply: the seqs it dropped as expired and
// those over the maximum.
func cleanReply(cmd *redis.Cmd) (expired, over []int64, err error) {
	v, err := cmd.Slice()
	if err != nil {
		return nil, nil, err
	}
	if len(v) != 2 {
		return nil, nil, fmt.Errorf("%d elements, want 2", len(v))
	}
	if expired, err = seqsOf(v[0]); err != nil {
		return nil, nil, err
	}
	over, err = seqsOf(v[1])
	return expired, over, err
}

// seqsOf parses a script's array of seqs (decimal strings).
func seqsOf(v any) ([]int64, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%T, want an array of seqs", v)
	}
	if len(arr) == 0 {
		return nil, nil
	}
	seqs := make([]int64, len(arr))
	for i, m := range arr {
		str, _ := m.(string)
		seq, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("member %v of the list is not a seq: %w", m, err)
		}
		seqs[i] = seq
	}
	return seqs, nil
}

// Read returns up to limit (PageSize when limit <= 0, at most 1000) messages
// of the user's platform list sent at or after now-expiry, oldest first;
// messages with equal timestamps come in the zset's member order, which
// compares seqs as strings ("10" before "9").
//
// A page is two commands, not a script: ZRANGEBYSCORE on the list, then one
// MGET of the page's body keys, declared (on a cluster they share the list's
// slot). They are not atomic together, and need not be: write.lua and
// delete.lua change list, body and count together, so no other command ever
// sees a listed seq without its body, except after the body expired or was
// evicted. A seq deleted from the list (ACKed, trimmed) between the two
// steps comes back bodiless when that was its last list, and was to go
// anyway; when another list still holds its body it comes back whole, as it
// would have had the ACK arrived just after the page.
//
// A listed seq whose body is gone cannot be delivered: Read leaves it out of
// the result and removes it from the list with Delete, then reads the page
// again so that such seqs neither stay forever nor make a page come back
// short or empty while messages remain. That repair is safe against a
// concurrent ACK of the same seq: delete.lua decrements a count only for a
// member its ZREM removed, so the seq's reference is dropped once.
// Read does not remove expired members; DropExpired does.
func (s *Store) Read(ctx context.Context, uid, platform string, now time.Time, expiry time.Duration, limit int) ([]Message, error) {
	if err := checkList(uid, platform, expiry); err != nil {
		return nil, fmt.Errorf("offline: read uid %q platform %q: %w", uid, platform, err)
	}
	if limit <= 0 {
		limit = PageSize
	}
	limit = min(limit, maxPageSize)
	list := s.keys.Offline(uid, platform)
	minScore := itoa(now.UnixMilli() - expiry.Milliseconds())
	for {
		page, err := s.rdb.ZRangeByScoreWithScores(ctx, list, &redis.ZRangeBy{
			Min: minScore, Max: "+inf", Count: int64(limit)}).Result()
		if err != nil {
			return nil, fmt.Errorf("offline: read uid %q platform %q: %w", uid, platform, err)
		}
		if len(page) == 0 {
			return nil, nil
		}
		seqs, err := pageSeqs(page)
		if err != nil {
			return nil, fmt.Errorf("offline: read uid %q platform %q: %w", uid, platform, err)
		}
		bodyKeys := make([]string, len(seqs))
		for i, seq := range seqs {
			bodyKeys[i] = s.keys.Body(uid, seq)
		}
		var bodies []any
		err = s.retryRefused(ctx, func() error {
			bodies, err = s.rdb.MGet(ctx, bodyKeys...).Result()
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("offline: read uid %q platform %q: bodies: %w", uid, platform, err)
		}
		msgs, gone := joinPage(page, seqs, bodies)
		if len(gone) == 0 {
			return msgs, nil
		}
		if err := s.Delete(ctx, uid, platform, gone); err != nil {
			return nil, err
		}
		if len(page) < limit { // the list had no more
			return msgs, nil
		}
	}
}

// Held returns those of seqs the user's platform list holds, in the order
// given: what an ACK of seqs would remove.
func (s *Store) Held(ctx context.Context, uid, platform string, seqs []int64) ([]int64, error) {
	if uid == "" || platform == "" {
		return nil, fmt.Errorf("offline: held uid %q platform %q: empty uid or platform: %w", uid, platform, ErrInvalid)
	}
	if len(seqs) == 0 {
		return nil, nil
	}
	members := make([]string, len(seqs))
	for i, seq := range seqs {
		members[i] = itoa(seq)
	}
	scores, err := s.rdb.ZMScore(ctx, s.keys.Offline(uid, platform), members...).Result()
	if err != nil {
		return nil, fmt.Errorf("offline: held uid %q platform %q: %w", uid, platform, err)
	}
	var held []int64
	for i, seq := range seqs {
		if scores[i] != 0 {
			held = append(held, seq)
		}
	}
	return held, nil
}

// Backlog is how many seqs the user's platform list holds and the newest of
// them (at most newest, newest first): what an operator looks at, not a read
// that delivers or deletes anything.
func (s *Store) Backlog(ctx context.Context, uid, platform string, newest int) (int64, []int64, error) {
	if uid == "" || platform == "" {
		return 0, nil, fmt.Errorf("offline: backlog uid %q platform %q: empty uid or platform: %w", uid, platform, ErrInvalid)
	}
	key := s.keys.Offline(uid, platform)
	var card *redis.IntCmd
	var top *redis.StringSliceCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		card = p.ZCard(ctx, key)
		top = p.ZRevRange(ctx, key, 0, int64(newest)-1)
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("offline: backlog uid %q platform %q: %w", uid, platform, err)
	}
	seqs := make([]int64, 0, len(top.Val()))
	for _, v := range top.Val() {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			seqs = append(seqs, n)
		}
	}
	return card.Val(), seqs, nil
}

// Delete removes seqs from the user's platform list after the client ACKed
// them. Seqs the list does not hold are ignored.
func (s *Store) Delete(ctx context.Context, uid, platform string, seqs []int64) error {
	if uid == "" || platform == "" {
		return fmt.Errorf("offline: delete uid %q platform %q: empty uid or platform: %w", uid, platform, ErrInvalid)
	}
	if len(seqs) == 0 {
		return nil
	}
	if err := s.exec(ctx, []*call{s.deleteCall(uid, platform, seqs)}, nil); err != nil {
		return fmt.Errorf("offline: delete uid %q platform %q: %w", uid, platform, err)
	}
	return nil
}

// DropExpired removes the members of the user's platform list sent before
// now-expiry: the step after a read loop comes back empty. Their bodies and
// counts are left to expire by themselves, as after a Write's clean.
func (s *Store) DropExpired(ctx context.Context, uid, platform string, now time.Time, expiry time.Duration) error {
	_, err := s.Expire(ctx, uid, platform, now, expiry)
	return err
}

// Expire is DropExpired returning the seqs it removed.
func (s *Store) Expire(ctx context.Context, uid, platform string, now time.Time, expiry time.Duration) ([]int64, error) {
	if err := checkList(uid, platform, expiry); err != nil {
		return nil, fmt.Errorf("offline: drop expired uid %q platform %q: %w", uid, platform, err)
	}
	c := s.cleanCall(uid, platform, now, Policy{Store: true, Expiry: expiry})
	if err := s.exec(ctx, nil, []*call{c}); err != nil {
		return nil, fmt.Errorf("offline: drop expired uid %q platform %q: %w", uid, platform, err)
	}
	expired, _, err := cleanReply(c.cmd)
	if err != nil {
		return nil, fmt.Errorf("offline: drop expired uid %q platform %q: clean.lua reply: %w", uid, platform, err)
	}
	return expired, nil
}

func (s *Store) cleanCall(uid, platform string, now time.Time, p Policy) *call {
	maxCount := max(p.MaxCount, 0)
	return &call{
		script: s.clean,
		keys:   []string{s.keys.Offline(uid, platform)},
		args: []any{
			"(" + itoa(now.UnixMilli()-p.Expiry.Milliseconds()),
			strconv.Itoa(maxCount),
			strconv.Itoa(-(maxCount + 1)),
		},
	}
}

func (s *Store) deleteCall(uid, platform string, seqs []int64) *call {
	keys := make([]string, 0, 1+2*len(seqs))
	keys = append(keys, s.keys.Offline(uid, platform))
	args := make([]any, len(seqs))
	for i, seq := range seqs {
		keys = append(keys, s.keys.Body(uid, seq), s.keys.Count(uid, seq))
		args[i] = itoa(seq)
	}
	return &call{script: s.drop, keys: keys, args: args}
}

func checkList(uid, platform string, expiry time.Duration) error {
	switch {
	case uid == "":
		return fmt.Errorf("empty uid: %w", ErrInvalid)
	case platform == "":
		return fmt.Errorf("empty platform: %w", ErrInvalid)
	case expiry < time.Millisecond:
		return fmt.Errorf("expiry %s is under 1ms: %w", expiry, ErrInvalid)
	}
	return nil
}

// pageSeqs parses a page's members as seqs.
func pageSeqs(page []redis.Z) ([]int64, error) {
	seqs := make([]int64, len(page))
	for i, z := range page {
		member, _ := z.Member.(string)
		seq, err := strconv.ParseInt(member, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("member %q of the list is not a seq: %w", member, err)
		}
		seqs[i] = seq
	}
	return seqs, nil
}

// joinPage pairs a page's members with the MGET reply of their bodies:
// deliverable messages, and the seqs whose body is gone (nil).
func joinPage(page []redis.Z, seqs []int64, bodies []any) (msgs []Message, gone []int64) {
	for i, z := range page {
		var body string
		var ok bool
		if i < len(bodies) {
			body, ok = bodies[i].(string)
		}
		if !ok {
			gone = append(gone, seqs[i])
			continue
		}
		// A unix-ms score is far below 2^53, so the float is exact.
		msgs = append(msgs, Message{Seq: seqs[i], Timestamp: int64(z.Score), Body: []byte(body)})
	}
	return msgs, gone
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
