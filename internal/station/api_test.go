package station

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// Kickout queues a BY_REQUEST kickout of exactly the selected sessions and
// returns their sids; Online lists the recorded sessions of each distinct
// uid.
func TestKickoutAndOnline(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.KickPolicy = KeepAll; c.MaxUIDs = 3 })
	ctx := context.Background()
	for _, s := range []struct{ uid, platform, sid string }{{"ann", "ios", "1"}, {"ann", "ios", "2"}, {"ann", "web", "3"}, {"bob", "ios", "4"}} {
		if err := r.connect(s.uid, s.platform, s.sid); err != nil {
			t.Fatal(err)
		}
	}
	r.tasks()
	cases := []struct {
		req  *pushpb.KickoutRequest
		sids []string
	}{
		{&pushpb.KickoutRequest{Uid: "ann", Platform: "ios"}, []string{"1", "2"}},
		{&pushpb.KickoutRequest{Uid: "ann", Sid: "3"}, []string{"3"}},
		{&pushpb.KickoutRequest{Uid: "ann", Platform: "web", Sid: "1"}, nil},
		{&pushpb.KickoutRequest{Uid: "ann", Platform: "ios", Sid: "2"}, []string{"2"}},
		{&pushpb.KickoutRequest{Uid: "ann"}, []string{"1", "2", "3"}},
		{&pushpb.KickoutRequest{Uid: "nobody"}, nil},
	}
	for _, c := range cases {
		sids, err := r.s.Kickout(ctx, c.req)
		if err != nil || !slices.Equal(sids, c.sids) {
			t.Fatalf("Kickout(%v) = %v, %v; want %v", c.req, sids, err, c.sids)
		}
		keys, tasks := r.tasks()
		var kicked []string
		for i, p := range tasks {
			k := p.GetKickoutSession()
			if keys[i] != c.req.Uid || k.GetUid() != c.req.Uid || k.GetReason() != msgpb.KickoutReason_BY_REQUEST {
				t.Fatalf("Kickout(%v) task %v keyed %q", c.req, p, keys[i])
			}
			kicked = append(kicked, k.GetSid())
		}
		if !slices.Equal(kicked, c.sids) {
			t.Fatalf("Kickout(%v) queued kicks of %v, want %v", c.req, kicked, c.sids)
		}
	}
	_, err := r.s.Kickout(ctx, &pushpb.KickoutRequest{Uid: "a/b"})
	refusedAs(t, "kickout of a bad uid", err, codes.InvalidArgument, `uid: "a/b" must not contain '/', spaces or control characters`)
	_, err = r.s.Kickout(ctx, &pushpb.KickoutRequest{Uid: "ann", Platform: "beos"})
	refusedAs(t, "kickout on an unknown platform", err, codes.InvalidArgument, `platform: unknown platform "beos"`)
	r.noTasks("refused kickouts")

	users, err := r.s.Online(ctx, []string{"ann", "bob", "ann"})
	if err != nil {
		t.Fatal(err)
	}
	want := "ann:[1/ios/boat-1 2/ios/boat-1 3/web/boat-1] bob:[4/ios/boat-1] "
	got := ""
	for _, u := range users {
		var ss []string
		for _, s := range u.GetSessions() {
			ss = append(ss, s.GetSid()+"/"+s.GetPlatform()+"/"+s.GetBoatId())
		}
		got += fmt.Sprintf("%s:%v ", u.GetUid(), ss)
	}
	if got != want {
		t.Fatalf("Online = %s, want %s", got, want)
	}
	if users, err := r.s.Online(ctx, []string{"zed"}); err != nil || len(users) != 1 || users[0].GetUid() != "zed" || len(users[0].GetSessions()) != 0 {
		t.Fatalf("Online(zed) = %v, %v; want zed without sessions", users, err)
	}
	_, err = r.s.Online(ctx, nil)
	refusedAs(t, "online of nobody", err, codes.InvalidArgument, "uids: must name 1 to 3 uids")
	_, err = r.s.Online(ctx, []string{"a", "b", "c", "d"})
	refusedAs(t, "online of too many", err, codes.InvalidArgument, "uids: must name 1 to 3 uids")
	_, err = r.s.Online(ctx, []string{"ann", " b"})
	refusedAs(t, "online of a bad uid", err, codes.InvalidArgument, `uid: " b" must not contain '/', spaces or control characters`)
}

// deviceRig is a rig with a device store and notifiers for ios and android.
func deviceRig(t testing.TB, maxDevices int) *rig {
	r := newRig(t, func(c *Config) {
		c.KickPolicy = KeepAll
		c.MaxDevicesPerUID = maxDevices
		c.Platforms = platform.MustParse("ios:notify=apns,android:notify=fcm,web")
	})
	r.s.devices = device.New(r.rdb)
	return r
}

