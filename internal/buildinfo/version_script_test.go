package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionScript runs scripts/version.sh, which stamps `make build`,
// `make dist` and `make image`, in a scratch git repository: only the commit
// tagged v<VERSION>, with no tracked file changed, is the release.
func TestVersionScript(t *testing.T) {
	t.Parallel()
	_, self, _, _ := runtime.Caller(0)
	script, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "scripts", "version.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com",
			"-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	version := func() (string, error) {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join(dir, "scripts", "version.sh"))
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); ok {
			return strings.TrimSpace(string(ee.Stderr)), err
		}
		return strings.TrimSpace(string(out)), err
	}
	want := func(step, v string) {
		t.Helper()
		got, err := version()
		if err != nil || got != v {
			t.Fatalf("%s: version.sh = %q, %v; want %q", step, got, err, v)
		}
	}

	write("scripts/version.sh", string(script))
	write("VERSION", "1.2.3\n")
	want("no git repository", "v1.2.3-dev")

	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "one")
	want("untagged commit", "v1.2.3-dev")

	git("tag", "v1.2.2")
	want("commit tagged with another version", "v1.2.3-dev")

	git("tag", "-a", "-m", "release", "v1.2.3")
	want("annotated release tag", "v1.2.3")

	write("notes.txt", "untracked")
	want("untracked file beside the release", "v1.2.3")

	write("VERSION", "1.2.3 \n\n")
	want("VERSION changed in its white space only", "v1.2.3-dev")
	git("checkout", "-q", "--", "VERSION")
	want("changes undone", "v1.2.3")

	git("add", "notes.txt")
	want("staged change on the release commit", "v1.2.3-dev")
	git("commit", "-q", "-m", "two")
	want("commit after the release", "v1.2.3-dev")

	write("VERSION", "1.3.0-rc.1\n")
	git("commit", "-q", "-am", "rc")
	git("tag", "v1.3.0-rc.1")
	want("lightweight pre-release tag", "v1.3.0-rc.1")

	for _, bad := range []string{"v1.3.0", "1.3", "01.3.0", "1.3.0+build", ""} {
		write("VERSION", bad+"\n")
		if got, err := version(); err == nil || !strings.Contains(got, "VERSION holds") {
			t.Errorf("VERSION %q: version.sh = %q, %v; want it refused naming VERSION", bad, got, err)
		}
	}
}
