package station

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// validator is a station with a configuration and nothing behind it, for
// the checks that run before anything is read or written.
func validator(t testing.TB, change func(*Config)) *Station {
	t.Helper()
	cfg := Config{PushGRPCAddr: ":1", InternalAddr: ":2"}
	if change != nil {
		change(&cfg)
	}
	cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &Station{cfg: cfg, log: zap.NewNop(), metrics: metrics.New()}
}

// sized is a body of exactly n bytes (its value; --max-body-bytes counts
// those).
func sized(t testing.TB, n int) *anypb.Any {
	t.Helper()
	return &anypb.Any{TypeUrl: "t", Value: []byte(strings.Repeat("v", n))}
}

// wireSized is a body of exactly n bytes encoded (proto.Size, what
// --max-push-bytes counts per record), n ≥ 8.
func wireSized(t testing.TB, n int) *anypb.Any {
	t.Helper()
	for k := n; k > 0; k-- {
		b := &anypb.Any{TypeUrl: "t", Value: []byte(strings.Repeat("v", k))}
		if proto.Size(b) == n {
			return b
		}
	}
	t.Fatalf("no body of %d bytes", n)
	return nil
}

// refusedAs fails unless err is code with exactly the message msg
// ("field: text"), both as the domain error and as the gRPC status.
func refusedAs(t testing.TB, name string, err error, code codes.Code, msg string) {
	t.Helper()
	var ge *grpcerr.Error
	if !errors.As(err, &ge) || ge.Code != code || ge.Error() != msg {
		t.Fatalf("%s: err = %v, want %v %q", name, err, code, msg)
	}
	if st := status.Convert(grpcerr.Status(err)); st.Code() != code || st.Message() != msg {
		t.Fatalf("%s: status = %v %q, want %v %q", name, st.Code(), st.Message(), code, msg)
	}
}

const optionsHelp = " (known: NEED_ACK=1, NEED_OFFLINE=2, NEED_NOTIFICATION=4, NEED_RECEIPTS=8)"

// NEED_RECEIPTS is refused with FailedPrecondition while the station's
// receipts are off, in msg_options as in exclusive_msg_options, and
// accepted once they are on.
func TestValidatePushNeedReceipts(t *testing.T) {
	t.Parallel()
	req := &pushpb.PushRequest{Uids: []string{"a", "b"}, MsgBodies: []*anypb.Any{sized(t, 10)}}
	tracked := proto.Clone(req).(*pushpb.PushRequest)
	tracked.MsgOptions = uint32(msgpb.Option_NEED_ACK | msgpb.Option_NEED_RECEIPTS)
	exclusive := proto.Clone(req).(*pushpb.PushRequest)
	exclusive.ExclusiveMsgOptions = map[string]uint32{"b": uint32(msgpb.Option_NEED_RECEIPTS)}

	off := validator(t, nil)
	uids, err := off.validatePush(tracked)
	if uids != nil {
		t.Fatalf("uids %v returned with %v", uids, err)
	}
	refusedAs(t, "NEED_RECEIPTS with receipts off", err, codes.FailedPrecondition,
		"msg_options: NEED_RECEIPTS needs receipts on (--receipts-topic)")
	_, err = off.validatePush(exclusive)
	refusedAs(t, "exclusive NEED_RECEIPTS with receipts off", err, codes.FailedPrecondition,
		"exclusive_msg_options[b]: NEED_RECEIPTS needs receipts on (--receipts-topic)")
	if _, err := off.validatePush(req); err != nil {
		t.Fatalf("push without NEED_RECEIPTS, receipts off: %v", err)
	}

	on := validator(t, func(c *Config) { c.Receipts = receipt.New(testReceiptsTopic, nil) })
	for _, r := range []*pushpb.PushRequest{tracked, exclusive} {
		if uids, err := on.validatePush(r); err != nil || !slices.Equal(uids, []string{"a", "b"}) {
			t.Fatalf("NEED_RECEIPTS with receipts on: %v, %v", uids, err)
		}
	}
}

