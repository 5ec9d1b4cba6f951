package station

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/presencepb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// connectTasks splits tasks by kind: the sids kicked and the sids whose
// offline replay was queued, per uid, checking every task is keyed by its uid.
func connectTasks(t *testing.T, keys []string, tasks []*mqpb.Payload) (kicked, replayed map[string][]string) {
	t.Helper()
	kicked, replayed = map[string][]string{}, map[string][]string{}
	for i, p := range tasks {
		switch b := p.GetBody().(type) {
		case *mqpb.Payload_KickoutSession:
			k := b.KickoutSession
			if keys[i] != k.GetUid() || k.GetReason() != msgpb.KickoutReason_NEW_SESSION {
				t.Fatalf("kickout %v keyed %q, want keyed by its uid with reason NEW_SESSION", k, keys[i])
			}
			kicked[k.GetUid()] = append(kicked[k.GetUid()], k.GetSid())
		case *mqpb.Payload_SendOfflineToSession:
			o := b.SendOfflineToSession
			if keys[i] != o.GetUid() {
				t.Fatalf("replay %v keyed %q", o, keys[i])
			}
			replayed[o.GetUid()] = append(replayed[o.GetUid()], o.GetSid())
		default:
			t.Fatalf("unexpected task %v", p)
		}
	}
	return kicked, replayed
}

// N Connects for one uid+platform at once. Once all returned, every session
// but one got a KickoutSession, and that one — the connect recorded last —
// none and a replay; carrying out the kicks (as carrier does: remove the
// record) leaves exactly it recorded. Sids are handed out in an order
// unrelated to the order the goroutines reach Redis, so an older sid often
// writes last.
func TestConnectRaceKeepsOnlyNewest(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	const rounds, n = 40, 6
	for round := range rounds {
		uid := fmt.Sprint("racer", round)
		sids := raceConnects(t, r, uid, round, n, 5)
		keys, tasks := r.tasks()
		kicked, replayed := connectTasks(t, keys, tasks)
		got := slices.Compact(slices.Sorted(slices.Values(kicked[uid])))
		survivors := slices.DeleteFunc(slices.Clone(sids), func(s string) bool { return slices.Contains(got, s) })
		if len(got) != n-1 || len(survivors) != 1 {
			t.Fatalf("round %d: kicked %v of %v, want every sid but one", round, got, sids)
		}
		newest := survivors[0]
		if !slices.Contains(replayed[uid], newest) {
			t.Fatalf("round %d: no replay queued for the newest session %s (replays %v)", round, newest, replayed[uid])
		}
		for _, sid := range kicked[uid] {
			if err := r.sessions.Remove(context.Background(), uid, session.Session{Sid: sid, BoatID: testBoat}); err != nil {
				t.Fatal(err)
			}
		}
		if left := r.recorded(uid); !slices.Equal(left, []string{newest}) {
			t.Fatalf("round %d: recorded after the kicks %v, want only %s", round, left, newest)
		}
	}
}

