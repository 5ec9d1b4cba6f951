package station

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/platform"
)

// Defaults fills every unset field with its documented value and keeps
// every set one.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	c.Defaults()
	want := Config{
		EtcdPrefix: "/gomsg", LeaseTTL: 10 * time.Second, TaskTopic: "gomsg.tasks", KickPolicy: KickOlder,
		MaxUIDs: 10000, MaxBodies: 100, MaxReceiptsPerPush: 100000, MaxBodyBytes: 65536, MaxRequestBytes: 262144, MaxPushBytes: 67108864,
		MaxPushBytesInFlight: 268435456, PushRatePerKey: 20000, ReceiptsRatePerKey: 2000, IdempotencyRatePerKey: 500,
		MaxSessionsPerUID: 100, MaxSessionsPerPlatform: 10, AuthTimeout: 5 * time.Second,
		HTTP: HTTPLimits{MaxBodyBytes: 2097152, ReadTimeout: 30 * time.Second, ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 65536},
		MaxDevicesPerUID: 10, ShutdownGrace: 10 * time.Second, IdempotencyWindow: 24 * time.Hour,
		BroadcastTopic: "gomsg.broadcast", MaxBroadcastRooms: 100, BroadcastRate: 50,
		PresenceBuffer: 100000,
	}
	if !slices.Equal(c.Platforms.Names(), platform.MustParse(platform.DefaultSpec).Names()) {
		t.Fatalf("platforms %v, want the default %v", c.Platforms.Names(), platform.MustParse(platform.DefaultSpec).Names())
	}
	want.Platforms, want.GRPC = c.Platforms, c.GRPC
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults\n%+v\nwant\n%+v", c, want)
	}

	set := Config{
		EtcdPrefix: "/p", LeaseTTL: 3 * time.Second, TaskTopic: "t", KickPolicy: KeepAll,
		Platforms: platform.MustParse("ios"),
		MaxUIDs:   7, MaxBodies: 6, MaxReceiptsPerPush: 8, MaxBodyBytes: 5, MaxRequestBytes: 9, MaxPushBytes: 11, MaxPushBytesInFlight: 13,
		PushRatePerKey: 1, ReceiptsRatePerKey: 2, IdempotencyRatePerKey: 3,
		MaxSessionsPerUID: 4, MaxSessionsPerPlatform: 3, AuthTimeout: time.Second,
		HTTP: HTTPLimits{MaxBodyBytes: 12, ReadTimeout: time.Second, ReadHeaderTimeout: 2 * time.Second,
			IdleTimeout: 3 * time.Second, MaxHeaderBytes: 2000},
		MaxDevicesPerUID: 2, ShutdownGrace: time.Second, IdempotencyWindow: time.Minute,
		BroadcastTopic: "b", MaxBroadcastRooms: 1, BroadcastRate: 1.5,
		PresenceTopic: "p", PresenceBuffer: 1,
	}
	got := set
	got.Defaults()
	set.GRPC = got.GRPC
	if !slices.Equal(got.Platforms.Names(), []string{"ios"}) {
		t.Fatalf("set platforms replaced: %v", got.Platforms.Names())
	}
	got.Platforms = set.Platforms
	if !reflect.DeepEqual(got, set) {
		t.Fatalf("Defaults changed set fields:\n%+v\nwant\n%+v", got, set)
	}
}