// validatePush refuses each bad field with InvalidArgument and the exact
// message naming it, and accepts every value at the edge of its limit.
func TestValidatePushMessages(t *testing.T) {
	t.Parallel()
	s := validator(t, func(c *Config) {
		c.MaxUIDs, c.MaxBodies, c.MaxBodyBytes, c.MaxRequestBytes, c.MaxPushBytes = 3, 2, 200, 300, 400
	})
	hi := sized(t, 10)
	u128 := strings.Repeat("u", 128)
	k128 := strings.Repeat("k", 128)
	badge := int32(-1)
	// Two uids × (100 bytes of body + 100 of notification) make 400.
	note := func(n int) *pushpb.Notification {
		nt := &pushpb.Notification{Title: "x"}
		for proto.Size(nt) < n {
			nt.Title += "x"
		}
		return nt
	}
	req := func(change func(*pushpb.PushRequest)) *pushpb.PushRequest {
		r := &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi}}
		change(r)
		return r
	}
	bad := []struct {
		name string
		req  *pushpb.PushRequest
		msg  string
	}{
		{"no uids", req(func(r *pushpb.PushRequest) { r.Uids = nil }), "uids: must name at least one uid"},
		{"too many uids", req(func(r *pushpb.PushRequest) { r.Uids = []string{"a", "b", "c", "a"} }), "uids: 4 uids, at most 3 per request"},
		{"empty uid", req(func(r *pushpb.PushRequest) { r.Uids = []string{"a", ""} }), `uid: "" must be 1 to 128 bytes`},
		{"long uid", req(func(r *pushpb.PushRequest) { r.Uids = []string{u128 + "u"} }), `uid: "` + u128 + `u" must be 1 to 128 bytes`},
		{"uid with slash", req(func(r *pushpb.PushRequest) { r.Uids = []string{"a/b"} }), `uid: "a/b" must not contain '/', spaces or control characters`},
		{"uid starting with space", req(func(r *pushpb.PushRequest) { r.Uids = []string{" a"} }), `uid: " a" must not contain '/', spaces or control characters`},
		{"uid with control", req(func(r *pushpb.PushRequest) { r.Uids = []string{"ab\x01"} }), `uid: "ab\x01" must not contain '/', spaces or control characters`},
		{"no bodies", req(func(r *pushpb.PushRequest) { r.MsgBodies = nil }), "msg_bodies: must hold at least one body"},
		{"too many bodies", req(func(r *pushpb.PushRequest) { r.MsgBodies = []*anypb.Any{hi, hi, hi} }), "msg_bodies: 3 bodies, at most 2 per request"},
		{"nil body", req(func(r *pushpb.PushRequest) { r.MsgBodies = []*anypb.Any{nil} }), "msg_bodies[0]: is empty (needs a type_url and a value)"},
		{"body without type", req(func(r *pushpb.PushRequest) { r.MsgBodies = []*anypb.Any{hi, {Value: []byte("v")}} }), "msg_bodies[1]: is empty (needs a type_url and a value)"},
		{"body without value", req(func(r *pushpb.PushRequest) { r.MsgBodies = []*anypb.Any{{TypeUrl: "x"}} }), "msg_bodies[0]: has an empty value"},
		{"body too big", req(func(r *pushpb.PushRequest) { r.MsgBodies = []*anypb.Any{hi, sized(t, 201)} }), "msg_bodies[1]: is 201 bytes, at most 200"},
		{"request too big", req(func(r *pushpb.PushRequest) { r.MsgBodies = []*anypb.Any{sized(t, 150), sized(t, 151)} }), "msg_bodies: 301 bytes in all, at most 300 per request"},
		{"unknown options", req(func(r *pushpb.PushRequest) { r.MsgOptions = 16 }), "msg_options: unknown option bits 0x10" + optionsHelp},
		{"known and unknown options", req(func(r *pushpb.PushRequest) { r.MsgOptions = 7 | 16 }), "msg_options: unknown option bits 0x10" + optionsHelp},
		{"exclusive options of a stranger", req(func(r *pushpb.PushRequest) { r.ExclusiveMsgOptions = map[string]uint32{"z": 1} }),
			`exclusive_msg_options: uid "z" is not in uids`},
		{"bad exclusive options", req(func(r *pushpb.PushRequest) { r.ExclusiveMsgOptions = map[string]uint32{"a": 1 | 32} }),
			"exclusive_msg_options[a]: unknown option bits 0x20" + optionsHelp},
		{"unknown platform", req(func(r *pushpb.PushRequest) { r.PlatformConfig = &pushpb.PlatformConfig{Platforms: []string{"beos"}} }),
			`platform_config: unknown platform "beos"`},
		{"no platform left", req(func(r *pushpb.PushRequest) {
			r.PlatformConfig = &pushpb.PlatformConfig{Platforms: []string{"ios"}, WithoutPlatforms: []string{"ios"}}
		}), "platform_config: selects no platform (configured: ios, android, web, desktop)"},
		{"bad notification", req(func(r *pushpb.PushRequest) { r.Notification = &pushpb.Notification{Badge: &badge} }),
			"notification.badge: -1, must not be negative"},
		{"exclusive platforms of a stranger", req(func(r *pushpb.PushRequest) {
			r.ExclusivePlatformConfig = map[string]*pushpb.PlatformConfig{"z": {}}
		}), `exclusive_platform_config: uid "z" is not in uids`},
		{"bad exclusive platforms", req(func(r *pushpb.PushRequest) {
			r.ExclusivePlatformConfig = map[string]*pushpb.PlatformConfig{"a": {WithoutPlatforms: []string{"ios", "android", "web", "desktop"}}}
		}), "exclusive_platform_config[a]: selects no platform (configured: ios, android, web, desktop)"},
		{"unknown exclusive platform", req(func(r *pushpb.PushRequest) {
			r.ExclusivePlatformConfig = map[string]*pushpb.PlatformConfig{"a": {Platforms: []string{"beos"}}}
		}), `exclusive_platform_config[a]: unknown platform "beos"`},
		{"long idempotency key", req(func(r *pushpb.PushRequest) { r.IdempotencyKey = k128 + "k" }), "idempotency_key: is 129 bytes, at most 128"},
		{"idempotency key starting with space", req(func(r *pushpb.PushRequest) { r.IdempotencyKey = " k" }),
			`idempotency_key: " k" must not contain spaces or control characters`},
		{"idempotency key with control", req(func(r *pushpb.PushRequest) { r.IdempotencyKey = "k\n" }),
			`idempotency_key: "k\n" must not contain spaces or control characters`},
	}
	for _, c := range bad {
		uids, err := s.validatePush(c.req)
		if uids != nil {
			t.Fatalf("%s: uids %v returned with %v", c.name, uids, err)
		}
		refusedAs(t, c.name, err, codes.InvalidArgument, c.msg)
	}

	// --max-push-bytes counts every uid's copy of the bodies and the
	// notification.
	over := req(func(r *pushpb.PushRequest) {
		r.Uids, r.MsgBodies, r.Notification = []string{"a", "b"}, []*anypb.Any{sized(t, 100)}, note(101)
	})
	if proto.Size(over.Notification) != 101 {
		t.Fatalf("notification of %d bytes, want 101", proto.Size(over.Notification))
	}
	_, err := s.validatePush(over)
	refusedAs(t, "push too big", err, codes.ResourceExhausted,
		"--max-push-bytes: 2 uids × 206 bytes of bodies and notification make 412 bytes, at most 400 per push")

	good := []struct {
		name string
		req  *pushpb.PushRequest
		uids []string
	}{
		{"uids at the limit, de-duplicated", req(func(r *pushpb.PushRequest) { r.Uids = []string{"b", "a", "b"} }), []string{"b", "a"}},
		{"uid of 128 bytes", req(func(r *pushpb.PushRequest) { r.Uids = []string{u128} }), []string{u128}},
		{"bodies at the limit", req(func(r *pushpb.PushRequest) { r.MsgBodies = []*anypb.Any{hi, hi} }), []string{"a"}},
		{"body at the limit", req(func(r *pushpb.PushRequest) { r.MsgBodies = []*anypb.Any{sized(t, 200)} }), []string{"a"}},
		{"request at the limit", req(func(r *pushpb.PushRequest) { r.MsgBodies = []*anypb.Any{sized(t, 150), sized(t, 150)} }), []string{"a"}},
		{"every option", req(func(r *pushpb.PushRequest) {
			r.MsgOptions, r.ExclusiveMsgOptions = 7, map[string]uint32{"a": 7}
		}), []string{"a"}},
		{"platforms", req(func(r *pushpb.PushRequest) {
			r.PlatformConfig = &pushpb.PlatformConfig{Platforms: []string{"ios"}}
			r.ExclusivePlatformConfig = map[string]*pushpb.PlatformConfig{"a": {WithoutPlatforms: []string{"ios"}}}
		}), []string{"a"}},
		{"idempotency key of 128 bytes", req(func(r *pushpb.PushRequest) { r.IdempotencyKey = k128 }), []string{"a"}},
		{"push at the limit", req(func(r *pushpb.PushRequest) {
			r.Uids, r.MsgBodies, r.Notification = []string{"a", "b", "a"}, []*anypb.Any{wireSized(t, 100)}, note(100)
		}), []string{"a", "b"}},
	}
	for _, c := range good {
		uids, err := s.validatePush(c.req)
		if err != nil || fmt.Sprint(uids) != fmt.Sprint(c.uids) {
			t.Fatalf("%s: %v, %v; want %v accepted", c.name, uids, err, c.uids)
		}
	}
}