// Connect kicks the older sessions of its platform only. Older means
// connected earlier, whatever the sids say: boats mint sids from their own
// clocks, and a device reconnecting through a boat whose clock is behind
// must beat its own half-open old session, not be told NEW_SESSION. Other
// platforms and other users are left alone.
func TestConnectKicksOnlyOlderSessionsOfItsPlatform(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	steps := []struct {
		uid, platform, sid string
		kicked             []string
		replay             bool
	}{
		{"ann", "ios", "100", nil, true},
		{"ann", "web", "200", nil, true},
		{"bob", "ios", "150", nil, true},
		{"ann", "ios", "300", []string{"100"}, true},
		{"ann", "ios", "250", []string{"100", "300"}, true}, // a smaller sid, connected later: it wins
		{"ann", "web", "1000", []string{"200"}, true},
		{"ann", "web", "90", []string{"200", "1000"}, true}, // shorter sid, later connect
	}
	for _, st := range steps {
		if err := r.connect(st.uid, st.platform, st.sid); err != nil {
			t.Fatal(err)
		}
		keys, tasks := r.tasks()
		kicked, replayed := connectTasks(t, keys, tasks)
		if !slices.Equal(kicked[st.uid], st.kicked) || len(kicked) > 1 {
			t.Fatalf("connect %s/%s/%s kicked %v, want %v", st.uid, st.platform, st.sid, kicked, st.kicked)
		}
		if want := map[bool]int{true: 1}[st.replay]; len(replayed[st.uid]) != want || want == 1 && replayed[st.uid][0] != st.sid {
			t.Fatalf("connect %s/%s/%s queued replays %v, want %d of it", st.uid, st.platform, st.sid, replayed, want)
		}
		if len(tasks) > 0 && tasks[len(tasks)-1].GetKickoutSession() != nil && st.replay {
			t.Fatalf("replay of %s queued before a kickout: %v", st.sid, tasks)
		}
	}
	// Nothing was carried out: every session is still recorded.
	if got := r.recorded("ann"); !slices.Equal(got, []string{"90", "100", "200", "250", "300", "1000"}) {
		t.Fatalf("ann's sessions %v", got)
	}
}

// With keep-all, sessions of one platform coexist: nobody is kicked.
func TestConnectKeepAllKicksNobody(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.KickPolicy = KeepAll })
	for _, sid := range []string{"300", "100", "200"} {
		if err := r.connect("ann", "ios", sid); err != nil {
			t.Fatal(err)
		}
	}
	keys, tasks := r.tasks()
	kicked, replayed := connectTasks(t, keys, tasks)
	if len(kicked) != 0 || !slices.Equal(replayed["ann"], []string{"300", "100", "200"}) {
		t.Fatalf("kicked %v, replayed %v; want no kick and three replays", kicked, replayed)
	}
	if got := r.recorded("ann"); len(got) != 3 {
		t.Fatalf("recorded %v, want 3 sessions", got)
	}
}

// A Connect refused for bad input records and publishes nothing.
func TestConnectRefusesBadInput(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx := context.Background()
	cases := []struct {
		name, token, boat, sid string
		code                   codes.Code
		field                  string
	}{
		{"no boat", r.token("ann", "ios"), "", "1", codes.InvalidArgument, "boat_id"},
		{"no sid", r.token("ann", "ios"), testBoat, "", codes.InvalidArgument, "sid"},
		{"bad token", "not-a-jwt", testBoat, "2", codes.Unauthenticated, ""},
		{"wrong secret", mint(t, "other-secret", "ann", "ios"), testBoat, "3", codes.Unauthenticated, ""},
		{"unknown platform", r.token("ann", "beos"), testBoat, "4", codes.InvalidArgument, "token.platform"},
		{"bad uid", r.token("a/b", "ios"), testBoat, "5", codes.InvalidArgument, "uid"},
	}
	for _, c := range cases {
		_, err := r.s.Connect(ctx, c.token, c.boat, c.sid)
		if st := status.Convert(grpcerr.Status(err)); st.Code() != c.code {
			t.Fatalf("%s: %v, want %v", c.name, err, c.code)
		}
		if c.field != "" {
			invalid(t, err, c.field)
		}
	}
	for _, uid := range []string{"ann", "a/b"} {
		if got := r.recorded(uid); len(got) != 0 {
			t.Fatalf("%s recorded %v after refused connects", uid, got)
		}
	}
	r.noTasks("refused connects")
}

