package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/horn/horntest"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const (
	optNotify   = uint32(msgpb.Option_NEED_NOTIFICATION)
	notifyTopic = "gomsg.notify"
	hornSpec    = "ios:notify=apns,ipad:notify=apns,android:notify=fcm,web"
)

// withHorn runs horn too, with APNs and FCM pointed at the mocks, on
// platforms where ios and ipad notify through APNs, android through FCM and
// web has no notifier.
func withHorn(a *horntest.APNs, f *horntest.FCM) option {
	return func(c *app.ClusterConfig) {
		c.Services = []string{"boat", "station", "carrier", "horn"}
		c.Backends.CreateTopics = true
		c.Backends.TaskPartitions = 4
		p := platform.MustParse(hornSpec)
		c.Station.Station.Platforms, c.Carrier.Platforms = p, p
		c.Horn = horn.Config{Platforms: p, Workers: 8, MaxRetries: 2, RetryBackoff: 20 * time.Millisecond,
			APNs: horn.APNsConfig{KeyFile: a.KeyFile, KeyID: a.KeyID, TeamID: a.TeamID, Topic: a.Topic, Host: a.URL(), CAFile: a.CAFile},
			FCM:  horn.FCMConfig{CredentialsFile: f.CredentialsFile, Endpoint: f.URL()}}
	}
}

func startHorn(t *testing.T, opts ...option) (*env, *horntest.APNs) {
	t.Helper()
	e, a, _ := startHornFCM(t, opts...)
	return e, a
}

func startHornFCM(t *testing.T, opts ...option) (*env, *horntest.APNs, *horntest.FCM) {
	t.Helper()
	a, f := horntest.StartAPNs(t), horntest.StartFCM(t)
	e := start(t, append([]option{withHorn(a, f)}, opts...)...)
	t.Cleanup(func() {
		if errs := append(a.Errors(), f.Errors()...); len(errs) > 0 {
			t.Errorf("provider mocks refused malformed requests: %v", errs)
		}
	})
	return e, a, f
}

func (e *env) registerDevice(uid, platform, token string) {
	e.t.Helper()
	_, err := e.push.RegisterDevice(context.Background(), &pushpb.RegisterDeviceRequest{
		Device: &pushpb.Device{Uid: uid, Platform: platform, Token: token}})
	if err != nil {
		e.t.Fatalf("register %s/%s: %v", uid, platform, err)
	}
}

func waitAPNs(t *testing.T, a *horntest.APNs, token string, n int) []horntest.Request {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if got := a.Count(token); got < n {
			return fmt.Errorf("APNs got %d requests for %s, want %d", got, token, n)
		}
		return nil
	})
	return a.Requests(token)
}

// An offline iOS platform with NEED_NOTIFICATION gets exactly one APNs
// request with the device token, topic, headers and payload; a later marker
// notification shows that no duplicate followed.
func TestOfflineIOSGetsOneAPNsNotification(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e, a := startHorn(t, redisOpt)
		e.registerDevice("bob", "ios", "b0b0")
		badge := int32(2)
		_, err := e.push.Push(context.Background(), &pushpb.PushRequest{
			Uids: []string{"bob"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}},
			MsgBodies: []*anypb.Any{text("hi bob")}, MsgOptions: optOffline | optNotify,
			Notification: &pushpb.Notification{Title: "Alice", Body: "hi bob", Sound: "ping.caf", Badge: &badge,
				CollapseId: "c-1", Data: map[string]string{"room": "42"}, TtlSeconds: 60}})
		if err != nil {
			t.Fatal(err)
		}
		r := waitAPNs(t, a, "b0b0", 1)[0]
		h := r.Header
		if h.Get("apns-topic") != a.Topic || h.Get("apns-push-type") != "alert" || h.Get("apns-priority") != "10" ||
			h.Get("apns-collapse-id") != "c-1" || h.Get("apns-expiration") == "" {
			t.Fatalf("APNs headers %v", h)
		}
		raw, _ := json.Marshal(r.Body)
		want := `{"aps":{"alert":{"body":"hi bob","title":"Alice"},"badge":2,"sound":"ping.caf"},"room":"42"}`
		if string(raw) != want {
			t.Fatalf("payload %s, want %s", raw, want)
		}
		// Marker: a second push to bob, same uid so same partition and order.
		e.pushText(&pushpb.PushRequest{Uids: []string{"bob"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}},
			MsgOptions: optNotify, Notification: &pushpb.Notification{Title: "marker"}}, "marker")
		reqs := waitAPNs(t, a, "b0b0", 2)
		if len(reqs) != 2 || reqs[1].Raw == nil || !strings.Contains(string(reqs[1].Raw), "marker") {
			t.Fatalf("APNs requests %d (second %s), want the first notification exactly once, then the marker", len(reqs), reqs[1].Raw)
		}
		if v := promtest.ToFloat64(e.gomsg.Metrics.Deliveries.WithLabelValues(metrics.Notified)); v != 2 {
			t.Fatalf("notified deliveries %v, want 2", v)
		}
	})
}