// validDevice refuses each bad field with the exact message naming it and
// fills the provider from the platform's notifier.
func TestValidDevice(t *testing.T) {
	t.Parallel()
	s := validator(t, func(c *Config) {
		c.Platforms = platform.MustParse("ios:notify=apns,android:notify=fcm,web")
	})
	tok1024 := strings.Repeat("t", 1024)
	app256 := strings.Repeat("a", 256)
	bad := []struct {
		name string
		d    *pushpb.Device
		msg  string
	}{
		{"nil", nil, "device: must be set"},
		{"bad uid", &pushpb.Device{Uid: "a b", Platform: "ios", Token: "t"}, `uid: "a b" must not contain '/', spaces or control characters`},
		{"unknown platform", &pushpb.Device{Uid: "a", Platform: "beos", Token: "t"}, `device.platform: unknown platform "beos"`},
		{"platform without notifier", &pushpb.Device{Uid: "a", Platform: "web", Token: "t"},
			`device.platform: platform "web" has no notifier configured (--platforms …:notify=<provider>)`},
		{"unknown provider", &pushpb.Device{Uid: "a", Platform: "ios", Provider: "sms", Token: "t"},
			`device.provider: unknown provider "sms" (known: apns, fcm, log)`},
		{"other provider", &pushpb.Device{Uid: "a", Platform: "ios", Provider: "fcm", Token: "t"},
			`device.provider: platform "ios" is served by "apns", not "fcm"`},
		{"no token", &pushpb.Device{Uid: "a", Platform: "ios"}, "device.token: must not be empty"},
		{"long token", &pushpb.Device{Uid: "a", Platform: "ios", Token: tok1024 + "t"}, "device.token: 1025 bytes, at most 1024"},
		{"token starting with slash", &pushpb.Device{Uid: "a", Platform: "ios", Token: "/t"}, "device.token: must not contain '/', spaces or control characters"},
		{"token with space", &pushpb.Device{Uid: "a", Platform: "ios", Token: "t t"}, "device.token: must not contain '/', spaces or control characters"},
		{"token with control", &pushpb.Device{Uid: "a", Platform: "ios", Token: "t\x7f"}, "device.token: must not contain '/', spaces or control characters"},
		{"long app id", &pushpb.Device{Uid: "a", Platform: "ios", Token: "t", AppId: app256 + "a"}, "device.app_id: 257 bytes, at most 256"},
	}
	for _, c := range bad {
		_, err := s.validDevice(c.d)
		refusedAs(t, c.name, err, codes.InvalidArgument, c.msg)
	}
	good := []struct {
		d        *pushpb.Device
		provider string
	}{
		{&pushpb.Device{Uid: "a", Platform: "ios", Token: tok1024, AppId: app256}, "apns"},
		{&pushpb.Device{Uid: "a", Platform: "android", Provider: "fcm", Token: "t"}, "fcm"},
	}
	for _, c := range good {
		dev, err := s.validDevice(c.d)
		if err != nil || dev.UID != "a" || dev.Platform != c.d.Platform || dev.Provider != c.provider || dev.Token != c.d.Token || dev.AppID != c.d.AppId {
			t.Fatalf("validDevice(%v) = %+v, %v; want it accepted with provider %s", c.d, dev, err, c.provider)
		}
	}
}
