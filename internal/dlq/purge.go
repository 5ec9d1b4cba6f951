package dlq

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// raisePurge sets the purge mark to ARGV[1] unless it is already later:
// purges only ever widen, so two at once end on the later one.
var raisePurge = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1`)

// Purge removes from the list, for good, the dead letters that died before
// req.BeforeMs. The records stay on the topic until its retention removes
// them (kafka-go has no DeleteRecords call), but neither the list nor a
// redrive sees them again.
func (d *DLQ) Purge(ctx context.Context, req *pushpb.PurgeDeadLettersRequest) (*pushpb.PurgeDeadLettersResponse, error) {
	switch {
	case !req.GetConfirm():
		return nil, grpcerr.Invalid("confirm", "must be true: a purge cannot be undone")
	case req.GetBeforeMs() <= 0:
		return nil, grpcerr.Invalid("before_ms", "must be set (Unix milliseconds)")
	case req.GetBeforeMs() > time.Now().UnixMilli():
		return nil, grpcerr.Invalid("before_ms", "%s is in the future", time.UnixMilli(req.GetBeforeMs()).UTC().Format(time.RFC3339))
	}
	all, err := d.refresh(ctx)
	if err != nil {
		return nil, err
	}
	var n int64
	for _, e := range all {
		if e.sum.GetDeadAt() < req.GetBeforeMs() {
			n++
		}
	}
	if err := raisePurge.Run(ctx, d.rdb, []string{d.keys.DLQPurged()}, req.GetBeforeMs()).Err(); err != nil {
		return nil, storeErr("set the purge mark", err)
	}
	// Redriven records before the mark need no mark of their own any
	// more: the hash holds each one's dead_at.
	handled, err := d.rdb.HGetAll(ctx, d.keys.DLQHandled()).Result()
	if err != nil {
		return nil, storeErr("read the redriven records", err)
	}
	var stale []string
	for f, v := range handled {
		if at, err := strconv.ParseInt(v, 10, 64); err == nil && at < req.GetBeforeMs() {
			stale = append(stale, f)
		}
	}
	if len(stale) > 0 {
		if err := d.rdb.HDel(ctx, d.keys.DLQHandled(), stale...).Err(); err != nil {
			return nil, storeErr("forget purged redriven records", err)
		}
	}
	if _, err := d.refresh(ctx); err != nil {
		return nil, err
	}
	return &pushpb.PurgeDeadLettersResponse{Purged: n}, nil
}