// An offline Android platform gets exactly one FCM message; the user's
// device on a platform without a notifier (web) gets none.
func TestOfflineAndroidGetsOneFCMNotification(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e, a, f := startHornFCM(t, queueOpt, queueOpt)
		e.registerDevice("ivy", "android", "fcm:ivy-1")
		e.pushText(&pushpb.PushRequest{Uids: []string{"ivy"}, MsgOptions: optOffline | optNotify,
			Notification: &pushpb.Notification{Title: "Tom", CollapseId: "c-9", Data: map[string]string{"room": "9"}}}, "lunch?")
		var r horntest.Request
		testutil.WaitFor(t, 20*time.Second, func() error {
			reqs := f.Requests("fcm:ivy-1")
			if len(reqs) != 1 {
				return fmt.Errorf("FCM got %d requests, want 1", len(reqs))
			}
			r = reqs[0]
			return nil
		})
		raw, _ := json.Marshal(r.Body)
		want := `{"android":{"collapse_key":"c-9","priority":"HIGH"},"data":{"room":"9"},` +
			`"notification":{"body":"lunch?","title":"Tom"},"token":"fcm:ivy-1","webpush":{"headers":{"Topic":"c-9"}}}`
		if string(raw) != want {
			t.Fatalf("FCM message %s, want %s", raw, want)
		}
		// Marker on the same uid: a second push; the first was sent once.
		e.pushText(&pushpb.PushRequest{Uids: []string{"ivy"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"android"}},
			MsgOptions: optNotify}, "marker")
		testutil.WaitFor(t, 20*time.Second, func() error {
			if n := f.Count("fcm:ivy-1"); n < 2 {
				return fmt.Errorf("FCM got %d requests, want 2", n)
			}
			return nil
		})
		if reqs := f.Requests("fcm:ivy-1"); len(reqs) != 2 || !strings.Contains(string(reqs[1].Raw), "marker") {
			t.Fatalf("FCM requests %d, want the first exactly once, then the marker", len(reqs))
		}
		if n := a.Count(""); n != 0 {
			t.Fatalf("APNs got %d requests, want 0", n)
		}
	})
}

// An online, ACKed delivery produces no notification: a marker notification
// on another platform of the same user (same partition, later) arrives and
// the online platform's token still has none.
func TestOnlineAckedDeliveryIsNotNotified(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e, a := startHorn(t, queueOpt, queueOpt)
		e.registerDevice("alice", "ios", "a11ce")
		e.registerDevice("alice", "ipad", "a11ce-pad")
		phone := e.connect("alice", "ios", true)
		e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}},
			MsgOptions: optAck | optNotify}, "online")
		phone.waitCount(t, 1)
		e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ipad"}},
			MsgOptions: optNotify}, "marker")
		waitAPNs(t, a, "a11ce-pad", 1)
		if n := a.Count("a11ce"); n != 0 {
			t.Fatalf("online ACKed phone got %d notifications, want 0", n)
		}
		if v := promtest.ToFloat64(e.gomsg.Metrics.Deliveries.WithLabelValues(metrics.Acked)); v != 1 {
			t.Fatalf("acked deliveries %v, want 1", v)
		}
	})
}

