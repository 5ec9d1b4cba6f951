package station

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/presencepb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// presenceRig is a rig with presence events on, its emitter running.
func presenceRig(t *testing.T, change func(*Config)) *rig {
	t.Helper()
	r := newRig(t, func(c *Config) {
		c.PresenceTopic = testPresenceTopic
		if change != nil {
			change(c)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.s.presence.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// presenceEvents reads the presence topic (one partition: the order events
// were written) until it holds want events, and fails past a deadline.
func (r *rig) presenceEvents(want int) []*presencepb.Event {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for r.endOf(testPresenceTopic) < int64(want) {
		if time.Now().After(deadline) {
			r.t.Fatalf("presence topic holds %d events, want %d", r.endOf(testPresenceTopic), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{r.kafka}, Topic: testPresenceTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	end := r.endOf(testPresenceTopic)
	var out []*presencepb.Event
	for int64(len(out)) < end {
		m, err := rd.ReadMessage(ctx)
		if err != nil {
			r.t.Fatal(err)
		}
		ev := &presencepb.Event{}
		if err := proto.Unmarshal(m.Value, ev); err != nil {
			r.t.Fatal(err)
		}
		if string(m.Key) != ev.GetUid() {
			r.t.Fatalf("event %v keyed %q, want its uid", ev, m.Key)
		}
		out = append(out, ev)
	}
	return out
}

// Connects of one uid+platform racing, then the boat's reports (the losers
// as kicked for NEW_SESSION, the newest closed, twice): for every sid its
// CONNECTED comes first and once; each loser is KICKED (NEW_SESSION), and its
// NEW_SESSION report adds nothing; the newest ends with one DISCONNECTED
// (CLOSED) though reported twice, and is never KICKED.
func TestPresenceOrderPerUID(t *testing.T) {
	t.Parallel()
	r := presenceRig(t, nil)
	ctx := context.Background()
	const rounds, n = 30, 5
	survivors := make([]string, rounds)
	for round := range rounds {
		uid := fmt.Sprint("racer", round)
		sids := raceConnects(t, r, uid, round, n, 3)
		// The survivor is the connect recorded last: the one sid not kicked.
		keys, tasks := r.tasks()
		kickedNow, _ := connectTasks(t, keys, tasks)
		others := slices.DeleteFunc(slices.Clone(sids), func(s string) bool { return !slices.Contains(kickedNow[uid], s) })
		newest := ""
		for _, sid := range sids {
			if !slices.Contains(others, sid) {
				newest = sid
			}
		}
		if len(others) != n-1 || newest == "" {
			t.Fatalf("%s: kicked %v of %v, want all but one", uid, kickedNow[uid], sids)
		}
		survivors[round] = newest
		var refs []session.Ref
		var reasons []presencepb.Reason
		for _, sid := range others {
			refs = append(refs, session.Ref{UID: uid, Sid: sid, BoatID: testBoat})
			reasons = append(reasons, presencepb.Reason_NEW_SESSION)
		}
		for range 2 {
			refs = append(refs, session.Ref{UID: uid, Sid: newest, BoatID: testBoat})
			reasons = append(reasons, presencepb.Reason_CLOSED)
		}
		if err := r.s.Disconnect(ctx, refs, reasons); err != nil {
			t.Fatal(err)
		}
	}
	// Every round ends with the newest's DISCONNECTED: wait for the last.
	var evs []*presencepb.Event
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs = r.presenceEvents(0)
		ended := 0
		for _, ev := range evs {
			if ev.GetKind() == presencepb.Kind_DISCONNECTED {
				ended++
			}
		}
		if ended >= rounds || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	byUID := map[string][]*presencepb.Event{}
	for _, ev := range evs {
		byUID[ev.GetUid()] = append(byUID[ev.GetUid()], ev)
	}
	for round := range rounds {
		uid := fmt.Sprint("racer", round)
		newest := survivors[round]
		connected := map[string]bool{}
		kicked := map[string]int{}
		disconnected := map[string]int{}
		for _, ev := range byUID[uid] {
			sid := ev.GetSid()
			if ev.GetPlatform() != "ios" || ev.GetBoatId() != testBoat || ev.GetTime() == 0 {
				t.Fatalf("%s: event %v lacks platform, boat or time", uid, ev)
			}
			switch ev.GetKind() {
			case presencepb.Kind_CONNECTED:
				if connected[sid] {
					t.Fatalf("%s: sid %s CONNECTED twice: %v", uid, sid, byUID[uid])
				}
				connected[sid] = true
				continue
			case presencepb.Kind_KICKED:
				if ev.GetReason() != presencepb.Reason_NEW_SESSION {
					t.Fatalf("%s: %v, want reason NEW_SESSION", uid, ev)
				}
				kicked[sid]++
			case presencepb.Kind_DISCONNECTED:
				if ev.GetReason() != presencepb.Reason_CLOSED {
					t.Fatalf("%s: %v, want reason CLOSED", uid, ev)
				}
				disconnected[sid]++
			}
			if !connected[sid] {
				t.Fatalf("%s: %v before the sid's CONNECTED; events %v", uid, ev, byUID[uid])
			}
		}
		if len(connected) != n {
			t.Fatalf("%s: %d sids CONNECTED, want %d: %v", uid, len(connected), n, byUID[uid])
		}
		for sid := range connected {
			switch {
			case sid == newest && (kicked[sid] != 0 || disconnected[sid] != 1):
				t.Fatalf("%s: newest %s kicked %d times, disconnected %d, want 0 and 1: %v", uid, sid, kicked[sid], disconnected[sid], byUID[uid])
			case sid != newest && (kicked[sid] == 0 || disconnected[sid] != 0):
				t.Fatalf("%s: loser %s kicked %d times, disconnected %d, want kicked and not disconnected: %v", uid, sid, kicked[sid], disconnected[sid], byUID[uid])
			}
		}
	}
}

// A boat's report names why each session ended: the boat's own kickouts are
// KICKED with their reason, the rest DISCONNECTED.
func TestPresenceDisconnectReasons(t *testing.T) {
	t.Parallel()
	r := presenceRig(t, func(c *Config) { c.KickPolicy = KeepAll })
	reasons := []presencepb.Reason{presencepb.Reason_ACK_TIMEOUT, presencepb.Reason_SLOW_CONSUMER,
		presencepb.Reason_SERVER_DRAINING, presencepb.Reason_CLOSED, presencepb.Reason_NOT_HELD, presencepb.Reason_REASON_UNSPECIFIED}
	var refs []session.Ref
	for i := range reasons {
		sid := fmt.Sprint(100 + i)
		if err := r.connect("ann", "web", sid); err != nil {
			t.Fatal(err)
		}
		refs = append(refs, session.Ref{UID: "ann", Sid: sid, BoatID: testBoat})
	}
	if err := r.s.Disconnect(context.Background(), refs, reasons); err != nil {
		t.Fatal(err)
	}
	evs := r.presenceEvents(2 * len(reasons))
	if len(evs) != 2*len(reasons) {
		t.Fatalf("%d events, want %d: %v", len(evs), 2*len(reasons), evs)
	}
	for i, want := range reasons {
		c, end := evs[i], evs[len(reasons)+i]
		if c.GetKind() != presencepb.Kind_CONNECTED || c.GetSid() != refs[i].Sid {
			t.Fatalf("event %d = %v, want CONNECTED of %s", i, c, refs[i].Sid)
		}
		kind := presencepb.Kind_DISCONNECTED
		if slices.Contains(reasons[:3], want) {
			kind = presencepb.Kind_KICKED
		}
		if end.GetKind() != kind || end.GetReason() != want || end.GetSid() != refs[i].Sid || end.GetPlatform() != "web" {
			t.Fatalf("end of %s = %v, want %v %v on web", refs[i].Sid, end, kind, want)
		}
	}
}

// A boat starting again under its id (ResetBoat) ends the sessions its
// previous run left as DISCONNECTED BOAT_GONE, once: a second reset finds
// nothing and adds nothing.
func TestPresenceResetBoat(t *testing.T) {
	t.Parallel()
	r := presenceRig(t, func(c *Config) { c.KickPolicy = KeepAll })
	ctx := context.Background()
	for _, sid := range []string{"10", "11"} {
		if _, err := r.s.Connect(ctx, r.token("bo", "android"), "old", sid); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := r.s.ResetBoat(ctx, "old", false); err != nil {
			t.Fatal(err)
		}
	}
	// A later event marks the end of what the resets published.
	if err := r.connect("marker", "ios", "99"); err != nil {
		t.Fatal(err)
	}
	evs := r.presenceEvents(5)
	ended := map[string]int{}
	for _, ev := range evs[2:4] {
		if ev.GetKind() != presencepb.Kind_DISCONNECTED || ev.GetReason() != presencepb.Reason_BOAT_GONE ||
			ev.GetUid() != "bo" || ev.GetPlatform() != "android" || ev.GetBoatId() != "old" {
			t.Fatalf("event %v, want DISCONNECTED BOAT_GONE of bo on android, boat old", ev)
		}
		ended[ev.GetSid()]++
	}
	if len(evs) != 5 || ended["10"] != 1 || ended["11"] != 1 || evs[4].GetUid() != "marker" {
		t.Fatalf("events %v, want 2 CONNECTED, one BOAT_GONE each for 10 and 11, then marker's CONNECTED", evs)
	}
}

// A boat's report of a session's end racing the session's Connect (a boat
// that gave up waiting reports the sid): whichever wins in Redis, no event
// of a sid comes before its CONNECTED, a sid still recorded at the end has
// no end event, and one removed has exactly CONNECTED then DISCONNECTED.
func TestPresenceConnectRacingDisconnect(t *testing.T) {
	t.Parallel()
	r := presenceRig(t, func(c *Config) { c.KickPolicy = KeepAll })
	ctx := context.Background()
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		uid, sid := fmt.Sprint("race", i%40), fmt.Sprint(5000+i)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := r.connect(uid, "web", sid); err != nil {
				t.Errorf("connect: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			// Spread the reports over the connect's steps.
			time.Sleep(time.Duration(i%25) * 100 * time.Microsecond)
			ref := session.Ref{UID: uid, Sid: sid, BoatID: testBoat}
			if err := r.s.Disconnect(ctx, []session.Ref{ref}, []presencepb.Reason{presencepb.Reason_CLOSED}); err != nil {
				t.Errorf("disconnect: %v", err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	if err := r.connect("marker", "ios", "1"); err != nil {
		t.Fatal(err)
	}
	var evs []*presencepb.Event
	testutil.WaitFor(t, 20*time.Second, func() error {
		evs = r.presenceEvents(0)
		if len(evs) == 0 || evs[len(evs)-1].GetUid() != "marker" {
			return fmt.Errorf("marker not read yet")
		}
		return nil
	})
	seen := map[string][]presencepb.Kind{}
	for _, ev := range evs[:len(evs)-1] {
		seen[ev.GetSid()] = append(seen[ev.GetSid()], ev.GetKind())
	}
	for i := range n {
		uid, sid := fmt.Sprint("race", i%40), fmt.Sprint(5000+i)
		_, recorded, err := r.sessions.Get(ctx, uid, sid)
		if err != nil {
			t.Fatal(err)
		}
		want := []presencepb.Kind{presencepb.Kind_CONNECTED, presencepb.Kind_DISCONNECTED}
		if recorded {
			want = want[:1]
		}
		if !slices.Equal(seen[sid], want) {
			t.Errorf("sid %s (recorded %v): events %v, want %v", sid, recorded, seen[sid], want)
		}
	}
}

// The Push API's Kickout publishes KICKED (BY_REQUEST) for each session it
// kicks once Kafka took the kickouts (carrier removes the records it
// kicks, so the boat's report finds nothing); the boat's BY_REQUEST report
// of the end adds nothing.
func TestPresenceKickoutByRequest(t *testing.T) {
	t.Parallel()
	r := presenceRig(t, func(c *Config) { c.KickPolicy = KeepAll })
	ctx := context.Background()
	for _, sid := range []string{"20", "21"} {
		if err := r.connect("kim", "ios", sid); err != nil {
			t.Fatal(err)
		}
	}
	sids, err := r.s.Kickout(ctx, &pushpb.KickoutRequest{Uid: "kim", Sid: "20"})
	if err != nil || !slices.Equal(sids, []string{"20"}) {
		t.Fatalf("Kickout = %v, %v; want [20]", sids, err)
	}
	ref := session.Ref{UID: "kim", Sid: "20", BoatID: testBoat}
	if err := r.s.Disconnect(ctx, []session.Ref{ref}, []presencepb.Reason{presencepb.Reason_BY_REQUEST}); err != nil {
		t.Fatal(err)
	}
	if err := r.connect("marker", "ios", "99"); err != nil {
		t.Fatal(err)
	}
	evs := r.presenceEvents(4)
	if len(evs) != 4 || evs[2].GetKind() != presencepb.Kind_KICKED || evs[2].GetReason() != presencepb.Reason_BY_REQUEST ||
		evs[2].GetSid() != "20" || evs[2].GetPlatform() != "ios" || evs[3].GetUid() != "marker" {
		t.Fatalf("events %v, want CONNECTED 20, 21, KICKED BY_REQUEST 20, then marker's CONNECTED", evs)
	}
}

// A draining boat clears its sessions at once (ResetBoat with draining):
// each live session ends as KICKED SERVER_DRAINING (as the boat's report
// of a drained session says), once — the
// boat's own report of it that follows finds it gone and adds nothing —
// and another boat's sessions stay.
func TestPresenceResetDrainingBoat(t *testing.T) {
	t.Parallel()
	r := presenceRig(t, func(c *Config) { c.KickPolicy = KeepAll })
	ctx := context.Background()
	for _, sid := range []string{"20", "21"} {
		if _, err := r.s.Connect(ctx, r.token("di", "android"), "going", sid); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.s.Connect(ctx, r.token("di", "ios"), "staying", "22"); err != nil {
		t.Fatal(err)
	}
	if n, err := r.s.ResetBoat(ctx, "going", true); err != nil || n != 2 {
		t.Fatalf("reset of the draining boat: %d, %v; want 2 removed", n, err)
	}
	if err := r.s.Disconnect(ctx, []session.Ref{{UID: "di", Sid: "20", BoatID: "going"}},
		[]presencepb.Reason{presencepb.Reason_SERVER_DRAINING}); err != nil {
		t.Fatal(err)
	}
	if err := r.connect("marker", "ios", "99"); err != nil {
		t.Fatal(err)
	}
	evs := r.presenceEvents(6)
	ended := map[string]int{}
	for _, ev := range evs[3:5] {
		if ev.GetKind() != presencepb.Kind_KICKED || ev.GetReason() != presencepb.Reason_SERVER_DRAINING ||
			ev.GetUid() != "di" || ev.GetPlatform() != "android" || ev.GetBoatId() != "going" {
			t.Fatalf("event %v, want KICKED SERVER_DRAINING of di on android, boat going", ev)
		}
		ended[ev.GetSid()]++
	}
	if len(evs) != 6 || ended["20"] != 1 || ended["21"] != 1 || evs[5].GetUid() != "marker" {
		t.Fatalf("events %v, want 3 CONNECTED, one SERVER_DRAINING each for 20 and 21, then marker's CONNECTED", evs)
	}
	left, err := r.sessions.List(ctx, "di")
	if err != nil || len(left) != 1 || left[0].Sid != "22" {
		t.Fatalf("sessions of di after the reset: %v, %v; want only 22 on the other boat", left, err)
	}
}
