package boat

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/outage"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// reporter tells station about ended sessions in batches, so that many
// sessions ending at once (a boat draining) cost a few RPCs and Redis round
// trips, not one each.
//
// While station is down the reports wait in a backlog, one per sid (a sid
// reported again — a ghost sweep finding it twice — is not added twice), of
// at most backlog reports. Beyond it the newest report is dropped: the
// backlog keeps the order in which sessions ended and what it already holds;
// a dropped session stays recorded in Redis until carrier finds the boat
// does not hold it, the boat's ghost sweep reports it once station answers
// again, or the boat restarts (ResetBoat).
type reporter struct {
	boatID  string
	station stationpb.StationClient
	log     *zap.Logger
	batch   int
	flush   time.Duration
	backlog int
	// stationDown, when set, logs an outage of station once.
	stationDown *outage.Tracker
	// dropped, when set, counts one report dropped at the backlog's cap.
	dropped func()

	mu      sync.Mutex
	pending []*stationpb.SessionRef
	queued  map[string]struct{} // sids in pending
	drops   int                 // dropped since the backlog was last below its cap
	kick    chan struct{}
}

func newReporter(boatID string, station stationpb.StationClient, log *zap.Logger, batch, backlog int, flush time.Duration) *reporter {
	return &reporter{boatID: boatID, station: station, log: log, batch: batch, backlog: backlog, flush: flush,
		queued: make(map[string]struct{}), kick: make(chan struct{}, 1)}
}

func (r *reporter) add(ref *stationpb.SessionRef) {
	r.mu.Lock()
	if _, ok := r.queued[ref.GetSid()]; ok {
		r.mu.Unlock()
		return
	}
	if len(r.pending) >= r.backlog {
		r.drop(1)
		r.mu.Unlock()
		return
	}
	r.queued[ref.GetSid()] = struct{}{}
	r.pending = append(r.pending, ref)
	full := len(r.pending) >= r.batch
	r.mu.Unlock()
	if full {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
}

// drop counts n reports dropped at the cap and logs the first of a burst.
// Called with mu held.
func (r *reporter) drop(n int) {
	if r.drops == 0 {
		r.log.Warn("disconnect backlog full (station unreachable?); dropping the newest reports, the ghost sweep reports them once station answers",
			zap.Int("backlog", r.backlog))
	}
	r.drops += n
	if r.dropped != nil {
		for range n {
			r.dropped()
		}
	}
}

// Len is the number of reports waiting.
func (r *reporter) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Run flushes every flush interval, or sooner when a batch fills.
func (r *reporter) Run(ctx context.Context) error {
	t := time.NewTicker(r.flush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-r.kick:
		}
		r.flushAll(ctx)
	}
}

// flushAll sends everything pending; a failed batch is kept for the next
// flush (a session left in Redis is only dirty data that carrier repairs, but
// reporting it keeps pushes from trying it).
func (r *reporter) flushAll(ctx context.Context) {
	for {
		r.mu.Lock()
		n := min(len(r.pending), r.batch)
		if n == 0 {
			r.endBurst()
			r.mu.Unlock()
			return
		}
		refs := r.pending[:n:n]
		r.pending = r.pending[n:]
		for _, ref := range refs {
			delete(r.queued, ref.GetSid())
		}
		r.mu.Unlock()
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := r.station.Disconnect(callCtx, &stationpb.DisconnectRequest{Sessions: refs, BoatId: r.boatID})
		cancel()
		if err != nil {
			if r.stationDown != nil {
				r.stationDown.Fail(fmt.Errorf("report %d disconnects (will retry): %w", len(refs), err))
			} else {
				r.log.Warn("report disconnects failed; will retry", zap.Int("sessions", len(refs)), zap.Error(err))
			}
			r.requeue(refs)
			return
		}
		if r.stationDown != nil {
			r.stationDown.OK()
		}
	}
}

// requeue puts a failed batch back in front, skipping sids reported again
// meanwhile; what no longer fits is dropped from the back (the newest).
func (r *reporter) requeue(refs []*stationpb.SessionRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	back := make([]*stationpb.SessionRef, 0, len(refs)+len(r.pending))
	for _, ref := range refs {
		if _, ok := r.queued[ref.GetSid()]; !ok {
			r.queued[ref.GetSid()] = struct{}{}
			back = append(back, ref)
		}
	}
	back = append(back, r.pending...)
	if over := len(back) - r.backlog; over > 0 {
		for _, ref := range back[r.backlog:] {
			delete(r.queued, ref.GetSid())
		}
		back = back[:r.backlog]
		r.drop(over)
	}
	r.pending = back
}

// endBurst logs how many reports a burst of drops lost, once the backlog
// emptied. Called with mu held.
func (r *reporter) endBurst() {
	if r.drops > 0 {
		r.log.Warn("disconnect backlog drained; reports were dropped meanwhile", zap.Int("dropped", r.drops))
		r.drops = 0
	}
}
