package main

import (
	"io"
	"strings"
	"testing"

	"github.com/gomsg/gomsg"
)

// TestRunWantsVERSIONsVersion: the stamp checked is the VERSION file's
// release, or that release with -dev; anything else is refused before a
// file is read.
func TestRunWantsVERSIONsVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() // empty: a version that passes goes on to find nothing
	for _, v := range []string{"", gomsg.Version(), "v" + gomsg.Version() + "-rc.1", "v0.0.0-20260101000000-0123456789ab", "(devel)"} {
		err := run(io.Discard, dir, v, []string{"linux/amd64"})
		if err == nil || !strings.Contains(err.Error(), "VERSION says "+gomsg.Version()) {
			t.Errorf("run with -version %q = %v, want it refused naming VERSION's %s", v, err, gomsg.Version())
		}
	}
	for _, v := range []string{"v" + gomsg.Version(), "v" + gomsg.Version() + "-dev"} {
		err := run(io.Discard, dir, v, []string{"linux/amd64"})
		if err == nil || strings.Contains(err.Error(), "VERSION says") {
			t.Errorf("run with -version %q in an empty folder = %v, want the version taken and the platform failed", v, err)
		}
	}
	if err := run(io.Discard, dir, "v"+gomsg.Version(), nil); err == nil || !strings.Contains(err.Error(), "name the platforms") {
		t.Errorf("run without platforms = %v, want it refused", err)
	}
}
