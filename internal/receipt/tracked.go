package receipt

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/rkeys"
)

// Tracked remembers which messages kept offline asked NEED_RECEIPTS, per
// uid and platform. The offline store holds seqs and bodies only, and a
// body expires with its message, so the steps that name seqs alone (EXPIRED
// when the store gives a message up, REPLAYED when a device ACKs through
// Pull) ask here instead: a message that did not ask for receipts costs no
// receipt, in Kafka or in the delivery store.
//
// One zset per uid and platform (rkeys.Tracked), member seq, score the
// message's send time. A member is removed when its last offline step is
// recorded (Forget: expired, trimmed, replayed or pulled), and the set
// outlives the offline list it shadows (see Add).
type Tracked struct {
	rdb  redis.UniversalClient
	keys rkeys.Layout
}

// NewTracked returns the tracked-seq sets on rdb (the offline store's Redis).
func NewTracked(rdb redis.UniversalClient) *Tracked {
	return &Tracked{rdb: rdb, keys: rkeys.Of(rdb)}
}

// TrackedMsg is a message kept offline that asked for receipts.
type TrackedMsg struct {
	Seq int64
	// SentAt is the message's send time, unix ms (the offline list's score).
	SentAt int64
}

// Add records msgs of uid's platform, kept for expiry. It is idempotent.
func (t *Tracked) Add(ctx context.Context, uid, platform string, expiry time.Duration, msgs ...TrackedMsg) error {
	if len(msgs) == 0 {
		return nil
	}
	key := t.keys.Tracked(uid, platform)
	zs := make([]redis.Z, len(msgs))
	for i, m := range msgs {
		zs[i] = redis.Z{Score: float64(m.SentAt), Member: strconv.FormatInt(m.Seq, 10)}
	}
	_, err := t.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, zs...)
		// Twice the expiry: a message is reported expired at the list's
		// first clean after its expiry, which can come up to an expiry
		// later (the list itself lives an expiry past its last write).
		p.PExpire(ctx, key, 2*expiry)
		return nil
	})
	if err != nil {
		return fmt.Errorf("receipt: track %d seqs of uid %q platform %q: %w", len(msgs), uid, platform, err)
	}
	return nil
}

// Filter returns the seqs of uid's platform that are tracked, in the order
// given.
func (t *Tracked) Filter(ctx context.Context, uid, platform string, seqs []int64) ([]int64, error) {
	if len(seqs) == 0 {
		return nil, nil
	}
	members := make([]string, len(seqs))
	for i, seq := range seqs {
		members[i] = strconv.FormatInt(seq, 10)
	}
	res, err := t.rdb.Do(ctx, append([]any{"ZMSCORE", t.keys.Tracked(uid, platform)}, toAny(members)...)...).Slice()
	if err != nil {
		return nil, fmt.Errorf("receipt: tracked seqs of uid %q platform %q: %w", uid, platform, err)
	}
	var out []int64
	for i, r := range res {
		if r != nil {
			out = append(out, seqs[i])
		}
	}
	return out, nil
}

// Forget removes seqs of uid's platform: their last step is recorded.
func (t *Tracked) Forget(ctx context.Context, uid, platform string, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	members := make([]any, len(seqs))
	for i, seq := range seqs {
		members[i] = strconv.FormatInt(seq, 10)
	}
	if err := t.rdb.ZRem(ctx, t.keys.Tracked(uid, platform), members...).Err(); err != nil {
		return fmt.Errorf("receipt: forget %d tracked seqs of uid %q platform %q: %w", len(seqs), uid, platform, err)
	}
	return nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
