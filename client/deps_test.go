package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestModuleGraphHoldsNoBackendClient holds the promise that an app that
// requires this module gets no Kafka, Redis or etcd client, nor any other of
// the server's dependencies, in its module graph.
func TestModuleGraphHoldsNoBackendClient(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "mod", "graph").CombinedOutput()
	if err != nil {
		t.Fatalf("go mod graph: %v\n%s", err, out)
	}
	graph := string(out)
	if !strings.Contains(graph, "github.com/gomsg/gomsg/client google.golang.org/grpc@") {
		t.Fatalf("go mod graph does not show this module's requirements:\n%s", graph)
	}
	for _, f := range []string{"github.com/segmentio/kafka-go", "github.com/twmb/franz-go", "github.com/redis/go-redis",
		"github.com/alicebob/miniredis", "go.etcd.io/etcd", "github.com/nats-io", "github.com/grpc-ecosystem/grpc-gateway",
		"go.uber.org/zap", "github.com/prometheus", "github.com/sideshow/apns2", "github.com/gomsg/gomsg@"} {
		if strings.Contains(graph, f) {
			t.Errorf("the module graph holds %s:\n%s", strings.TrimSpace(f), graph)
		}
	}
}
