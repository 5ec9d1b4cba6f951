package dlq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// Redrive puts the waiting dead letters req selects back on the task topic,
// oldest first (so one user's tasks keep their order), at most req.Rate a
// second: each with retry_count reset and redrive_count one higher, keyed
// as it was. A task already redriven MaxRedrives times is refused and
// stays. Each record is marked redriven once Kafka has the task, so a
// redrive that stops half way (Kafka down, the caller gone) is resumed by
// calling it again, without putting back twice what was done.
func (d *DLQ) Redrive(ctx context.Context, req *pushpb.RedriveDeadLettersRequest) (*pushpb.RedriveDeadLettersResponse, error) {
	n := 0
	for _, set := range []bool{req.GetSeq() != 0, req.GetUid() != "", req.GetSinceMs() != 0, req.GetAll()} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return nil, grpcerr.Invalid("selector", "set exactly one of seq, uid, since_ms and all (%d set)", n)
	case req.GetSeq() < 0:
		return nil, grpcerr.Invalid("seq", "%d is negative", req.GetSeq())
	case req.GetRate() < 0 || req.GetRate() > MaxRedriveRate:
		return nil, grpcerr.Invalid("rate", "%g per second, want more than 0 and at most %d (0: %d)", req.GetRate(), MaxRedriveRate, DefaultRedriveRate)
	case req.GetLimit() < 0 || req.GetLimit() > MaxRedriveLimit:
		return nil, grpcerr.Invalid("limit", "%d, want 1 to %d (0: %d)", req.GetLimit(), MaxRedriveLimit, DefaultRedriveLimit)
	}
	if err := validTime("since_ms", req.GetSinceMs()); err != nil {
		return nil, err
	}
	if err := validUID("uid", req.GetUid()); err != nil {
		return nil, err
	}
	perSec, limit := req.GetRate(), int(req.GetLimit())
	if perSec == 0 {
		perSec = DefaultRedriveRate
	}
	if limit == 0 {
		limit = DefaultRedriveLimit
	}

	d.redriveMu.Lock()
	defer d.redriveMu.Unlock()
	all, err := d.refresh(ctx)
	if err != nil {
		return nil, err
	}
	var picked []*entry
	if req.GetSeq() != 0 {
		if e := find(all, req.GetSeq()); e != nil {
			picked = append(picked, e)
		}
	} else {
		for i := len(all) - 1; i >= 0; i-- { // oldest first
			s := all[i].sum
			if (req.GetUid() != "" && s.GetUid() != req.GetUid()) || s.GetDeadAt() < req.GetSinceMs() {
				continue
			}
			picked = append(picked, all[i])
		}
	}
	resp := &pushpb.RedriveDeadLettersResponse{DryRun: req.GetDryRun()}
	if req.GetSeq() != 0 && len(picked) == 0 {
		return nil, notFound(req.GetSeq())
	}
	lim := rate.NewLimiter(rate.Limit(perSec), 1)
	for _, e := range picked {
		s := e.sum
		// Refusals do not count against the limit: a batch of them cannot
		// hold back the tasks after them.
		if len(resp.Redriven) == limit && int(s.GetRedriveCount()) < d.cfg.MaxRedrives {
			resp.More = true
			continue
		}
		if int(s.GetRedriveCount()) >= d.cfg.MaxRedrives {
			resp.Refused = append(resp.Refused, &pushpb.RedriveRefusal{Seq: s.GetSeq(), Uid: s.GetUid(),
				Reason: fmt.Sprintf("already redriven %d times, the bound (--dlq-max-redrives %d): it stays in the dead-letter list until purged",
					s.GetRedriveCount(), d.cfg.MaxRedrives)})
			if !req.GetDryRun() && d.metrics != nil {
				d.metrics.DLQRedrives.WithLabelValues("refused").Inc()
			}
			continue
		}
		if req.GetDryRun() {
			resp.Redriven = append(resp.Redriven, s)
			continue
		}
		if err := lim.Wait(ctx); err != nil {
			return resp, err
		}
		done, err := d.redriveOne(ctx, e)
		if err != nil {
			return resp, err
		}
		if !done {
			resp.Refused = append(resp.Refused, &pushpb.RedriveRefusal{Seq: s.GetSeq(), Uid: s.GetUid(),
				Reason: "another station is putting it back, or has put it back, at this moment"})
			continue
		}
		resp.Redriven = append(resp.Redriven, s)
		if d.metrics != nil {
			d.metrics.DLQRedrives.WithLabelValues("redriven").Inc()
		}
	}
	return resp, nil
}

// claimFor bounds a station's claim on one dead letter, longer than a
// Publish may take: a station that dies holding it leaves the dead letter
// waiting no longer than that.
const claimFor = 2 * time.Minute

// redriveOne publishes one dead letter's task to the task topic and marks
// the record redriven. Stations each keep their own list, so two redrives
// on two stations can pick the same record: a claim in Redis lets one of
// them put it back, and the other reports false (not done by this call).
func (d *DLQ) redriveOne(ctx context.Context, e *entry) (bool, error) {
	claim := d.keys.DLQClaim(e.id())
	ok, err := d.rdb.SetNX(ctx, claim, "1", claimFor).Result()
	if err != nil {
		return false, storeErr("claim a dead letter", err)
	}
	if !ok {
		return false, nil
	}
	// Put back and marked, or not put back: either way the next redrive,
	// on any station, reads the mark under its own claim and decides.
	defer d.rdb.Del(context.WithoutCancel(ctx), claim)
	// Whoever held the claim before may have put the record back already.
	handled, err := d.rdb.HExists(ctx, d.keys.DLQHandled(), e.id()).Result()
	if err != nil {
		return false, storeErr("read the redriven records", err)
	}
	if handled {
		return false, nil
	}
	if err := d.publishOne(ctx, e); err != nil {
		return false, err
	}
	return true, nil
}

// publishOne publishes one dead letter's task to the task topic and marks
// the record redriven.
func (d *DLQ) publishOne(ctx context.Context, e *entry) error {
	dl, m, err := d.read(ctx, e)
	if err != nil {
		return err
	}
	task := proto.Clone(dl.GetPayload()).(*mqpb.Payload)
	task.RetryCount, task.LastAttemptAt = 0, 0
	task.RedriveCount++
	v, err := proto.Marshal(task)
	if err != nil {
		return err
	}
	key := m.Key
	if key == "" {
		key = e.sum.GetUid()
	}
	if err := d.pub.Publish(ctx, queue.Record{Topic: d.cfg.TaskTopic, Key: key, Value: v}); err != nil {
		return err
	}
	if err := d.rdb.HSet(ctx, d.keys.DLQHandled(), e.id(), strconv.FormatInt(e.sum.GetDeadAt(), 10)).Err(); err != nil {
		// The task is on the task topic: a later redrive may put it back
		// once more (at least once, as everywhere; clients de-duplicate by
		// seq), but nothing is lost.
		return storeErr("mark a redriven record", err)
	}
	d.log.Info("dead letter redriven", zap.Int64("task_seq", e.sum.GetSeq()), zap.String("uid", e.sum.GetUid()),
		zap.Int32("redrive_count", task.RedriveCount), zap.String("record", e.id()))
	return nil
}
