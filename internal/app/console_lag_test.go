package app

import (
	"slices"
	"strings"
	"testing"

	"github.com/gomsg/gomsg/internal/station"
)

// The console reads the lag of carrier's own groups on Kafka, and says
// plainly that it cannot on NATS rather than show a number.
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

	cfg = station.Config{}
	b.Queue = QueueNATS
	consoleLag(&cfg, "", b, &Clients{})
	if cfg.CarrierLag != nil || len(cfg.CarrierGroups) != 0 || !strings.HasPrefix(cfg.CarrierLagNote, "lag not available on NATS") {
		t.Errorf("nats: reader %v, groups %v, note %q; want no reader and a note", cfg.CarrierLag, cfg.CarrierGroups, cfg.CarrierLagNote)
	}
}
