package boat

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gomsg/gomsg/internal/metrics"
	tu "github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/presencepb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// TestDisconnectBacklogWhileStationDown: while station is down the reports
// wait, one per sid, at most the backlog; beyond it the newest are dropped,
// counted under limit="disconnect_backlog" and logged once for the burst.
// When station is back, every kept report reaches it exactly once.
func TestDisconnectBacklogWhileStationDown(t *testing.T) {
	t.Parallel()
	st := startStation(t)
	st.down.Store(true)
	core, logs := observer.New(zap.WarnLevel)
	m := metrics.New()
	const backlog, ended = 50, 80
	r := newReporter("b1", st.client(t), zap.New(core), 10, backlog, 10*time.Millisecond)
	r.dropped = func() { m.LimitRejections.WithLabelValues("disconnect_backlog").Inc() }
	for i := range ended {
		sid := strconv.Itoa(i)
		// A sid reported three times (a ghost sweep finding it again) is
		// one report.
		for range 3 {
			r.add(&stationpb.SessionRef{Uid: "u" + sid, Sid: sid})
		}
		if n := r.Len(); n > backlog {
			t.Fatalf("backlog holds %d reports, cap %d", n, backlog)
		}
	}
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	stop := run()
	// Failed flushes put their batches back without growing the backlog
	// (counted once stopped: a batch in flight is out of it).
	tu.WaitFor(t, 5*time.Second, func() error {
		if n := len(logs.FilterMessageSnippet("report disconnects").All()); n < 3 {
			return tu.Errorf("%d failed flushes", n)
		}
		return nil
	})
	stop()
	if n := r.Len(); n != backlog {
		t.Fatalf("backlog holds %d reports, want %d", n, backlog)
	}
	// Every refused report counts (a dropped sid is not remembered).
	if got := testutil.ToFloat64(m.LimitRejections.WithLabelValues("disconnect_backlog")); got != 3*(ended-backlog) {
		t.Fatalf("limit rejections %v, want %d", got, 3*(ended-backlog))
	}
	if n := logs.FilterMessageSnippet("disconnect backlog full").Len(); n != 1 {
		t.Fatalf("%d 'backlog full' logs for one burst, want 1", n)
	}

	st.down.Store(false)
	t.Cleanup(run())
	// The backlog empties when the last batch is taken; the end of the
	// burst is logged once its call is answered.
	tu.WaitFor(t, 5*time.Second, func() error {
		if n := r.Len(); n > 0 {
			return tu.Errorf("%d reports not sent", n)
		}
		if logs.FilterMessageSnippet("reports were dropped").Len() == 0 {
			return tu.Errorf("the end of the burst is not logged yet")
		}
		return nil
	})
	got := st.reported()
	if len(got) != backlog {
		t.Fatalf("station got %d sessions, want the %d oldest", len(got), backlog)
	}
	// Once each, but for the batch whose call stop() cancelled: the stand-in
	// may have taken that request after it came up again (a cancelled RPC is
	// at-least-once; a second report of an ended session is harmless).
	twice := 0
	for i := range backlog {
		switch n := got[strconv.Itoa(i)]; {
		case n == 2:
			twice++
		case n != 1:
			t.Errorf("sid %d reported %d times, want once", i, n)
		}
	}
	if twice > 10 {
		t.Errorf("%d sids reported twice, want at most one batch (10)", twice)
	}
	if n := logs.FilterMessageSnippet("reports were dropped").Len(); n != 1 {
		t.Fatalf("%d end-of-burst logs, want 1", n)
	}
	// A new burst logs again (one batch of 10 may be in flight, out of the
	// backlog).
	st.down.Store(true)
	for i := range backlog + 10 + 1 {
		r.add(&stationpb.SessionRef{Uid: "v", Sid: fmt.Sprintf("v%d", i)})
	}
	if n := logs.FilterMessageSnippet("disconnect backlog full").Len(); n != 2 {
		t.Fatalf("%d 'backlog full' logs for two bursts, want 2", n)
	}
}

