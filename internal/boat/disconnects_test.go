package boat

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gomsg/gomsg/internal/metrics"
	tu "github.com/gomsg/gomsg/internal/testutil"
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
	tu.WaitFor(t, 5*time.Second, func() error {
		if n := r.Len(); n > 0 {
			return tu.Errorf("%d reports not sent", n)
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
// once each, through the boat's own reporter.
func TestBoatReportsEndedSessions(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	var sids []string
	for i := range 5 {
		c := tb.connect(t, "u"+strconv.Itoa(i))
		sids = append(sids, c.sid)
		c.cancel()
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
	if n := tb.Sessions(); n != 0 {
		t.Fatalf("boat holds %d sessions after all ended", n)
	}
}
