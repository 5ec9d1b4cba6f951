package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/client"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

func withMaxDevices(n int) option {
	return func(c *app.ClusterConfig) { c.Station.Station.MaxDevicesPerUID = n }
}

// waitAnswers waits until the device got n DeviceRegistered payloads.
func (d *device) waitAnswers(t *testing.T, n int) []*msgpb.DeviceRegistered {
	t.Helper()
	var got []*msgpb.DeviceRegistered
	testutil.WaitFor(t, 15*time.Second, func() error {
		d.mu.Lock()
		got = slices.Clone(d.answers)
		d.mu.Unlock()
		if len(got) < n {
			return fmt.Errorf("%s/%s got %d registration answers, want %d", d.UID, d.Platform, len(got), n)
		}
		return nil
	})
	return got
}

// register sends a registration over the device's session and returns the
// answer (the device's n-th).
func (d *device) register(t *testing.T, n int, provider, token string) *msgpb.DeviceRegistered {
	t.Helper()
	if err := d.RegisterDevice(provider, token); err != nil {
		t.Fatal(err)
	}
	return d.waitAnswers(t, n)[n-1]
}

func (e *env) devices(uid string) []*pushpb.Device {
	e.t.Helper()
	resp, err := e.push.ListDevices(context.Background(), &pushpb.ListDevicesRequest{Uid: uid})
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.GetDevices()
}

func deviceTokens(ds []*pushpb.Device) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.GetToken()
	}
	slices.Sort(out)
	return out
}

// A device registers its own token over its session: it lands under the
// session's uid and platform with the platform's provider, and once the
// device is offline horn's notification reaches that token.
func TestDeviceRegistersItsOwnToken(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e, a := startHorn(t, redisOpt)
		d := e.connect("dora", "ios", true)
		ans := d.register(t, 1, "", "d0ra")
		if err := client.RegistrationError(ans); err != nil || ans.GetProvider() != "apns" || ans.GetToken() != "d0ra" {
			t.Fatalf("answer %v (%v); want OK with provider apns", ans, err)
		}
		ds := e.devices("dora")
		if len(ds) != 1 || ds[0].GetUid() != "dora" || ds[0].GetPlatform() != "ios" || ds[0].GetProvider() != "apns" ||
			ds[0].GetToken() != "d0ra" || ds[0].GetAppId() != "" || ds[0].GetRegisteredAt() <= 0 {
			t.Fatalf("dora's devices %v", ds)
		}
		// Registering again refreshes the one entry.
		if ans := d.register(t, 2, "apns", "d0ra"); client.RegistrationError(ans) != nil {
			t.Fatalf("second registration: %v", ans)
		}
		if ds := e.devices("dora"); len(ds) != 1 {
			t.Fatalf("after registering again: %v", ds)
		}

		d.Close()
		testutil.WaitFor(t, 15*time.Second, func() error {
			resp, err := e.push.Online(context.Background(), &pushpb.OnlineRequest{Uids: []string{"dora"}})
			if err != nil {
				return err
			}
			if n := len(resp.GetUsers()[0].GetSessions()); n != 0 {
				return fmt.Errorf("dora still has %d sessions", n)
			}
			return nil
		})
		e.pushText(&pushpb.PushRequest{Uids: []string{"dora"}, MsgOptions: optOffline | optNotify,
			Notification: &pushpb.Notification{Title: "for dora"}}, "hi dora")
		r := waitAPNs(t, a, "d0ra", 1)[0]
		if r.Header.Get("apns-topic") != a.Topic {
			t.Fatalf("APNs request %v", r.Header)
		}
	})
}

// What the Push API refuses, a device is refused too, with the code and the
// field on its stream, and nothing is written.
func TestDeviceRegistrationRefusals(t *testing.T) {
	t.Parallel()
	e := start(t, withPlatforms("ios:notify=apns,web"))
	ios := e.connect("rita", "ios", true)
	web := e.connect("rita", "web", true)
	cases := []struct {
		d               *device
		provider, token string
		field           string
	}{
		{ios, "", "", "device.token"},
		{ios, "", "a/b", "device.token"},
		{ios, "", "has space", "device.token"},
		{ios, "", strings.Repeat("x", 1025), "device.token"},
		{ios, "fcm", "tok", "device.provider"},
		{ios, "nope", "tok", "device.provider"},
		{web, "", "tok", "device.platform"}, // web has no notifier
	}
	n := map[*device]int{}
	for _, c := range cases {
		n[c.d]++
		ans := c.d.register(t, n[c.d], c.provider, c.token)
		if codes.Code(ans.GetStatus()) != codes.InvalidArgument || ans.GetError().GetField() != c.field ||
			ans.GetError().GetCode() == errorpb.Code_CODE_UNSPECIFIED {
			t.Errorf("%s %q %.40q: answer %.200v; want InvalidArgument on %s", c.d.Platform, c.provider, c.token, ans, c.field)
		}
	}
	if ds := e.devices("rita"); len(ds) != 0 {
		t.Fatalf("refused registrations wrote %v", ds)
	}
}

