package buildinfo

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/gomsg/gomsg"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/gomsg/gomsg", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2025-01-02T03:04:05Z"},
			{Key: "vcs.modified", Value: "true"},
		}}
	got := FromBuildInfo(bi, true)
	want := Info{Version: "v1.2.3", Commit: "0123456789abcdef0123456789abcdef01234567", Dirty: true,
		Time: "2025-01-02T03:04:05Z", GoVersion: "go1.99.1", Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if got != want {
		t.Fatalf("FromBuildInfo = %+v, want %+v", got, want)
	}
	line := got.String()
	wantLine := "v1.2.3 commit 0123456789abcdef0123456789abcdef01234567+dirty 2025-01-02T03:04:05Z go1.99.1 " + want.Platform
	if line != wantLine {
		t.Fatalf("String = %q, want %q", line, wantLine)
	}

	bi.Settings[3].Value = "false"
	if s := FromBuildInfo(bi, true).String(); strings.Contains(s, "dirty") {
		t.Fatalf("clean tree printed as dirty: %q", s)
	}
}

func TestFromBuildInfoMissing(t *testing.T) {
	t.Parallel()
	dev := "v" + gomsg.Version() + "-dev"
	got := FromBuildInfo(nil, false)
	if got.Version != dev || got.Commit != "" || got.GoVersion != runtime.Version() {
		t.Fatalf("FromBuildInfo(nil) = %+v, want version %s", got, dev)
	}
	if s := got.String(); !strings.HasPrefix(s, dev+" commit unknown ") || !strings.Contains(s, runtime.Version()) {
		t.Fatalf("String = %q", s)
	}
	// A build from a source tree the toolchain knows no version of: the
	// release VERSION names, marked as not the release itself.
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/gomsg/gomsg", Version: "(devel)"}}
	if v := FromBuildInfo(bi, true).Version; v != dev {
		t.Fatalf("FromBuildInfo((devel)).Version = %q, want %q", v, dev)
	}
}

// TestBinaryReportsBuild builds gomsgctl from this checkout and asks it for
// its version: the line carries the module version the toolchain recorded
// (VERSION's release with -dev when it recorded none), the Go version and the
// commit the toolchain recorded (none in a git worktree, whose .git is a
// file), and values stamped with -ldflags -X, as `make build` does, win.
func TestBinaryReportsBuild(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "gomsgctl")
	build := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, "github.com/gomsg/gomsg/cmd/gomsgctl")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("gomsgctl version: %v\n%s", err, out)
	}
	line := string(out)
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	// The first line is "<path>: go1.x.y"; settings are "\tbuild\tkey=value".
	lines := strings.Split(string(meta), "\n")
	_, goVersion, _ := strings.Cut(lines[0], ": ")
	var revision, modified, modVersion string
	for _, l := range lines {
		// "\tmod\tgithub.com/gomsg/gomsg\t<version>": (devel) in a worktree
		// without VCS stamping, a pseudo-version in a git clone.
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/gomsg/gomsg" {
			modVersion = f[2]
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "build\tvcs.revision="); ok {
			revision = v
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "build\tvcs.modified="); ok {
			modified = v
		}
	}
	if modVersion == "" {
		t.Fatalf("no main module line in go version -m:\n%s", meta)
	}
	if modVersion == "(devel)" {
		modVersion = "v" + gomsg.Version() + "-dev"
	}
	want := []string{"gomsgctl " + modVersion + " ", " " + goVersion + " "}
	switch {
	case revision != "" && modified == "true":
		want = append(want, " commit "+revision+"+dirty ")
	case revision != "":
		want = append(want, " commit "+revision+" ")
	default:
		want = append(want, " commit unknown ")
	}
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("gomsgctl version = %q, want it to contain %q (go version -m:\n%s)", line, w, meta)
		}
	}

	stamped := filepath.Join(t.TempDir(), "gomsgctl")
	build = exec.Command("go", "build", "-buildvcs=false", "-o", stamped, "-ldflags",
		"-X github.com/gomsg/gomsg/internal/buildinfo.version=v9.8.7 -X github.com/gomsg/gomsg/internal/buildinfo.commit=abc123+dirty",
		"github.com/gomsg/gomsg/cmd/gomsgctl")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err = exec.Command(stamped, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("gomsgctl version: %v\n%s", err, out)
	}
	if w := "gomsgctl v9.8.7 commit abc123+dirty " + goVersion + " "; !strings.HasPrefix(string(out), w) {
		t.Errorf("stamped gomsgctl version = %q, want it to start with %q", out, w)
	}
}