// At the per-platform cap a Connect is refused with ResourceExhausted and
// writes nothing, unless the sessions at the cap are on a boat etcd no
// longer lists: those are pruned and the connect goes through.
func TestConnectCap(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.KickPolicy = KeepAll; c.MaxSessionsPerPlatform = 2 })
	r.s.etcd = testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	boatKey := discovery.BoatKey(r.s.cfg.EtcdPrefix, testBoat)
	if _, err := r.s.etcd.Put(ctx, boatKey, "up"); err != nil {
		t.Fatal(err)
	}
	for _, sid := range []string{"1", "2"} {
		if err := r.connect("ann", "ios", sid); err != nil {
			t.Fatal(err)
		}
	}
	r.tasks()
	err := r.connect("ann", "ios", "3")
	if st := status.Convert(grpcerr.Status(err)); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "--max-sessions-per-platform") {
		t.Fatalf("connect at the cap: %v, want ResourceExhausted naming --max-sessions-per-platform", err)
	}
	if got := r.recorded("ann"); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("recorded %v after a refused connect, want 1 and 2", got)
	}
	r.noTasks("refused connect")
	// Another platform has its own cap.
	if err := r.connect("ann", "web", "4"); err != nil {
		t.Fatal(err)
	}
	r.tasks()
	if _, err := r.s.etcd.Delete(ctx, boatKey); err != nil {
		t.Fatal(err)
	}
	if err := r.connect("ann", "ios", "5"); err != nil {
		t.Fatalf("connect at the cap with a dead boat: %v, want its sessions pruned and accepted", err)
	}
	if got := r.recorded("ann"); !slices.Equal(got, []string{"5"}) {
		t.Fatalf("recorded %v, want only 5 (the dead boat's pruned)", got)
	}
}

// A connect at the uid cap whose user holds records of a boat etcd no
// longer lists: station prunes exactly those, records the connect on its
// retry, and the retry still picks the losers (kick-older): the older
// session of the platform on a live boat is kicked, the new one gets its
// replay, and the live boat's records stay.
func TestConnectCapRetryAfterPrune(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.MaxSessionsPerUID, c.MaxSessionsPerPlatform = 3, 3 })
	r.s.etcd = testutil.EtcdClient(t, testutil.StartEtcd(t))
	ctx := context.Background()
	if _, err := r.s.etcd.Put(ctx, discovery.BoatKey(r.s.cfg.EtcdPrefix, testBoat), "up"); err != nil {
		t.Fatal(err)
	}
	if err := r.connect("ann", "ios", "1"); err != nil {
		t.Fatal(err)
	}
	// Two records of a boat that died without telling anyone.
	for _, ss := range []session.Session{{Sid: "2", Platform: "web", BoatID: "gone"}, {Sid: "3", Platform: "android", BoatID: "gone"}} {
		if _, err := r.sessions.Add(ctx, "ann", ss, session.Caps{}, false); err != nil {
			t.Fatal(err)
		}
	}
	r.tasks()
	if err := r.connect("ann", "ios", "4"); err != nil {
		t.Fatalf("connect at the cap with a dead boat's records: %v", err)
	}
	if got := r.recorded("ann"); !slices.Equal(got, []string{"1", "4"}) {
		t.Fatalf("recorded %v, want 1 (live, until its kickout) and 4; the dead boat's pruned", got)
	}
	keys, tasks := r.tasks()
	kicked, replayed := connectTasks(t, keys, tasks)
	if !slices.Equal(kicked["ann"], []string{"1"}) || !slices.Equal(replayed["ann"], []string{"4"}) {
		t.Fatalf("after the retry: kicked %v, replayed %v; want 1 kicked and 4 replayed", kicked, replayed)
	}
	// With no dead boat to prune, the cap holds.
	if err := r.connect("ann", "web", "5"); err != nil {
		t.Fatal(err)
	}
	r.tasks()
	err := r.connect("ann", "android", "6")
	if st := status.Convert(grpcerr.Status(err)); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "--max-sessions-per-uid") {
		t.Fatalf("connect at the cap with only live boats: %v, want ResourceExhausted naming --max-sessions-per-uid", err)
	}
	r.noTasks("refused connect")
}

