package embedded_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/embedded"
)

var embeddedServers = []string{"go.etcd.io/etcd/server/", "github.com/twmb/franz-go/pkg/kfake", "github.com/alicebob/miniredis"}

func deps(t *testing.T, tags string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-tags", tags, "-deps", "github.com/gomsg/gomsg/cmd/gomsg").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -tags %q -deps ./cmd/gomsg: %v\n%s", tags, err, out)
	}
	return strings.Fields(string(out))
}

func has(deps []string, prefix string) bool {
	for _, d := range deps {
		if strings.HasPrefix(d, prefix) {
			return true
		}
	}
	return false
}

// TestNodevLeavesServersOut: the release build (-tags nodev) links none of
// the embedded servers; the default build has all of them.
func TestNodevLeavesServersOut(t *testing.T) {
	t.Parallel()
	if !embedded.Included {
		t.Fatal("this test runs in the default build, which includes the embedded backends")
	}
	full, nodev := deps(t, ""), deps(t, "nodev")
	for _, s := range embeddedServers {
		if !has(full, s) {
			t.Errorf("the default build of cmd/gomsg does not link %s: `gomsg dev` needs it", s)
		}
		if has(nodev, s) {
			t.Errorf("the -tags nodev build of cmd/gomsg links %s", s)
		}
	}
	if !has(nodev, "github.com/gomsg/gomsg/internal/embedded") {
		t.Error("the -tags nodev build no longer has internal/embedded's stub; the test checks nothing")
	}
}

// TestNodevDevSaysHowToGetBackends: `gomsg dev` from a -tags nodev build
// fails at once, saying how to get a build with the embedded backends.
func TestNodevDevSaysHowToGetBackends(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "gomsg")
	if out, err := exec.Command("go", "build", "-tags", "nodev", "-o", bin, "github.com/gomsg/gomsg/cmd/gomsg").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags nodev: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "dev", "--ops-addr=").CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("gomsg dev (nodev) still running after 60s:\n%s", out)
	}
	if err == nil {
		t.Fatalf("gomsg dev (nodev) exited 0:\n%s", out)
	}
	for _, want := range []string{"built with -tags nodev", "go build ./cmd/gomsg", "--redis-addr"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("gomsg dev (nodev) output does not contain %q:\n%s", want, out)
		}
	}
}