func detail(err error) (errorpb.Code, string) {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if e, ok := d.(*errorpb.Error); ok {
			return e.GetCode(), e.GetField()
		}
	}
	return errorpb.Code_CODE_UNSPECIFIED, ""
}

// Registering the same token twice leaves one entry; list returns it;
// unregistering removes it; HTTP/JSON works; bad devices are refused naming
// the field.
func TestDeviceRegistry(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e, _ := startHorn(t, redisOpt)
		ctx := context.Background()
		dev := &pushpb.Device{Uid: "dan", Platform: "ios", Provider: "apns", Token: "d4n", AppId: "com.example.gomsg"}
		for range 2 {
			if _, err := e.push.RegisterDevice(ctx, &pushpb.RegisterDeviceRequest{Device: dev}); err != nil {
				t.Fatal(err)
			}
		}
		if n := e.rdb.HLen(ctx, e.keys.Devices("dan")).Val(); n != 1 {
			t.Fatalf("%d registry entries after registering twice, want 1", n)
		}
		list, err := e.push.ListDevices(ctx, &pushpb.ListDevicesRequest{Uid: "dan"})
		if err != nil || len(list.GetDevices()) != 1 {
			t.Fatalf("list: %v, %v", list, err)
		}
		if got := list.GetDevices()[0]; got.GetToken() != "d4n" || got.GetProvider() != "apns" || got.GetAppId() != "com.example.gomsg" || got.GetRegisteredAt() == 0 {
			t.Fatalf("listed %v", got)
		}
		un, err := e.push.UnregisterDevice(ctx, &pushpb.UnregisterDeviceRequest{Device: dev})
		if err != nil || !un.GetRemoved() {
			t.Fatalf("unregister: %v, %v", un, err)
		}
		if n := e.rdb.Exists(ctx, e.keys.Devices("dan")).Val(); n != 0 {
			t.Fatalf("registry still exists after unregistering")
		}
		if un, err := e.push.UnregisterDevice(ctx, &pushpb.UnregisterDeviceRequest{Device: dev}); err != nil || un.GetRemoved() {
			t.Fatalf("second unregister: %v, %v; want removed false", un, err)
		}

		base := "http://" + e.gomsg.Station.PushHTTPAddr()
		resp, err := httpPost(base+"/v1/devices/register", `{"device":{"uid":"zoe","platform":"ipad","token":"z0e"}}`)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("HTTP register: %v %v", resp, err)
		}
		_ = resp.Body.Close()
		resp, err = httpPost(base+"/v1/devices/list", `{"uid":"zoe"}`)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Devices []struct{ Uid, Platform, Provider, Token string }
		}
		if err := decodeJSON(resp, &out); err != nil || len(out.Devices) != 1 || out.Devices[0].Token != "z0e" || out.Devices[0].Provider != "apns" {
			t.Fatalf("HTTP list: %+v, %v", out, err)
		}

		for _, tc := range []struct {
			dev   *pushpb.Device
			code  errorpb.Code
			field string
		}{
			{&pushpb.Device{Uid: "x", Platform: "tv", Token: "t"}, errorpb.Code_UNKNOWN_PLATFORM, "device.platform"},
			{&pushpb.Device{Uid: "x", Platform: "web", Token: "t"}, errorpb.Code_INVALID_REQUEST, "device.platform"},
			{&pushpb.Device{Uid: "x", Platform: "ios", Provider: "pigeon", Token: "t"}, errorpb.Code_INVALID_REQUEST, "device.provider"},
			{&pushpb.Device{Uid: "x", Platform: "ios", Provider: "fcm", Token: "t"}, errorpb.Code_INVALID_REQUEST, "device.provider"},
			{&pushpb.Device{Uid: "x", Platform: "ios"}, errorpb.Code_INVALID_REQUEST, "device.token"},
			{&pushpb.Device{Uid: "x", Platform: "ios", Token: "a/b"}, errorpb.Code_INVALID_REQUEST, "device.token"},
			{&pushpb.Device{Platform: "ios", Token: "t"}, errorpb.Code_INVALID_REQUEST, "uid"},
		} {
			_, err := e.push.RegisterDevice(ctx, &pushpb.RegisterDeviceRequest{Device: tc.dev})
			code, field := detail(err)
			if status.Code(err) != codes.InvalidArgument || code != tc.code || field != tc.field {
				t.Errorf("register %v: %v (%v, %q), want InvalidArgument %v naming %q", tc.dev, err, code, field, tc.code, tc.field)
			}
		}
	})
}