// Disconnect removes exactly the reported sessions: the user's others and
// their boat index entries stay. A report with a bad entry removes nothing.
func TestDisconnectRemovesOnlyItsOwnSessions(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.KickPolicy = KeepAll })
	ctx := context.Background()
	for _, sid := range []string{"1", "2", "3"} {
		if err := r.connect("ann", "ios", sid); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.connect("bob", "ios", "2"); err != nil {
		t.Fatal(err)
	}
	r.tasks()
	err := r.s.Disconnect(ctx, []session.Ref{{UID: "ann", Sid: "1", BoatID: testBoat}, {UID: "ann", BoatID: testBoat}}, make([]presencepb.Reason, 2))
	invalid(t, err, "sessions")
	if got := r.recorded("ann"); len(got) != 3 {
		t.Fatalf("a refused report removed sessions: %v left", got)
	}
	if err := r.s.Disconnect(ctx, []session.Ref{{UID: "ann", Sid: "2", BoatID: testBoat}}, []presencepb.Reason{presencepb.Reason_CLOSED}); err != nil {
		t.Fatal(err)
	}
	if got := r.recorded("ann"); !slices.Equal(got, []string{"1", "3"}) {
		t.Fatalf("ann after disconnecting 2: %v, want 1 and 3", got)
	}
	if got := r.recorded("bob"); !slices.Equal(got, []string{"2"}) {
		t.Fatalf("bob after ann's 2 went: %v, want his 2 kept", got)
	}
	members := r.rdb.SMembers(ctx, rkeys.Of(r.rdb).BoatSessions(testBoat)).Val()
	slices.Sort(members)
	if want := []string{"ann 1", "ann 3", "bob 2"}; !slices.Equal(members, want) {
		t.Fatalf("boat index %v, want %v", members, want)
	}
	r.noTasks("disconnect")
}

// Resume records the sessions a boat still holds under that boat and queues
// one replay each; a bad entry refuses the whole call with nothing written.
func TestResume(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx := context.Background()
	bad := [][]*stationpb.ResumedSession{
		{{Uid: "ann", Sid: "1", Platform: "ios"}, {Uid: "", Sid: "2", Platform: "ios"}},
		{{Uid: "ann", Sid: "1", Platform: "ios"}, {Uid: "ann", Sid: "", Platform: "ios"}},
		{{Uid: "ann", Sid: "1", Platform: "ios"}, {Uid: "ann", Sid: "2", Platform: "beos"}},
	}
	for _, b := range bad {
		invalid(t, r.s.Resume(ctx, "b2", b), "sessions")
	}
	invalid(t, r.s.Resume(ctx, "", []*stationpb.ResumedSession{{Uid: "ann", Sid: "1", Platform: "ios"}}), "boat_id")
	if got := r.recorded("ann"); len(got) != 0 {
		t.Fatalf("refused resumes recorded %v", got)
	}
	r.noTasks("refused resumes")

	if err := r.s.Resume(ctx, "b2", []*stationpb.ResumedSession{
		{Uid: "ann", Sid: "1", Platform: "ios"}, {Uid: "bob", Sid: "7", Platform: "web"}}); err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[string]session.Session{"ann": {Sid: "1", Platform: "ios", BoatID: "b2"}, "bob": {Sid: "7", Platform: "web", BoatID: "b2"}} {
		got, ok, err := r.sessions.Get(ctx, uid, want.Sid)
		if err != nil || !ok || got != want {
			t.Fatalf("%s: %+v %v %v, want %+v", uid, got, ok, err, want)
		}
	}
	keys, tasks := r.tasks()
	_, replayed := connectTasks(t, keys, tasks)
	if len(tasks) != 2 || !slices.Equal(replayed["ann"], []string{"1"}) || !slices.Equal(replayed["bob"], []string{"7"}) {
		t.Fatalf("tasks %v, want one replay for ann/1 and bob/7", tasks)
	}
	if p := tasks[1].GetSendOfflineToSession().GetPlatform(); p != "web" {
		t.Fatalf("bob's replay for platform %q, want web", p)
	}
}

