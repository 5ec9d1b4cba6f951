package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/queue"
)

// The group session timeout has a name that fits either queue; its former,
// Kafka-only name still sets it, for every consumer a process runs.
func TestQueueSessionTimeoutAndItsFormerName(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 6 * time.Second},
		{[]string{"--queue-session-timeout", "9s"}, 9 * time.Second},
		{[]string{"--kafka-session-timeout", "8s"}, 8 * time.Second},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var carrier, horn queue.ConsumerSettings
		registerConsumer(fs, &carrier, &horn)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if carrier.SessionTimeout != tc.want || horn.SessionTimeout != tc.want {
			t.Errorf("%v: session timeouts %s and %s, want %s", tc.args, carrier.SessionTimeout, horn.SessionTimeout, tc.want)
		}
	}
}
