package boat

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/pb/presencepb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// sweepGhosts reports as disconnected every session station has recorded
// for this boat that the boat does not hold: the record of a connect whose
// answer never reached the boat (it timed out, or the link failed). The
// boat holds a session before station records it and drops it before
// reporting its end, so a recorded session the boat lacks has ended or
// never started; reporting an ended one twice is harmless.
func (b *Boat) sweepGhosts(ctx context.Context) (int, error) {
	var cursor uint64
	found := 0
	for {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := b.station.BoatSessions(callCtx, &stationpb.BoatSessionsRequest{BoatId: b.cfg.ID, Cursor: cursor})
		cancel()
		if err != nil {
			return found, err
		}
		for _, r := range resp.GetSessions() {
			if b.sessions.get(r.GetSid()) == nil {
				r.Reason = presencepb.Reason_NOT_HELD
				b.disconnects.add(r)
				found++
			}
		}
		if cursor = resp.GetCursor(); cursor == 0 {
			return found, nil
		}
	}
}

// runSweeps sweeps every --ghost-sweep-interval until ctx ends.
func (b *Boat) runSweeps(ctx context.Context) {
	t := time.NewTicker(b.cfg.GhostSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := b.sweepGhosts(ctx)
		if n > 0 {
			b.log.Info("removing sessions recorded for this boat that it does not hold", zap.Int("sessions", n))
		}
		if err != nil && ctx.Err() == nil {
			b.log.Warn("ghost session sweep failed; will retry", zap.Error(err))
		}
	}
}
