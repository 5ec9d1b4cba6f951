package carrier

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/queue"
)

// An empty Config gets the documented defaults; the retry and dead-letter
// topics follow the task topic; a Config with every field set keeps them all.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var c Config
	c.Defaults()
	checks := []struct {
		name      string
		got, want any
	}{
		{"TaskTopic", c.TaskTopic, "gomsg.tasks"},
		{"NotifyTopic", c.NotifyTopic, "gomsg.notify"},
		{"GroupID", c.GroupID, "gomsg-carrier"},
		{"Workers", c.Workers, 256},
		{"AckWait", c.AckWait, 10 * time.Second},
		{"CallTimeout", c.CallTimeout, 5 * time.Second},
		{"RetryTopic", c.RetryTopic, "gomsg.tasks.retry"},
		{"DeadLetterTopic", c.DeadLetterTopic, "gomsg.tasks.dlq"},
		{"MaxRetries", c.MaxRetries, 5},
		{"RetryBackoffMin", c.RetryBackoffMin, time.Second},
		{"RetryBackoffMax", c.RetryBackoffMax, 30 * time.Second},
		{"Consumer.PartitionBufferBytes", c.Consumer.PartitionBufferBytes, int64(4 << 20)},
		{"Consumer.SessionTimeout", c.Consumer.SessionTimeout, 6 * time.Second},
		{"BroadcastTopic", c.BroadcastTopic, "gomsg.broadcast"},
		{"BroadcastWorkers", c.BroadcastWorkers, 16},
		{"BroadcastAttempts", c.BroadcastAttempts, 3},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("default %s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if got, want := c.Platforms.Names(), platform.MustParse(platform.DefaultSpec).Names(); !slices.Equal(got, want) {
		t.Errorf("default platforms %v, want %v", got, want)
	}

	derived := Config{TaskTopic: "x.tasks"}
	derived.Defaults()
	if derived.RetryTopic != "x.tasks.retry" || derived.DeadLetterTopic != "x.tasks.dlq" {
		t.Errorf("task topic x.tasks: retry %q, dead letters %q; want x.tasks.retry and x.tasks.dlq",
			derived.RetryTopic, derived.DeadLetterTopic)
	}

	set := Config{Brokers: []string{"k:9092"}, TaskTopic: "a", NotifyTopic: "b", GroupID: "c", Workers: 3,
		Platforms: platform.MustParse("web:offline=none"), AckWait: time.Minute, CallTimeout: 2 * time.Second,
		RetryTopic: "d", DeadLetterTopic: "e", MaxRetries: 7, RetryBackoffMin: 3 * time.Second,
		RetryBackoffMax: 4 * time.Second, BroadcastTopic: "f", BroadcastWorkers: 5, BroadcastAttempts: 1,
		Consumer: queue.ConsumerSettings{PartitionBufferBytes: 2048, SessionTimeout: 3 * time.Second}}
	kept := set
	kept.Defaults()
	if kept.TaskTopic != "a" || kept.NotifyTopic != "b" || kept.GroupID != "c" || kept.Workers != 3 ||
		!slices.Equal(kept.Platforms.Names(), []string{"web"}) || kept.AckWait != time.Minute ||
		kept.CallTimeout != 2*time.Second || kept.RetryTopic != "d" || kept.DeadLetterTopic != "e" ||
		kept.MaxRetries != 7 || kept.RetryBackoffMin != 3*time.Second || kept.RetryBackoffMax != 4*time.Second ||
		kept.Consumer != set.Consumer || kept.BroadcastTopic != "f" || kept.BroadcastWorkers != 5 ||
		kept.BroadcastAttempts != 1 {
		t.Errorf("Defaults changed set fields: %+v", kept)
	}
}

// Validate names the flag of the first bad setting and takes the bounds
// themselves; New refuses a bad Config.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := func() Config {
		c := Config{Brokers: []string{"k:9092"}}
		c.Defaults()
		return c
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string // "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"consumer", func(c *Config) { c.Consumer.PartitionBufferBytes = 1023 }, "--partition-buffer-bytes"},
		{"no_brokers", func(c *Config) { c.Brokers = nil }, "--kafka-brokers: must be set"},
		{"workers_0", func(c *Config) { c.Workers = 0 }, "--workers: 0, must be at least 1"},
		{"workers_1", func(c *Config) { c.Workers = 1 }, ""},
		{"ack_wait_short", func(c *Config) { c.AckWait = 10*time.Millisecond - 1 }, "--ack-wait: 9.999999ms, must be at least 10ms"},
		{"ack_wait_10ms", func(c *Config) { c.AckWait = 10 * time.Millisecond }, ""},
		{"max_retries_negative", func(c *Config) { c.MaxRetries = -1 }, "--max-retries: -1, must not be negative"},
		{"max_retries_0", func(c *Config) { c.MaxRetries = 0 }, ""},
		{"backoff_min_0", func(c *Config) { c.RetryBackoffMin = 0 },
			"--retry-backoff-min/--retry-backoff-max: 0s/30s, want 0 < min <= max"},
		{"backoff_max_below_min", func(c *Config) { c.RetryBackoffMin, c.RetryBackoffMax = 2*time.Second, time.Second },
			"--retry-backoff-min/--retry-backoff-max: 2s/1s, want 0 < min <= max"},
		{"backoff_min_eq_max", func(c *Config) { c.RetryBackoffMin, c.RetryBackoffMax = time.Second, time.Second }, ""},
		{"broadcast_workers_0", func(c *Config) { c.BroadcastWorkers = 0 }, "--broadcast-workers: 0, must be at least 1"},
		{"broadcast_workers_1", func(c *Config) { c.BroadcastWorkers = 1 }, ""},
		{"broadcast_attempts_negative", func(c *Config) { c.BroadcastAttempts = -1 }, "--broadcast-attempts: -1, must be at least 1"},
		{"broadcast_attempts_1", func(c *Config) { c.BroadcastAttempts = 1 }, ""},
	} {
		c := good()
		tc.mod(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := New(Config{}, zaptest.NewLogger(t), metrics.New(), nil, nil, nil, nil); err == nil ||
		!strings.Contains(err.Error(), "--kafka-brokers") {
		t.Fatalf("New with no brokers: %v, want the --kafka-brokers error", err)
	}
}