// TestBoatReportsEndedSessions: sessions that end are reported to station
// once each, through the boat's own reporter, with why they ended (station
// publishes it as a presence event): CLOSED for a client that went away,
// the kickout reason for a session the boat kicked.
func TestBoatReportsEndedSessions(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	var sids []string
	for i := range 5 {
		c := tb.connect(t, "u"+strconv.Itoa(i))
		sids = append(sids, c.sid)
		c.cancel()
	}
	kicks := map[string]msgpb.KickoutReason{}
	for i, r := range []msgpb.KickoutReason{msgpb.KickoutReason_NEW_SESSION, msgpb.KickoutReason_BY_REQUEST, msgpb.KickoutReason_ACK_TIMEOUT} {
		c := tb.connect(t, "k"+strconv.Itoa(i))
		if err := tb.Kickout(context.Background(), c.sid, r); err != nil {
			t.Fatal(err)
		}
		kicks[c.sid] = r
		sids = append(sids, c.sid)
	}
	tu.WaitFor(t, 5*time.Second, func() error {
		got := tb.station.reported()
		for _, sid := range sids {
			if got[sid] != 1 {
				return tu.Errorf("sid %s reported %d times", sid, got[sid])
			}
		}
		return nil
	})
	for _, sid := range sids {
		want := presencepb.Reason_CLOSED
		if r, ok := kicks[sid]; ok {
			want = presencepb.Reason(presencepb.Reason_value[r.String()])
		}
		if got := tb.station.reason(sid); got != want {
			t.Errorf("sid %s reported ended for %v, want %v", sid, got, want)
		}
	}
	if n := tb.Sessions(); n != 0 {
		t.Fatalf("boat holds %d sessions after all ended", n)
	}
}

// TestRequeueRecapsTheBacklog: a batch put back after a failed report goes
// in front, and the backlog's cap is applied again: reports added while the
// batch was out of the backlog (in flight) make room for themselves, so what
// no longer fits is dropped from the back (the newest), counted, and
// forgotten, so that a sid dropped there is taken again later.
func TestRequeueRecapsTheBacklog(t *testing.T) {
	t.Parallel()
	st := startStation(t)
	st.down.Store(true)
	gate := make(chan struct{})
	st.mu.Lock()
	st.gate = gate
	st.mu.Unlock()
	const backlog, batch = 10, 4
	r := newReporter("b1", st.client(t), zap.NewNop(), batch, backlog, time.Hour)
	var dropped atomic.Int64
	r.dropped = func() { dropped.Add(1) }
	ref := func(i int) *stationpb.SessionRef { return &stationpb.SessionRef{Uid: "u", Sid: "s" + strconv.Itoa(i)} }
	for i := range backlog {
		r.add(ref(i))
	}
	flushed := make(chan struct{})
	go func() { r.flushAll(context.Background()); close(flushed) }()
	// The first batch is in flight, out of the backlog: four more fit.
	tu.WaitFor(t, 5*time.Second, func() error {
		st.mu.Lock()
		defer st.mu.Unlock()
		if st.entered == 0 {
			return tu.Errorf("no report in flight")
		}
		return nil
	})
	for i := backlog; i < backlog+batch; i++ {
		r.add(ref(i))
	}
	if n, d := r.Len(), dropped.Load(); n != backlog || d != 0 {
		t.Fatalf("with a batch in flight: backlog %d, %d dropped; want %d, 0", n, d, backlog)
	}
	close(gate) // station answers Unavailable: the batch comes back
	<-flushed
	if n := r.Len(); n != backlog {
		t.Fatalf("backlog holds %d reports after the failed batch came back, cap %d", n, backlog)
	}
	if d := dropped.Load(); d != batch {
		t.Fatalf("%d reports dropped, want the %d newest", d, batch)
	}
	r.mu.Lock()
	var sids []string
	for _, p := range r.pending {
		sids = append(sids, p.GetSid())
	}
	queued := len(r.queued)
	r.mu.Unlock()
	for i, sid := range sids {
		if want := "s" + strconv.Itoa(i); sid != want {
			t.Fatalf("backlog %v, want s0..s9 in order (the batch back in front, the newest dropped)", sids)
		}
	}
	if queued != backlog {
		t.Fatalf("%d sids remembered as queued, want %d", queued, backlog)
	}
	// Station answers again: the ten kept are reported once each; a dropped
	// sid reported again is taken.
	st.down.Store(false)
	r.flushAll(context.Background())
	r.add(ref(backlog))
	if n := r.Len(); n != 1 {
		t.Fatalf("backlog %d after re-adding a dropped sid, want 1", n)
	}
	r.flushAll(context.Background())
	got := st.reported()
	for i := range backlog + batch {
		want := 1
		if i > backlog {
			want = 0
		}
		if n := got["s"+strconv.Itoa(i)]; n != want {
			t.Fatalf("s%d reported %d times, want %d (got %v)", i, n, want, got)
		}
	}
}

// TestRequeueExactFitDropsNothing: a failed batch that fits back exactly
// drops nothing and logs no "backlog full".
func TestRequeueExactFitDropsNothing(t *testing.T) {
	t.Parallel()
	st := startStation(t)
	st.down.Store(true)
	core, logs := observer.New(zap.WarnLevel)
	r := newReporter("b1", st.client(t), zap.New(core), 4, 10, time.Hour)
	var dropped atomic.Int64
	r.dropped = func() { dropped.Add(1) }
	for i := range 10 {
		r.add(&stationpb.SessionRef{Sid: strconv.Itoa(i)})
	}
	r.flushAll(context.Background())
	if n, d := r.Len(), dropped.Load(); n != 10 || d != 0 {
		t.Fatalf("backlog %d, %d dropped after a failed batch came back; want 10, 0", n, d)
	}
	if n := logs.FilterMessageSnippet("disconnect backlog full").Len(); n != 0 {
		t.Fatalf("%d 'backlog full' logs with nothing dropped", n)
	}
	// Drained with nothing dropped: no end-of-burst log.
	st.down.Store(false)
	r.flushAll(context.Background())
	r.flushAll(context.Background())
	if n := r.Len(); n != 0 {
		t.Fatalf("backlog %d after station answered", n)
	}
	if n := logs.FilterMessageSnippet("reports were dropped").Len(); n != 0 {
		t.Fatalf("%d end-of-burst logs with nothing dropped", n)
	}
}