// Validate names the first bad setting, and accepts every value at the edge
// of its range.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(*Config)
		want   string // "" accepted
	}{
		{"defaults", func(*Config) {}, ""},
		{"no push addr", func(c *Config) { c.PushGRPCAddr = "" }, "--push-grpc-addr: must be set"},
		{"no internal addr", func(c *Config) { c.InternalAddr = "" }, "--station-internal-addr: must be set"},
		{"bad kick policy", func(c *Config) { c.KickPolicy = "kick-all" }, `--kick-policy: "kick-all", want "kick-older" or "keep-all"`},
		{"keep-all", func(c *Config) { c.KickPolicy = KeepAll }, ""},
		{"no uids", func(c *Config) { c.MaxUIDs = 0 }, errLimits},
		{"one uid", func(c *Config) { c.MaxUIDs = 1 }, ""},
		{"no bodies", func(c *Config) { c.MaxBodies = 0 }, errLimits},
		{"one body", func(c *Config) { c.MaxBodies = 1 }, ""},
		{"no receipts", func(c *Config) { c.MaxReceiptsPerPush = -1 }, "--max-receipts-per-push: -1, must be positive"},
		{"one receipt", func(c *Config) { c.MaxReceiptsPerPush = 1 }, ""},
		{"no body bytes", func(c *Config) { c.MaxBodyBytes = 0 }, errLimits},
		{"one body byte", func(c *Config) { c.MaxBodyBytes = 1 }, ""},
		{"request below body", func(c *Config) { c.MaxRequestBytes = c.MaxBodyBytes - 1 }, errLimits},
		{"request equals body", func(c *Config) { c.MaxRequestBytes = c.MaxBodyBytes }, ""},
		{"push below request", func(c *Config) { c.MaxPushBytes = c.MaxRequestBytes - 1 },
			"--max-push-bytes: 262143, must be at least --max-request-bytes (262144)"},
		{"push equals request", func(c *Config) { c.MaxPushBytes = c.MaxRequestBytes }, ""},
		{"in flight below push", func(c *Config) { c.MaxPushBytesInFlight = int64(c.MaxPushBytes) - 1 },
			"--max-push-bytes-in-flight: 67108863, must be at least --max-push-bytes (67108864)"},
		{"in flight equals push", func(c *Config) { c.MaxPushBytesInFlight = int64(c.MaxPushBytes) }, ""},
		{"no sessions", func(c *Config) { c.MaxSessionsPerUID = 0 }, "--max-sessions-per-uid: 0, must be positive"},
		{"one session", func(c *Config) { c.MaxSessionsPerUID, c.MaxSessionsPerPlatform = 1, 1 }, ""},
		{"no platform sessions", func(c *Config) { c.MaxSessionsPerPlatform = 0 },
			"--max-sessions-per-platform: 0, must be 1 to --max-sessions-per-uid (100)"},
		{"platform above uid", func(c *Config) { c.MaxSessionsPerPlatform = 101 },
			"--max-sessions-per-platform: 101, must be 1 to --max-sessions-per-uid (100)"},
		{"platform equals uid", func(c *Config) { c.MaxSessionsPerPlatform = 100 }, ""},
		{"negative auth timeout", func(c *Config) { c.AuthTimeout = -time.Second }, "--auth-timeout: -1s, must be positive"},
		{"zero auth timeout", func(c *Config) { c.AuthTimeout = 0 }, ""},
		{"no devices", func(c *Config) { c.MaxDevicesPerUID = 0 }, "--max-devices-per-uid: 0, must be at least 1"},
		{"one device", func(c *Config) { c.MaxDevicesPerUID = 1 }, ""},
		{"short window", func(c *Config) { c.IdempotencyWindow = time.Second - 1 }, "--idempotency-window: 999.999999ms, must be at least 1s"},
		{"one second window", func(c *Config) { c.IdempotencyWindow = time.Second }, ""},
		{"no broadcast rooms", func(c *Config) { c.MaxBroadcastRooms = -1 }, "--max-broadcast-rooms: -1, must be positive"},
		{"one broadcast room", func(c *Config) { c.MaxBroadcastRooms = 1 }, ""},
		{"broadcast rate below 1", func(c *Config) { c.BroadcastRate = 0.5 }, "--broadcast-rate: 0.5, must be at least 1"},
		{"broadcast rate 1", func(c *Config) { c.BroadcastRate = 1 }, ""},
		{"broadcast topic is the task topic", func(c *Config) { c.BroadcastTopic = c.TaskTopic },
			`--broadcast-topic: "gomsg.tasks", must differ from --task-topic`},
		{"presence topic is the task topic", func(c *Config) { c.PresenceTopic = c.TaskTopic },
			`--presence-topic: "gomsg.tasks", must differ from --task-topic and --broadcast-topic`},
		{"presence topic is the broadcast topic", func(c *Config) { c.PresenceTopic = c.BroadcastTopic },
			`--presence-topic: "gomsg.broadcast", must differ from --task-topic and --broadcast-topic`},
		{"presence topic", func(c *Config) { c.PresenceTopic = "gomsg.presence" }, ""},
		{"no presence buffer", func(c *Config) { c.PresenceBuffer = -1 }, "--presence-buffer: -1, must be positive"},
		{"presence buffer 1", func(c *Config) { c.PresenceBuffer = 1 }, ""},
		{"bad http limit", func(c *Config) { c.HTTP.MaxBodyBytes = 0 }, "--http-max-body-bytes: 0, must be positive"},
		{"bad grpc limit", func(c *Config) { c.GRPC.MaxHeaderBytes = 1 }, "--grpc-max-header-bytes: 1, must be at least 1024"},
	}
	for _, c := range cases {
		cfg := Config{PushGRPCAddr: ":1", InternalAddr: ":2"}
		cfg.Defaults()
		c.change(&cfg)
		err := cfg.Validate()
		if got := errString(err); got != c.want {
			t.Errorf("%s: Validate() = %q, want %q", c.name, got, c.want)
		}
	}
}