// Oversized notification content is InvalidArgument naming the field, and
// nothing is published.
func TestOversizedNotificationRejected(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e, a := startHorn(t, queueOpt, queueOpt)
		e.registerDevice("fay", "ios", "f4y")
		before := e.topicRecords()
		for _, tc := range []struct {
			n     *pushpb.Notification
			field string
		}{
			{&pushpb.Notification{Title: "t", Body: strings.Repeat("x", 4100)}, "notification.body"},
			{&pushpb.Notification{Title: "t", Data: map[string]string{"k": strings.Repeat("y", 4096)}}, "notification.data"},
			{&pushpb.Notification{Title: "t", TtlSeconds: -1}, "notification.ttl_seconds"},
		} {
			_, err := e.push.Push(context.Background(), &pushpb.PushRequest{Uids: []string{"fay"},
				MsgBodies: []*anypb.Any{text("x")}, MsgOptions: optNotify | optOffline, Notification: tc.n})
			code, field := detail(err)
			if status.Code(err) != codes.InvalidArgument || code != errorpb.Code_INVALID_REQUEST || field != tc.field {
				t.Errorf("push: %v (%v, %q), want InvalidArgument naming %q", err, code, field, tc.field)
			}
		}
		if after := e.topicRecords(); after != before {
			t.Fatalf("task topic went from %d to %d records; want nothing published", before, after)
		}
		if n := a.Count(""); n != 0 {
			t.Fatalf("APNs got %d requests, want 0", n)
		}
	})
}

// A platform carrier retries (its boat never answers) is notified once, on
// the first attempt, not again on each retry: after the task is
// dead-lettered, a marker notification to the same user arrives and the
// failing platform's token has exactly one request.
func TestCarrierRetriesDoNotRepeatNotifications(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		a, f := horntest.StartAPNs(t), horntest.StartFCM(t)
		e := start(t, queueOpt, withHorn(a, f), withRetries(2))
		ctx := context.Background()
		if _, err := testutil.EtcdClient(t, e.etcd).Put(ctx, "/gomsg/boats/dead-boat", fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))); err != nil {
			t.Fatal(err)
		}
		e.rdb.HSet(ctx, e.keys.Sessions("jay"), "1", "ios-dead-boat")
		e.registerDevice("jay", "ios", "j4y")
		e.registerDevice("jay", "ipad", "j4y-pad")
		e.pushText(&pushpb.PushRequest{Uids: []string{"jay"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}},
			MsgOptions: optNotify}, "retried")
		e.readTopic(taskTopic+".dlq", 1)
		e.pushText(&pushpb.PushRequest{Uids: []string{"jay"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ipad"}},
			MsgOptions: optNotify}, "marker")
		waitAPNs(t, a, "j4y-pad", 1)
		if n := a.Count("j4y"); n != 1 {
			t.Fatalf("retried platform got %d notifications, want 1", n)
		}
		if errs := a.Errors(); len(errs) > 0 {
			t.Fatalf("APNs mock refused requests: %v", errs)
		}
	})
}
