package validate

import (
	"path/filepath"
	"testing"
)

// deploy/compose/nats.yml replaces Kafka with a nats-server: Kafka is gone,
// station, carrier and horn wait for a healthy nats and are told to use it,
// and boat (which publishes nothing) gets the same queue settings.
func TestComposeNATSOverride(t *testing.T) {
	t.Parallel()
	p := loadCompose(t, composeVariant{name: "nats", files: []string{"docker-compose.yml", filepath.Join("deploy", "compose", "nats.yml")}})
	if _, ok := p.Services["kafka"]; ok {
		t.Error("the kafka service is still there")
	}
	if _, ok := p.Services["nats"]; !ok {
		t.Fatal("no nats service")
	}
	for _, name := range []string{"station", "carrier", "horn", "boat"} {
		s, ok := p.Services[name]
		if !ok {
			t.Fatalf("no %s service", name)
		}
		env := composeEnv(s)
		if env["GOMSG_QUEUE"] != "nats" || env["GOMSG_NATS_URL"] != "nats://nats:4222" {
			t.Errorf("%s: GOMSG_QUEUE=%q GOMSG_NATS_URL=%q, want nats and nats://nats:4222", name, env["GOMSG_QUEUE"], env["GOMSG_NATS_URL"])
		}
		if name == "boat" {
			continue
		}
		if _, ok := s.DependsOn["kafka"]; ok {
			t.Errorf("%s still waits for kafka", name)
		}
		if d, ok := s.DependsOn["nats"]; !ok || d.Condition != "service_healthy" {
			t.Errorf("%s: depends_on nats %+v, want service_healthy", name, d)
		}
	}
}
