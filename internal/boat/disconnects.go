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
// trips, not one each (seed 003's TODO).
type reporter struct {
	boatID  string
	station stationpb.StationClient
	log     *zap.Logger
	batch   int
	flush   time.Duration
	// stationDown, when set, logs an outage of station once.
	stationDown *outage.Tracker

	mu      sync.Mutex
	pending []*stationpb.SessionRef
	kick    chan struct{}
}

func newReporter(boatID string, station stationpb.StationClient, log *zap.Logger, batch int, flush time.Duration) *reporter {
	return &reporter{boatID: boatID, station: station, log: log, batch: batch, flush: flush, kick: make(chan struct{}, 1)}
}

func (r *reporter) add(ref *stationpb.SessionRef) {
	r.mu.Lock()
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
			r.mu.Unlock()
			return
		}
		refs := r.pending[:n:n]
		r.pending = r.pending[n:]
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
			r.mu.Lock()
			r.pending = append(refs, r.pending...)
			r.mu.Unlock()
			return
		}
		if r.stationDown != nil {
			r.stationDown.OK()
		}
	}
}