// ResetBoat removes every session of that boat and no other.
func TestResetBoat(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.KickPolicy = KeepAll })
	ctx := context.Background()
	if err := r.s.Resume(ctx, "old", []*stationpb.ResumedSession{
		{Uid: "ann", Sid: "1", Platform: "ios"}, {Uid: "bob", Sid: "2", Platform: "ios"}, {Uid: "ann", Sid: "3", Platform: "web"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.connect("ann", "ios", "4"); err != nil { // on testBoat
		t.Fatal(err)
	}
	_, err := r.s.ResetBoat(ctx, "", false)
	invalid(t, err, "boat_id")
	n, err := r.s.ResetBoat(ctx, "old", false)
	if err != nil || n != 3 {
		t.Fatalf("ResetBoat = %d, %v; want 3", n, err)
	}
	if got := r.recorded("ann"); !slices.Equal(got, []string{"4"}) {
		t.Fatalf("ann after reset: %v, want only 4 (other boat)", got)
	}
	if got := r.recorded("bob"); len(got) != 0 {
		t.Fatalf("bob after reset: %v", got)
	}
	if n, err := r.s.ResetBoat(ctx, "old", false); err != nil || n != 0 {
		t.Fatalf("second ResetBoat = %d, %v; want 0", n, err)
	}
}

// A draining boat's clear removes at most DrainClearRate sessions a second
// (a page at once), so 1,500 at 1,000/s take at least a second; one that
// runs out of time stops with DeadlineExceeded and keeps the rest recorded
// for the boat's own reports. A restarted boat's reset is not paced.
func TestResetBoatDrainingIsPaced(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.KickPolicy = KeepAll; c.DrainClearRate = 1000 })
	ctx := context.Background()
	resume := func(boat string, n int) {
		t.Helper()
		var ss []*stationpb.ResumedSession
		for i := range n {
			ss = append(ss, &stationpb.ResumedSession{Uid: fmt.Sprint("u", i), Sid: fmt.Sprint(boat, i), Platform: "ios"})
		}
		if err := r.s.Resume(ctx, boat, ss); err != nil {
			t.Fatal(err)
		}
	}
	const n = 1500
	resume("drainer", n)
	start := time.Now()
	removed, err := r.s.ResetBoat(ctx, "drainer", true)
	if took := time.Since(start); err != nil || removed != n || took < 900*time.Millisecond {
		t.Fatalf("draining reset of %d at 1000/s: %d removed, %v, in %s; want all, in at least 0.9 s", n, removed, err, took)
	}
	if left, err := r.rdb.SCard(ctx, rkeys.Standalone.BoatSessions("drainer")).Result(); err != nil || left != 0 {
		t.Fatalf("drainer's index holds %d (%v) after its clear, want 0", left, err)
	}

	const m = 3000
	resume("late", m)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	removed, err = r.s.ResetBoat(short, "late", true)
	if status.Code(err) != codes.DeadlineExceeded || removed >= m-2000 {
		t.Fatalf("draining reset out of time: %d removed, %v; want DeadlineExceeded after at most %d", removed, err, m-2000)
	}
	left, err := r.rdb.SCard(ctx, rkeys.Standalone.BoatSessions("late")).Result()
	if err != nil || left != int64(m-removed) {
		t.Fatalf("late's index holds %d (%v) after %d of %d removed, want the rest", left, err, removed, m)
	}
	// The rest, over 2,000, would take 1.5 s paced.
	ctx15, cancel15 := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel15()
	if again, err := r.s.ResetBoat(ctx15, "late", false); err != nil || int64(again) != left {
		t.Fatalf("a restarted boat's reset of %d: %d removed, %v; want all, unpaced", left, again, err)
	}
}