// TestReporterFlushesAFullBatchAtOnce: the add that fills a batch wakes the
// reporter, not the ones before it.
func TestReporterFlushesAFullBatchAtOnce(t *testing.T) {
	t.Parallel()
	r := newReporter("b1", nil, zap.NewNop(), 3, 100, time.Hour)
	for i := range 3 {
		if n := len(r.kick); n != 0 {
			t.Fatalf("reporter woken with %d of 3 reports", i)
		}
		r.add(&stationpb.SessionRef{Sid: strconv.Itoa(i)})
	}
	if n := len(r.kick); n != 1 {
		t.Fatal("reporter not woken by a full batch")
	}
}

// TestGhostSweepReportsSessionsNotHeld: the sessions station recorded for
// the boat that it does not hold are reported ended, page after page; the
// one it holds is not; the sweep runs every --ghost-sweep-interval.
func TestGhostSweepReportsSessionsNotHeld(t *testing.T) {
	t.Parallel()
	st := startStation(t)
	core, logs := observer.New(zap.InfoLevel)
	tb := startBoatWith(t, boatOpts{st: st, log: core, edit: func(c *Config) { c.GhostSweep = 100 * time.Millisecond }})
	c := tb.connect(t, "u1")
	// Sweeps that find nothing log nothing.
	tu.WaitFor(t, 5*time.Second, func() error {
		if n := logs.FilterMessageSnippet("boat serving").Len(); n != 1 {
			return tu.Errorf("not serving")
		}
		return nil
	})
	var refs []*stationpb.SessionRef
	for i := range 5 {
		refs = append(refs, &stationpb.SessionRef{Uid: "g", Sid: "ghost" + strconv.Itoa(i)})
	}
	refs = append(refs[:2], append([]*stationpb.SessionRef{{Uid: "u1", Sid: c.sid}}, refs[2:]...)...)
	st.setSessions(refs...)
	n, err := tb.sweepGhosts(context.Background())
	if err != nil || n != 5 {
		t.Fatalf("sweep found %d ghosts (%v), want 5", n, err)
	}
	tu.WaitFor(t, 5*time.Second, func() error {
		got := st.reported()
		for i := range 5 {
			if got["ghost"+strconv.Itoa(i)] < 1 {
				return tu.Errorf("ghost%d not reported: %v", i, got)
			}
		}
		return nil
	})
	if got := st.reported(); got[c.sid] != 0 {
		t.Fatalf("held session %s reported ended", c.sid)
	}
	for i := range 5 {
		if r := st.reason("ghost" + strconv.Itoa(i)); r != presencepb.Reason_NOT_HELD {
			t.Fatalf("ghost%d reported ended for %v, want NOT_HELD", i, r)
		}
	}
	// The periodic sweep reports a ghost recorded later.
	st.setSessions(&stationpb.SessionRef{Uid: "g", Sid: "late"})
	tu.WaitFor(t, 5*time.Second, func() error {
		if st.reported()["late"] < 1 {
			return tu.Errorf("ghost recorded later not reported")
		}
		return nil
	})
	sweepLogs := logs.FilterMessageSnippet("removing sessions recorded")
	if sweepLogs.Len() == 0 {
		t.Fatal("periodic sweep that found a ghost logged nothing")
	}
	if n := logs.FilterMessageSnippet("sweep failed").Len(); n != 0 {
		t.Fatalf("%d 'sweep failed' logs while station answers", n)
	}
	st.down.Store(true)
	defer st.down.Store(false)
	if _, err := tb.sweepGhosts(context.Background()); err == nil {
		t.Fatal("sweep with station down: no error")
	}
	tu.WaitFor(t, 5*time.Second, func() error {
		if logs.FilterMessageSnippet("sweep failed").Len() == 0 {
			return tu.Errorf("failed periodic sweep not logged")
		}
		return nil
	})
	// Only sweeps that found ghosts logged removing them.
	for _, e := range logs.FilterMessageSnippet("removing sessions recorded").All() {
		if n, _ := e.ContextMap()["sessions"].(int64); n < 1 {
			t.Fatalf("sweep logged %v sessions removed", e.ContextMap()["sessions"])
		}
	}
}
