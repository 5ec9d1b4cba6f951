package release

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

const (
	fakeVersion = "v9.9.9"
	fakePackage = Module + "/internal/release/testdata/fakecmd"
)

var scratch string // removed by TestMain

func TestMain(m *testing.M) {
	var err error
	if scratch, err = os.MkdirTemp("", "release-test"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(scratch)
	os.Exit(code)
}

var fakes sync.Map // version and GOARCH → *fakeBuild

type fakeBuild struct {
	once sync.Once
	path string
	err  error
}

// fake builds the stand-in command once per stamped version and
// architecture, as dist.sh builds the real ones (static, -trimpath, the
// version stamped).
func fake(t *testing.T, version, goarch string) string {
	t.Helper()
	v, _ := fakes.LoadOrStore(version+" "+goarch, &fakeBuild{})
	b := v.(*fakeBuild)
	b.once.Do(func() {
		b.path = filepath.Join(scratch, "fakecmd-"+version+"-"+goarch)
		cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-o", b.path,
			"-ldflags", "-s -w -X github.com/gomsg/gomsg/internal/buildinfo.version="+version+
				" -X github.com/gomsg/gomsg/internal/buildinfo.commit=0123abcd",
			"./testdata/fakecmd")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH="+goarch)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// dist describes the artefacts writeDist lays out; the zero value (with bin
// set) is a good release.
type dist struct {
	bin    string           // the binary every command is a copy of
	leave  string           // an archive entry left out
	mode   map[string]int64 // archive entry modes other than the defaults
	extra  string           // an entry outside the platform's folder
	sbom   func(c string, doc map[string]any)
	unsums string // a file SHA256SUMS leaves out
}

func spec(dir string) Spec {
	return Spec{
		Dir: dir, Version: fakeVersion, GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		Requires: map[string][]string{"gomsg": {"go.uber.org/zap"}},
		Packages: map[string]string{"gomsg": fakePackage, "gomsgctl": fakePackage, "gomsg-bench": fakePackage},
		Run:      true,
	}
}

func writeDist(t *testing.T, d dist) string {
	t.Helper()
	dir := t.TempDir()
	name := Name(fakeVersion, runtime.GOOS, runtime.GOARCH)
	bin, err := os.ReadFile(d.bin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, name+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	// Stored, not compressed: a valid gzip stream all the same, and the
	// race detector makes compressing each test's copies of the binary
	// take seconds.
	zw, err := gzip.NewWriterLevel(f, gzip.NoCompression)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	add := func(path string, mode int64, data []byte) {
		t.Helper()
		if err := tw.WriteHeader(&tar.Header{Name: path, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
		t.Fatal(err)
	}
	for _, e := range append(slices.Clone(Commands), Docs...) {
		if e == d.leave {
			continue
		}
		mode, data := int64(0o644), []byte("text of "+e+"\n")
		if slices.Contains(Commands, e) {
			mode, data = 0o755, bin
		}
		if m, ok := d.mode[e]; ok {
			mode = m
		}
		add(name+"/"+e, mode, data)
	}
	if d.extra != "" {
		add(d.extra, 0o644, []byte("stray\n"))
	}
	for _, c := range []interface{ Close() error }{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}

	sum, err := fileSHA256(d.bin)
	if err != nil {
		t.Fatal(err)
	}
	listed := []string{name + ".tar.gz"}
	for _, c := range Commands {
		// The fields cyclonedx-gomod's bin mode writes that Check reads.
		doc := map[string]any{
			"bomFormat":   "CycloneDX",
			"specVersion": "1.6",
			"metadata": map[string]any{
				"component": map[string]any{"type": "application", "name": Module, "version": fakeVersion},
				"properties": []map[string]string{
					{"name": "cdx:gomod:binary:hash:SHA-256", "value": sum},
					{"name": "cdx:gomod:binary:name", "value": c},
					{"name": "cdx:gomod:build:env:GOOS", "value": runtime.GOOS},
					{"name": "cdx:gomod:build:env:GOARCH", "value": runtime.GOARCH},
				},
			},
			"components": []map[string]any{{"type": "library", "name": "go.uber.org/zap", "version": "v1.28.0"}},
		}
		if d.sbom != nil {
			d.sbom(c, doc)
		}
		data, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		file := name + "." + c + ".cdx.json"
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
		listed = append(listed, file)
	}
	var sums strings.Builder
	for _, file := range listed {
		if file == d.unsums {
			continue
		}
		s, err := fileSHA256(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&sums, "%s  %s\n", s, file)
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCheckGoodRelease(t *testing.T) {
	t.Parallel()
	dir := writeDist(t, dist{bin: fake(t, fakeVersion, runtime.GOARCH)})
	if err := Check(spec(dir)); err != nil {
		t.Fatalf("Check of a good release: %v", err)
	}
}

// TestCheckFindsEachFault lays out a release with one fault and expects Check
// to name it.
func TestCheckFindsEachFault(t *testing.T) {
	t.Parallel()
	name := Name(fakeVersion, runtime.GOOS, runtime.GOARCH)
	setProp := func(key, value string) func(string, map[string]any) {
		return func(c string, doc map[string]any) {
			props := doc["metadata"].(map[string]any)["properties"].([]map[string]string)
			for _, p := range props {
				if p["name"] == key {
					p["value"] = value
				}
			}
		}
	}
	for _, tc := range []struct {
		name   string
		d      dist
		change func(t *testing.T, s *Spec, dir string)
		want   string
	}{
		{name: "licence left out", d: dist{leave: "LICENSE"}, want: "no " + name + "/LICENSE"},
		{name: "command left out", d: dist{leave: "gomsg-bench"}, want: "no " + name + "/gomsg-bench"},
		{name: "binary not executable", d: dist{mode: map[string]int64{"gomsgctl": 0o644}}, want: "gomsgctl is not executable"},
		{name: "entry outside the folder", d: dist{extra: "gomsg"}, want: "unexpected entry gomsg"},
		{name: "SBOM not listed", d: dist{unsums: name + ".gomsg.cdx.json"}, want: "SHA256SUMS does not list " + name + ".gomsg.cdx.json"},
		{name: "archive changed after the sums", change: func(t *testing.T, s *Spec, dir string) {
			f, err := os.OpenFile(filepath.Join(dir, name+".tar.gz"), os.O_APPEND|os.O_WRONLY, 0)
			if err == nil {
				_, err = f.Write(make([]byte, 1024))
				f.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
		}, want: name + ".tar.gz: sha256 "},
		{name: "sums file unreadable", change: func(t *testing.T, s *Spec, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte("not a sum\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, want: "SHA256SUMS line 1"},
		{name: "SBOM of another binary", d: dist{sbom: setProp("cdx:gomod:binary:hash:SHA-256", strings.Repeat("0", 64))},
			want: "describes a binary with sha256 \"" + strings.Repeat("0", 64)},
		{name: "SBOM of another platform", d: dist{sbom: setProp("cdx:gomod:build:env:GOARCH", "mips")},
			want: "cdx:gomod:build:env:GOARCH is \"mips\""},
		{name: "SBOM of another version", d: dist{sbom: func(c string, doc map[string]any) {
			doc["metadata"].(map[string]any)["component"].(map[string]any)["version"] = "v0.0.1"
		}}, want: "describes " + Module + " v0.0.1"},
		{name: "SBOM without a required module", d: dist{sbom: func(c string, doc map[string]any) {
			doc["components"] = []map[string]any{{"name": "golang.org/x/sys", "version": "v0.47.0"}}
		}}, want: "lists no component go.uber.org/zap"},
		{name: "not a CycloneDX document", d: dist{sbom: func(c string, doc map[string]any) { doc["bomFormat"] = "SPDX" }},
			want: "bomFormat \"SPDX\""},
		{name: "binary without a required module", change: func(t *testing.T, s *Spec, dir string) {
			s.Requires["gomsg"] = append(s.Requires["gomsg"], "github.com/alicebob/miniredis/v2")
		}, want: "gomsg: built without github.com/alicebob/miniredis/v2"},
		{name: "binary from another package", change: func(t *testing.T, s *Spec, dir string) {
			s.Packages["gomsgctl"] = Module + "/cmd/gomsgctl"
		}, want: "built from " + fakePackage + ", want " + Module + "/cmd/gomsgctl"},
		{name: "binary for another platform", d: dist{bin: fake(t, fakeVersion, otherArch())}, change: func(t *testing.T, s *Spec, dir string) {
			s.Run = false
		}, want: "built with GOARCH=\"" + otherArch() + "\", want \"" + runtime.GOARCH + "\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.d.bin == "" {
				tc.d.bin = fake(t, fakeVersion, runtime.GOARCH)
			}
			dir := writeDist(t, tc.d)
			s := spec(dir)
			if tc.change != nil {
				tc.change(t, &s, dir)
			}
			err := Check(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// TestCheckRunsVersion: on this machine's platform each binary's `version`
// must print the command's name and the stamped version.
func TestCheckRunsVersion(t *testing.T) {
	dir := writeDist(t, dist{bin: fake(t, "v9.9.8", runtime.GOARCH)})
	err := Check(spec(dir))
	if want := "gomsg version printed \"gomsg v9.9.8 commit 0123abcd "; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("binary stamped v9.9.8: Check = %v\nwant an error containing %q", err, want)
	}

	dir = writeDist(t, dist{bin: fake(t, fakeVersion, runtime.GOARCH)})
	t.Setenv("FAKECMD_VERSION_OUTPUT", "gomsgctl "+fakeVersion+" commit unknown")
	err = Check(spec(dir))
	if want := "gomsg version printed \"gomsgctl " + fakeVersion; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("binary printing another name: Check = %v\nwant an error containing %q", err, want)
	}
	s := spec(dir)
	s.Run = false
	if err := Check(s); err != nil {
		t.Fatalf("Check without running the binaries: %v", err)
	}
}
