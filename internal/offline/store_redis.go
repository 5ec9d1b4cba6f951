package offline

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store is the Redis offline message store. It is safe for concurrent use.
type Store struct {
	rdb                      redis.UniversalClient
	write, clean, read, drop *redis.Script
}

// New returns a store on rdb; rdb must address a standalone Redis (see the
// package comment).
func New(rdb redis.UniversalClient) *Store {
	return &Store{
		rdb:   rdb,
		write: redis.NewScript(writeLua),
		clean: redis.NewScript(cleanLua),
		read:  redis.NewScript(readLua),
		drop:  redis.NewScript(deleteLua),
	}
}

// Write stores items for one uid. Each item is one EVALSHA of write.lua, and
// after them clean.lua runs once per distinct platform (with the policy of
// that platform's last item), all in one pipeline. Items whose Policy.Store is
// false are skipped; the others are all checked before anything is written.
// It returns how many items were newly added to their user list: writing a
// seq the list already holds is a no-op, so retrying a Write is safe. On an
// error, added counts the items Redis confirmed before it. All four scripts
// are idempotent, so go-redis may replay a pipeline that timed out (it does,
// up to MaxRetries) without corrupting counts; only added then undercounts,
// as the replayed writes find their seqs already listed.
func (s *Store) Write(ctx context.Context, uid string, items []Item) (added int, err error) {
	if uid == "" {
		return 0, fmt.Errorf("offline: write uid %q: empty uid: %w", uid, ErrInvalid)
	}
	var writes []*call
	var platforms []string
	policies := make(map[string]Policy)
	for i, it := range items {
		if !it.Policy.Store {
			continue
		}
		if it.Platform == "" {
			return 0, fmt.Errorf("offline: write uid %q: item %d: empty platform: %w", uid, i, ErrInvalid)
		}
		if it.Policy.Expiry < time.Millisecond {
			return 0, fmt.Errorf("offline: write uid %q: item %d: expiry %s is under 1ms: %w",
				uid, i, it.Policy.Expiry, ErrInvalid)
		}
		ms := it.Policy.Expiry.Milliseconds()
		writes = append(writes, &call{
			script: s.write,
			keys:   []string{UserKey(uid, it.Platform), BodyKey(it.Msg.Seq), CountKey(it.Msg.Seq)},
			args: []any{
				itoa(it.Msg.Timestamp),
				itoa(it.Msg.Seq),
				it.Msg.Body,
				itoa(it.Msg.Timestamp + ms),
				itoa(ms),
			},
		})
		if _, ok := policies[it.Platform]; !ok {
			platforms = append(platforms, it.Platform)
		}
		policies[it.Platform] = it.Policy
	}
	if len(writes) == 0 {
		return 0, nil
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
		return added, fmt.Errorf("offline: write uid %q: %w", uid, execErr)
	}
	return added, nil
}

// Read returns up to limit (PageSize when limit <= 0, at most 1000) messages
// of the user's platform list sent at or after now-expiry, oldest first;
// messages with equal timestamps come in the zset's member order, which
// compares seqs as strings ("10" before "9").
//
// A listed seq whose body is gone (it expired, or was evicted) cannot be
// delivered: Read leaves it out of the result and removes it from the list as
// Delete would, then reads the page again so that such seqs neither stay
// forever nor make a page come back short or empty while messages remain.
// Read does not remove expired members; DropExpired does.
func (s *Store) Read(ctx context.Context, uid, platform string, now time.Time, expiry time.Duration, limit int) ([]Message, error) {
	if err := checkList(uid, platform, expiry); err != nil {
		return nil, fmt.Errorf("offline: read uid %q platform %q: %w", uid, platform, err)
	}
	if limit <= 0 {
		limit = PageSize
	}
	limit = min(limit, maxPageSize)
	keys := []string{UserKey(uid, platform)}
	minScore := itoa(now.UnixMilli() - expiry.Milliseconds())
	for {
		reply, err := s.read.Run(ctx, s.rdb, keys, minScore, strconv.Itoa(limit), bodyPrefix).Slice()
		if err != nil {
			return nil, fmt.Errorf("offline: read uid %q platform %q: %w", uid, platform, err)
		}
		msgs, gone, err := parsePage(reply)
		if err != nil {
			return nil, fmt.Errorf("offline: read uid %q platform %q: %w", uid, platform, err)
		}
		if len(gone) == 0 {
			return msgs, nil
		}
		if err := s.Delete(ctx, uid, platform, gone); err != nil {
			return nil, err
		}
		if len(msgs)+len(gone) < limit { // the list had no more
			return msgs, nil
		}
	}
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
	args := make([]any, 0, len(seqs)+1)
	args = append(args, bodyPrefix)
	for _, seq := range seqs {
		args = append(args, itoa(seq))
	}
	if err := s.drop.Run(ctx, s.rdb, []string{UserKey(uid, platform)}, args...).Err(); err != nil {
		return fmt.Errorf("offline: delete uid %q platform %q: %w", uid, platform, err)
	}
	return nil
}

// DropExpired removes the members of the user's platform list sent before
// now-expiry: the step after a read loop comes back empty. Their bodies and
// counts are left to expire by themselves, as after a Write's clean.
func (s *Store) DropExpired(ctx context.Context, uid, platform string, now time.Time, expiry time.Duration) error {
	if err := checkList(uid, platform, expiry); err != nil {
		return fmt.Errorf("offline: drop expired uid %q platform %q: %w", uid, platform, err)
	}
	c := s.cleanCall(uid, platform, now, Policy{Store: true, Expiry: expiry})
	if err := c.script.Run(ctx, s.rdb, c.keys, c.args...).Err(); err != nil {
		return fmt.Errorf("offline: drop expired uid %q platform %q: %w", uid, platform, err)
	}
	return nil
}

func (s *Store) cleanCall(uid, platform string, now time.Time, p Policy) *call {
	maxCount := max(p.MaxCount, 0)
	return &call{
		script: s.clean,
		keys:   []string{UserKey(uid, platform)},
		args: []any{
			"(" + itoa(now.UnixMilli()-p.Expiry.Milliseconds()),
			strconv.Itoa(maxCount),
			strconv.Itoa(-(maxCount + 1)),
			bodyPrefix,
		},
	}
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

// parsePage splits read.lua's triples into deliverable messages and the seqs
// whose body is gone.
func parsePage(reply []any) (msgs []Message, gone []int64, err error) {
	if len(reply)%3 != 0 {
		return nil, nil, fmt.Errorf("read.lua returned %d values, not triples", len(reply))
	}
	for i := 0; i < len(reply); i += 3 {
		member, _ := reply[i].(string)
		seq, err := strconv.ParseInt(member, 10, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("member %q of the list is not a seq: %w", member, err)
		}
		score, _ := reply[i+1].(string)
		// A unix-ms score is far below 2^53, so the float is exact.
		ts, err := strconv.ParseFloat(score, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("score %q of seq %d: %w", score, seq, err)
		}
		body, ok := reply[i+2].(string)
		if !ok {
			gone = append(gone, seq)
			continue
		}
		msgs = append(msgs, Message{Seq: seq, Timestamp: int64(ts), Body: []byte(body)})
	}
	return msgs, gone, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