// The cap per uid holds over both ways in: the Push API and the device's
// session; the oldest token goes, re-registering evicts nothing, and the
// evictions are counted.
func TestDeviceTokenCapPerUID(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, withMaxDevices(2), withPlatforms("ios:notify=log,android:notify=log"), redisOpt)
		e.registerDevice("max", "ios", "t1")
		e.registerDevice("max", "android", "t2")
		e.registerDevice("max", "ios", "t1") // refreshed: now the newest
		if got := deviceTokens(e.devices("max")); !slices.Equal(got, []string{"t1", "t2"}) {
			t.Fatalf("after re-registering: %v", got)
		}
		d := e.connect("max", "ios", true)
		if ans := d.register(t, 1, "", "t3"); client.RegistrationError(ans) != nil {
			t.Fatalf("registration: %v", ans)
		}
		if got := deviceTokens(e.devices("max")); !slices.Equal(got, []string{"t1", "t3"}) {
			t.Fatalf("after the session's registration: %v; want t2 (the oldest) evicted", got)
		}
		e.registerDevice("max", "android", "t4")
		if got := deviceTokens(e.devices("max")); !slices.Equal(got, []string{"t3", "t4"}) {
			t.Fatalf("after the Push API's: %v; want t1 evicted", got)
		}
		if v := promtest.ToFloat64(e.gomsg.Metrics.DevicesEvicted); v != 2 {
			t.Fatalf("gomsg_station_devices_evicted_total %v, want 2", v)
		}
		e.registerDevice("other", "ios", "o1")
		if got := deviceTokens(e.devices("other")); !slices.Equal(got, []string{"o1"}) {
			t.Fatalf("other uid: %v", got)
		}
	})
}

// A forged internal call (with the internal token) that names another uid's
// session, a session of another boat, or a sid that does not exist is
// refused with PermissionDenied and writes nothing.
func TestForgedSessionDeviceRegistrationRefused(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, withPlatforms("ios:notify=log,android:notify=log"), redisOpt)
		victim := e.connect("vic", "ios", true)
		mallory := e.connect("mal", "ios", true)
		st := stationpb.NewStationClient(auth.WithBearer(e.rawConn(e.gomsg.Station.InternalAddr()), internalToken))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for name, req := range map[string]*stationpb.RegisterSessionDeviceRequest{
			"victim's uid, mallory's sid":   {BoatId: "boat-1", Uid: "vic", Sid: mallory.Sid, Token: "evil"},
			"mallory's uid, victim's sid":   {BoatId: "boat-1", Uid: "mal", Sid: victim.Sid, Token: "evil"},
			"victim's session, other boat":  {BoatId: "boat-2", Uid: "vic", Sid: victim.Sid, Token: "evil"},
			"victim's uid, no such session": {BoatId: "boat-1", Uid: "vic", Sid: "123", Token: "evil"},
		} {
			_, err := st.RegisterSessionDevice(ctx, req)
			if status.Code(err) != codes.PermissionDenied {
				t.Errorf("%s: %v, want PermissionDenied", name, err)
			}
		}
		for _, uid := range []string{"vic", "mal"} {
			if n := e.rdb.Exists(ctx, e.keys.Devices(uid)).Val(); n != 0 {
				t.Fatalf("a refused call wrote %s's devices: %v", uid, e.rdb.HGetAll(ctx, e.keys.Devices(uid)).Val())
			}
		}
		// The same call naming the victim's own session on its boat goes through:
		// the refusals above were about ownership, not the request's form.
		resp, err := st.RegisterSessionDevice(ctx, &stationpb.RegisterSessionDeviceRequest{BoatId: "boat-1", Uid: "vic", Sid: victim.Sid, Token: "v1"})
		if err != nil || resp.GetProvider() != "log" || !resp.GetAdded() {
			t.Fatalf("own session: %v, %v", resp, err)
		}
		ds := e.devices("vic")
		if len(ds) != 1 || ds[0].GetPlatform() != "ios" || ds[0].GetToken() != "v1" {
			t.Fatalf("vic's devices %v", ds)
		}
	})
}

// One registration per session is in flight at a time: while Redis holds
// the first (its writes are paused), a second is answered
// RESOURCE_EXHAUSTED at once, and the first then completes.
func TestDeviceRegistrationOneInFlight(t *testing.T) {
	t.Parallel()
	e := start(t, withPlatforms("ios:notify=log"))
	d := e.connect("pat", "ios", true)
	if err := e.rdb.Do(context.Background(), "CLIENT", "PAUSE", "2000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := d.RegisterDevice("", "first"); err != nil {
		t.Fatal(err)
	}
	if err := d.RegisterDevice("", "second"); err != nil {
		t.Fatal(err)
	}
	got := d.waitAnswers(t, 2)
	if codes.Code(got[0].GetStatus()) != codes.ResourceExhausted || got[0].GetToken() != "second" {
		t.Fatalf("first answer %v; want RESOURCE_EXHAUSTED for the second registration", got[0])
	}
	if client.RegistrationError(got[1]) != nil || got[1].GetToken() != "first" {
		t.Fatalf("second answer %v; want the first registration OK", got[1])
	}
	if got := deviceTokens(e.devices("pat")); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("pat's tokens %v", got)
	}
}
