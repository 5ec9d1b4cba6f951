package app

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/station"
)

// The console reads the lag of carrier's own groups, from the Kafka
// brokers or from JetStream, and says plainly when it has no connection to
// read it with rather than show a number.
func TestConsoleLagGroups(t *testing.T) {
	b := Backends{KafkaBrokers: []string{"kafka:9092"}, ReceiptsTopic: DefaultReceiptsTopic}
	b.Defaults()
	var cfg station.Config
	consoleLag(&cfg, "", b, &Clients{})
	want := []station.GroupTopic{{Group: "gomsg-carrier", Topic: "gomsg.tasks"}, {Group: "gomsg-carrier-retry", Topic: "gomsg.tasks.retry"},
		{Group: "gomsg-carrier-broadcast", Topic: "gomsg.broadcast"}, {Group: "gomsg-carrier-receipts", Topic: "gomsg.receipts"}}
	if cfg.CarrierLag == nil || !slices.Equal(cfg.CarrierGroups, want) || cfg.CarrierLagNote != "" {
		t.Errorf("kafka: reader %v, groups %v, note %q; want a reader and %v", cfg.CarrierLag, cfg.CarrierGroups, cfg.CarrierLagNote, want)
	}
	cfg = station.Config{}
	consoleLag(&cfg, "ops", Backends{KafkaBrokers: []string{"kafka:9092"}, TaskTopic: "t", RetryTopic: "r", BroadcastTopic: "b"}, &Clients{})
	want = []station.GroupTopic{{Group: "ops", Topic: "t"}, {Group: "ops-retry", Topic: "r"}, {Group: "ops-broadcast", Topic: "b"}}
	if !slices.Equal(cfg.CarrierGroups, want) {
		t.Errorf("--console-carrier-group ops, no receipts topic: groups %v, want %v", cfg.CarrierGroups, want)
	}

	// On NATS the JetStream connection reads the same groups' lag.
	cfg = station.Config{}
	b.Queue = QueueNATS
	js := &queue.JetStream{}
	consoleLag(&cfg, "", b, &Clients{NATS: js})
	want = []station.GroupTopic{{Group: "gomsg-carrier", Topic: "gomsg.tasks"}, {Group: "gomsg-carrier-retry", Topic: "gomsg.tasks.retry"},
		{Group: "gomsg-carrier-broadcast", Topic: "gomsg.broadcast"}, {Group: "gomsg-carrier-receipts", Topic: "gomsg.receipts"}}
	if cfg.CarrierLag != station.GroupLagReader(js) || !slices.Equal(cfg.CarrierGroups, want) || cfg.CarrierLagNote != "" {
		t.Errorf("nats: reader %v, groups %v, note %q; want the JetStream connection and %v", cfg.CarrierLag, cfg.CarrierGroups, cfg.CarrierLagNote, want)
	}
	cfg = station.Config{}
	consoleLag(&cfg, "", b, &Clients{})
	if cfg.CarrierLag != nil || len(cfg.CarrierGroups) != 0 || !strings.HasPrefix(cfg.CarrierLagNote, "lag not available") {
		t.Errorf("nats, no connection: reader %v, groups %v, note %q; want no reader and a note", cfg.CarrierLag, cfg.CarrierGroups, cfg.CarrierLagNote)
	}
}