func tokens(t testing.TB, r *rig, uid string) []string {
	t.Helper()
	all, err := r.s.ListDevices(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range all {
		if d.GetUid() != uid || d.GetRegisteredAt() == 0 {
			t.Fatalf("listed %v for %s", d, uid)
		}
		out = append(out, d.GetPlatform()+"/"+d.GetProvider()+"/"+d.GetToken()+"/"+d.GetAppId())
	}
	slices.Sort(out)
	return out
}

// RegisterDevice keeps at most --max-devices-per-uid tokens, evicting the
// oldest; UnregisterDevice removes one and says whether it was there;
// ListDevices lists them. Bad input writes nothing.
func TestDevices(t *testing.T) {
	t.Parallel()
	r := deviceRig(t, 2)
	ctx := context.Background()
	core, logs := observer.New(zapcore.DebugLevel)
	r.s.log = zap.New(core)
	evicted := func() float64 { return promtest.ToFloat64(r.s.metrics.DevicesEvicted) }
	for _, tok := range []string{"t1", "t2"} {
		if err := r.s.RegisterDevice(ctx, &pushpb.Device{Uid: "ann", Platform: "ios", Token: tok, AppId: "app"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := tokens(t, r, "ann"); !slices.Equal(got, []string{"ios/apns/t1/app", "ios/apns/t2/app"}) || evicted() != 0 {
		t.Fatalf("tokens %v, %v evicted", got, evicted())
	}
	if err := r.s.RegisterDevice(ctx, &pushpb.Device{Uid: "ann", Platform: "android", Token: "t3"}); err != nil {
		t.Fatal(err)
	}
	if got := tokens(t, r, "ann"); !slices.Equal(got, []string{"android/fcm/t3/", "ios/apns/t2/app"}) || evicted() != 1 {
		t.Fatalf("tokens after a third %v, %v evicted; want t1 evicted", got, evicted())
	}
	if got := logs.FilterMessage("device tokens evicted by the cap").All(); len(got) != 1 || got[0].ContextMap()["evicted"] != int64(1) {
		t.Fatalf("evictions logged: %v, want one of 1 token", got)
	}
	err := r.s.RegisterDevice(ctx, &pushpb.Device{Uid: "ann", Platform: "ios", Token: "t 4"})
	refusedAs(t, "bad token", err, codes.InvalidArgument, "device.token: must not contain '/', spaces or control characters")
	if got := tokens(t, r, "ann"); len(got) != 2 || evicted() != 1 {
		t.Fatalf("a refused registration changed tokens: %v", got)
	}
	removed, err := r.s.UnregisterDevice(ctx, &pushpb.Device{Uid: "ann", Platform: "android", Token: "t3"})
	if err != nil || !removed {
		t.Fatalf("unregister t3: %v, %v", removed, err)
	}
	removed, err = r.s.UnregisterDevice(ctx, &pushpb.Device{Uid: "ann", Platform: "android", Token: "t3"})
	if err != nil || removed {
		t.Fatalf("unregister t3 again: %v, %v; want false", removed, err)
	}
	_, err = r.s.UnregisterDevice(ctx, &pushpb.Device{Uid: "ann", Platform: "web", Token: "t2"})
	refusedAs(t, "unregister on a platform without notifier", err, codes.InvalidArgument,
		`device.platform: platform "web" has no notifier configured (--platforms …:notify=<provider>)`)
	if got := tokens(t, r, "ann"); !slices.Equal(got, []string{"ios/apns/t2/app"}) {
		t.Fatalf("tokens %v, want t2 only", got)
	}
	_, err = r.s.ListDevices(ctx, "")
	refusedAs(t, "list of no uid", err, codes.InvalidArgument, `uid: "" must be 1 to 128 bytes`)
}

// RegisterSessionDevice registers a token for a session recorded on the
// calling boat only, on the session's platform.
func TestRegisterSessionDevice(t *testing.T) {
	t.Parallel()
	r := deviceRig(t, 10)
	ctx := context.Background()
	if err := r.connect("ann", "android", "7"); err != nil {
		t.Fatal(err)
	}
	provider, added, err := r.s.RegisterSessionDevice(ctx, testBoat, "ann", "7", "", "tok")
	if err != nil || provider != "fcm" || !added {
		t.Fatalf("register: %q, %v, %v; want fcm, added", provider, added, err)
	}
	provider, added, err = r.s.RegisterSessionDevice(ctx, testBoat, "ann", "7", "fcm", "tok")
	if err != nil || provider != "fcm" || added {
		t.Fatalf("register again: %q, %v, %v; want fcm, not added", provider, added, err)
	}
	bad := []struct {
		name, boat, uid, sid, provider string
		code                           codes.Code
		msg                            string
	}{
		{"no boat", "", "ann", "7", "", codes.InvalidArgument, "boat_id: must be set"},
		{"no sid", testBoat, "ann", "", "", codes.InvalidArgument, "sid: must be set"},
		{"bad uid", testBoat, "a/b", "7", "", codes.InvalidArgument, `uid: "a/b" must not contain '/', spaces or control characters`},
		{"other boat", "boat-2", "ann", "7", "", codes.PermissionDenied, `uid "ann" has no session "7" on boat "boat-2"`},
		{"other sid", testBoat, "ann", "8", "", codes.PermissionDenied, `uid "ann" has no session "8" on boat "boat-1"`},
		{"other provider", testBoat, "ann", "7", "apns", codes.InvalidArgument, `device.provider: platform "android" is served by "fcm", not "apns"`},
	}
	for _, c := range bad {
		p, added, err := r.s.RegisterSessionDevice(ctx, c.boat, c.uid, c.sid, c.provider, "tok2")
		if p != "" || added {
			t.Fatalf("%s: %q, %v returned with %v", c.name, p, added, err)
		}
		refusedAs(t, c.name, err, c.code, c.msg)
	}
	if got := tokens(t, r, "ann"); !slices.Equal(got, []string{"android/fcm/tok/"}) {
		t.Fatalf("tokens %v, want tok only", got)
	}
}

// The gRPC adapters pass every answer and every refusal through, the
// refusals as gRPC statuses.
func TestServerAdapters(t *testing.T) {
	t.Parallel()
	r := deviceRig(t, 10)
	ctx := context.Background()
	ps, is := &pushServer{s: r.s}, &internalServer{s: r.s}
	isStatus := func(what string, err error, code codes.Code, msg string) {
		t.Helper()
		st, ok := status.FromError(err)
		if !ok || err == nil || st.Code() != code || !strings.Contains(st.Message(), msg) {
			t.Fatalf("%s: %v, want status %v containing %q", what, err, code, msg)
		}
	}

	cr, err := is.Connect(ctx, &stationpb.ConnectRequest{Token: r.token("ann", "ios"), BoatId: testBoat, Sid: "1"})
	if err != nil || cr.GetUid() != "ann" || cr.GetPlatform() != "ios" {
		t.Fatalf("Connect = %v, %v", cr, err)
	}
	_, err = is.Connect(ctx, &stationpb.ConnectRequest{Token: r.token("ann", "ios"), Sid: "1"})
	isStatus("Connect without boat", err, codes.InvalidArgument, "boat_id: must be set")

	pr, err := ps.Push(ctx, &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "hi")}})
	if err != nil || len(pr.GetSeqs()) != 1 || pr.GetSeqs()[0] == 0 {
		t.Fatalf("Push = %v, %v", pr, err)
	}
	_, err = ps.Push(ctx, &pushpb.PushRequest{Uids: []string{"ann"}})
	isStatus("Push without bodies", err, codes.InvalidArgument, "msg_bodies: must hold at least one body")
	if n := promtest.ToFloat64(r.s.metrics.PushRequests.WithLabelValues("OK")); n != 1 {
		t.Fatalf("%v pushes counted OK, want 1", n)
	}
	if n := promtest.ToFloat64(r.s.metrics.PushRequests.WithLabelValues("InvalidArgument")); n != 1 {
		t.Fatalf("%v pushes counted InvalidArgument, want 1", n)
	}

	or, err := ps.Online(ctx, &pushpb.OnlineRequest{Uids: []string{"ann"}})
	if err != nil || len(or.GetUsers()) != 1 || len(or.GetUsers()[0].GetSessions()) != 1 {
		t.Fatalf("Online = %v, %v", or, err)
	}
	_, err = ps.Online(ctx, &pushpb.OnlineRequest{})
	isStatus("Online of nobody", err, codes.InvalidArgument, "uids: must name 1 to")

	if _, err := ps.RegisterDevice(ctx, &pushpb.RegisterDeviceRequest{Device: &pushpb.Device{Uid: "ann", Platform: "ios", Token: "t"}}); err != nil {
		t.Fatal(err)
	}
	_, err = ps.RegisterDevice(ctx, &pushpb.RegisterDeviceRequest{})
	isStatus("RegisterDevice of nothing", err, codes.InvalidArgument, "device: must be set")
	lr, err := ps.ListDevices(ctx, &pushpb.ListDevicesRequest{Uid: "ann"})
	if err != nil || len(lr.GetDevices()) != 1 || lr.GetDevices()[0].GetToken() != "t" {
		t.Fatalf("ListDevices = %v, %v", lr, err)
	}
	_, err = ps.ListDevices(ctx, &pushpb.ListDevicesRequest{})
	isStatus("ListDevices of no uid", err, codes.InvalidArgument, "must be 1 to 128 bytes")
	ur, err := ps.UnregisterDevice(ctx, &pushpb.UnregisterDeviceRequest{Device: &pushpb.Device{Uid: "ann", Platform: "ios", Token: "t"}})
	if err != nil || !ur.GetRemoved() {
		t.Fatalf("UnregisterDevice = %v, %v", ur, err)
	}
	_, err = ps.UnregisterDevice(ctx, &pushpb.UnregisterDeviceRequest{})
	isStatus("UnregisterDevice of nothing", err, codes.InvalidArgument, "device: must be set")

	sr, err := is.RegisterSessionDevice(ctx, &stationpb.RegisterSessionDeviceRequest{BoatId: testBoat, Uid: "ann", Sid: "1", Token: "st"})
	if err != nil || sr.GetProvider() != "apns" || !sr.GetAdded() {
		t.Fatalf("RegisterSessionDevice = %v, %v", sr, err)
	}
	_, err = is.RegisterSessionDevice(ctx, &stationpb.RegisterSessionDeviceRequest{BoatId: "nope", Uid: "ann", Sid: "1", Token: "st"})
	isStatus("RegisterSessionDevice on another boat", err, codes.PermissionDenied, `uid "ann" has no session "1" on boat "nope"`)

	if _, err := is.Resume(ctx, &stationpb.ResumeRequest{BoatId: "b2", Sessions: []*stationpb.ResumedSession{{Uid: "bob", Sid: "5", Platform: "web"}}}); err != nil {
		t.Fatal(err)
	}
	_, err = is.Resume(ctx, &stationpb.ResumeRequest{})
	isStatus("Resume without boat", err, codes.InvalidArgument, "boat_id: must be set")
	bs, err := is.BoatSessions(ctx, &stationpb.BoatSessionsRequest{BoatId: "b2"})
	if err != nil || len(bs.GetSessions()) != 1 || bs.GetSessions()[0].GetUid() != "bob" || bs.GetSessions()[0].GetSid() != "5" || bs.GetCursor() != 0 {
		t.Fatalf("BoatSessions = %v, %v", bs, err)
	}
	_, err = is.BoatSessions(ctx, &stationpb.BoatSessionsRequest{})
	isStatus("BoatSessions without boat", err, codes.InvalidArgument, "boat_id: must be set")

	kr, err := ps.Kickout(ctx, &pushpb.KickoutRequest{Uid: "bob"})
	if err != nil || !slices.Equal(kr.GetSids(), []string{"5"}) {
		t.Fatalf("Kickout = %v, %v", kr, err)
	}
	_, err = ps.Kickout(ctx, &pushpb.KickoutRequest{})
	isStatus("Kickout of no uid", err, codes.InvalidArgument, "must be 1 to 128 bytes")

	rr, err := is.ResetBoat(ctx, &stationpb.ResetBoatRequest{BoatId: "b2"})
	if err != nil || rr.GetRemoved() != 1 {
		t.Fatalf("ResetBoat = %v, %v", rr, err)
	}
	_, err = is.ResetBoat(ctx, &stationpb.ResetBoatRequest{})
	isStatus("ResetBoat without boat", err, codes.InvalidArgument, "boat_id: must be set")

	if _, err := is.Disconnect(ctx, &stationpb.DisconnectRequest{BoatId: testBoat, Sessions: []*stationpb.SessionRef{{Uid: "ann", Sid: "1"}}}); err != nil {
		t.Fatal(err)
	}
	if got := r.recorded("ann"); len(got) != 0 {
		t.Fatalf("ann after Disconnect: %v", got)
	}
	if calls, n := promtest.ToFloat64(r.s.metrics.DisconnectCalls), promtest.ToFloat64(r.s.metrics.Disconnected); calls != 1 || n != 1 {
		t.Fatalf("disconnects counted: %v calls, %v sessions; want 1, 1", calls, n)
	}
	_, err = is.Disconnect(ctx, &stationpb.DisconnectRequest{BoatId: testBoat, Sessions: []*stationpb.SessionRef{{Uid: "ann"}}})
	isStatus("Disconnect without sid", err, codes.InvalidArgument, "sessions: entry 0 needs uid and sid")
}
