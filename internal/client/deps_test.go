package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeviceSideImportsNoBackendClient holds the promise that a device
// client (this package, the public SDK in /client, and gomsgctl built on
// it) links no Kafka, Redis or etcd client: those belong to the services.
func TestDeviceSideImportsNoBackendClient(t *testing.T) {
	t.Parallel()
	forbidden := []string{"github.com/segmentio/kafka-go", "github.com/redis/go-redis", "go.etcd.io/etcd",
		"github.com/twmb/franz-go", "github.com/alicebob/miniredis"}
	for _, pkg := range []string{"github.com/gomsg/gomsg/internal/client", "github.com/gomsg/gomsg/client", "github.com/gomsg/gomsg/cmd/gomsgctl"} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s listed only %d packages: %q", pkg, len(deps), deps)
		}
		for _, d := range deps {
			for _, f := range forbidden {
				if strings.HasPrefix(d, f) {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	}
}
