package boat

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/metrics"
)

// TestConfigDefaults: every unset field gets its documented default, and a
// set field keeps its value.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	c.Defaults()
	want := Config{EtcdPrefix: "/gomsg", LeaseTTL: 10 * time.Second, SendQueue: 64, SendQueueBytes: 4 << 20, MaxAckWait: time.Minute,
		WheelTick: 50 * time.Millisecond, WriteTimeout: 10 * time.Second, DisconnectBatch: 500,
		DisconnectBacklog: 100000, DisconnectFlush: 50 * time.Millisecond, ShutdownGrace: 10 * time.Second,
		MaxConnections: 100000, MaxConnectionsPerIP: 1000, MaxStreamsPerConnection: 16, ConnectRate: 2000, ConnectRatePerIP: 200,
		ConnectTimeout: 10 * time.Second, GhostSweep: time.Minute, SessionRequestRate: 50, SessionRequestBurst: 100, MaxRoomsPerSession: 16, MaxRooms: 100000,
		RoomBatch: 32, RoomBatchWindow: 10 * time.Millisecond, RoomQueue: 1024}
	want.GRPC = c.GRPC
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults\n%+v\nwant\n%+v", c, want)
	}
	set := Config{EtcdPrefix: "/p", LeaseTTL: 3 * time.Second, SendQueue: 5, SendQueueBytes: 73, MaxAckWait: 7 * time.Second,
		WheelTick: 9 * time.Millisecond, WriteTimeout: 11 * time.Second, DisconnectBatch: 13,
		DisconnectBacklog: 17, DisconnectFlush: 19 * time.Millisecond, ShutdownGrace: 23 * time.Second,
		MaxConnections: 29, MaxConnectionsPerIP: 71, MaxStreamsPerConnection: 31, ConnectRate: 37, ConnectRatePerIP: 41,
		ConnectTimeout: 43 * time.Second, GhostSweep: 47 * time.Second, SessionRequestRate: 79, SessionRequestBurst: 83, MaxRoomsPerSession: 53, MaxRooms: 59,
		RoomBatch: 61, RoomBatchWindow: NoBatchWindow, RoomQueue: 67}
	c = set
	c.Defaults()
	set.GRPC = c.GRPC
	if !reflect.DeepEqual(c, set) {
		t.Fatalf("set fields changed by Defaults:\n%+v\nwant\n%+v", c, set)
	}
}

// TestConfigValidate: each bad setting is named by its flag; the least
// allowed value of each passes.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	least := func() Config {
		c := Config{ID: "b", ClientAddr: ":1", InternalAddr: ":2", SendQueue: 1, SendQueueBytes: 1024, DisconnectBacklog: 1,
			LeaseTTL: time.Second, MaxConnections: 1, MaxConnectionsPerIP: 1, MaxStreamsPerConnection: 1, ConnectRate: 1,
			ConnectRatePerIP: 1, ConnectTimeout: 100 * time.Millisecond, GhostSweep: 100 * time.Millisecond,
			SessionRequestRate: 0.001, SessionRequestBurst: 1, MaxRoomsPerSession: 1, MaxRooms: 1, RoomBatch: 1, RoomBatchWindow: NoBatchWindow, RoomQueue: 1}
		c.Defaults()
		return c
	}
	c := least()
	if err := c.Validate(); err != nil {
		t.Fatalf("least allowed config: %v", err)
	}
	for _, tc := range []struct {
		flag string
		edit func(*Config)
	}{
		{"--boat-id", func(c *Config) { c.ID = "" }},
		{"--client-addr", func(c *Config) { c.ClientAddr = "" }},
		{"--boat-internal-addr", func(c *Config) { c.InternalAddr = "" }},
		{"--send-queue", func(c *Config) { c.SendQueue = 0 }},
		{"--send-queue-bytes", func(c *Config) { c.SendQueueBytes = 1023 }},
		{"--disconnect-backlog", func(c *Config) { c.DisconnectBacklog = 0 }},
		{"--lease-ttl", func(c *Config) { c.LeaseTTL = time.Second - 1 }},
		{"--max-connections", func(c *Config) { c.MaxConnections = 0 }},
		{"--max-connections-per-ip", func(c *Config) { c.MaxConnectionsPerIP = 0 }},
		{"--max-streams-per-connection", func(c *Config) { c.MaxStreamsPerConnection = 0 }},
		{"--connect-rate", func(c *Config) { c.ConnectRate = 0.5 }},
		{"--connect-rate-per-ip", func(c *Config) { c.ConnectRatePerIP = 0.5 }},
		{"--connect-timeout", func(c *Config) { c.ConnectTimeout = 100*time.Millisecond - 1 }},
		{"--ghost-sweep-interval", func(c *Config) { c.GhostSweep = 100*time.Millisecond - 1 }},
		{"--session-request-rate", func(c *Config) { c.SessionRequestRate = -1 }},
		{"--session-request-burst", func(c *Config) { c.SessionRequestBurst = -1 }},
		{"--max-rooms-per-session", func(c *Config) { c.MaxRoomsPerSession = 0 }},
		{"--max-rooms", func(c *Config) { c.MaxRooms = 0 }},
		{"--room-batch", func(c *Config) { c.RoomBatch = 0 }},
		{"--room-queue", func(c *Config) { c.RoomBatch = 2 }}, // below --room-batch
	} {
		c := least()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%s: %v, want an error naming it", tc.flag, err)
		}
	}
	// New refuses a bad config.
	if _, err := New(Config{ClientAddr: ":1", InternalAddr: ":2"}, zap.NewNop(), metrics.New(), nil, nil); err == nil ||
		!strings.Contains(err.Error(), "--boat-id") {
		t.Fatalf("New with no id: %v, want --boat-id refused", err)
	}
}

// TestRegistrySpreadsSessions: sids spread over the registry's shards (one
// lock each), so many sessions do not contend on one.
func TestRegistrySpreadsSessions(t *testing.T) {
	t.Parallel()
	var r registry
	r.init()
	const n = 2000
	for i := range n {
		r.put(newSession(strings.Repeat("7", i%7)+time.Duration(i).String(), 1))
	}
	used := 0
	for i := range r.shards {
		if k := len(r.shards[i].m); k > 0 {
			used++
		}
		if k := len(r.shards[i].m); k > 4*n/len(r.shards) {
			t.Errorf("shard %d holds %d of %d sessions", i, k, n)
		}
	}
	if used < len(r.shards)*3/4 {
		t.Fatalf("%d sessions on %d of %d shards", n, used, len(r.shards))
	}
	if r.len() != n || len(r.all()) != n {
		t.Fatalf("registry len %d, all %d, want %d", r.len(), len(r.all()), n)
	}
}