const errLimits = "--max-uids, --max-bodies, --max-body-bytes: must be positive, and --max-request-bytes at least --max-body-bytes"

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestHTTPLimitsValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(*HTTPLimits)
		want   string
	}{
		{"defaults", func(*HTTPLimits) {}, ""},
		{"no body", func(l *HTTPLimits) { l.MaxBodyBytes = 0 }, "--http-max-body-bytes: 0, must be positive"},
		{"one byte body", func(l *HTTPLimits) { l.MaxBodyBytes = 1 }, ""},
		{"negative read", func(l *HTTPLimits) { l.ReadTimeout = -time.Second }, "--http-read-timeout: -1s, must be positive"},
		{"zero read", func(l *HTTPLimits) { l.ReadTimeout = 0 }, ""},
		{"negative header", func(l *HTTPLimits) { l.ReadHeaderTimeout = -time.Second }, "--http-read-header-timeout: -1s, must be positive"},
		{"zero header", func(l *HTTPLimits) { l.ReadHeaderTimeout = 0 }, ""},
		{"negative idle", func(l *HTTPLimits) { l.IdleTimeout = -time.Second }, "--http-idle-timeout: -1s, must be positive"},
		{"zero idle", func(l *HTTPLimits) { l.IdleTimeout = 0 }, ""},
		{"small header", func(l *HTTPLimits) { l.MaxHeaderBytes = 1023 }, "--http-max-header-bytes: 1023, must be at least 1024"},
		{"1 KiB header", func(l *HTTPLimits) { l.MaxHeaderBytes = 1024 }, ""},
	}
	for _, c := range cases {
		var l HTTPLimits
		l.Defaults()
		c.change(&l)
		if got := errString(l.Validate()); got != c.want {
			t.Errorf("%s: Validate() = %q, want %q", c.name, got, c.want)
		}
	}
}

// pushScope maps every Push API method and path to its scope, leaves
// health, reflection and the OpenAPI document open, and asks every scope of
// anything else.
func TestPushScope(t *testing.T) {
	t.Parallel()
	cases := []struct {
		method string
		scope  string
		open   bool
	}{
		{"/gomsg.push.Push/Push", "push", false},
		{"/v1/push", "push", false},
		{"/gomsg.push.Push/Kickout", "kickout", false},
		{"/v1/online", "online", false},
		{"/v1/devices/list", "devices", false},
		{"/gomsg.push.Push/BroadcastRoom", "broadcast", false},
		{"/gomsg.push.Push/BroadcastAll", "broadcast", false},
		{"/gomsg.push.Push/RoomOnline", "online", false},
		{"/v1/broadcast/room", "broadcast", false},
		{"/v1/broadcast/all", "broadcast", false},
		{"/v1/rooms/online", "online", false},
		{"/grpc.health.v1.Health/Check", "", true},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "", true},
		{"/openapi.json", "", true},
		{"/v1/unknown", "*", false},
		{"/openapi.json/x", "*", false},
	}
	for _, c := range cases {
		scope, open := pushScope(c.method)
		if string(scope) != c.scope || open != c.open {
			t.Errorf("pushScope(%s) = %q, %v; want %q, %v", c.method, scope, open, c.scope, c.open)
		}
	}
}
