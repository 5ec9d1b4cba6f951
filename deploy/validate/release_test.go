package validate

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// releaseVersion is the VERSION file's semantic version, e.g. 0.1.0.
func releaseVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// TestChartVersionFollowsVERSION: a release tags vX.Y.Z for the VERSION file's
// X.Y.Z, and the chart released with it says the same, as its version and as
// the appVersion its image tag defaults to.
func TestChartVersionFollowsVERSION(t *testing.T) {
	t.Parallel()
	want := releaseVersion(t)
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != want || ch.Metadata.AppVersion != want {
		t.Errorf("Chart.yaml: version %q, appVersion %q; VERSION says %q (set both to it)",
			ch.Metadata.Version, ch.Metadata.AppVersion, want)
	}
}

// TestLicenseNamed: the licence in LICENSE is the one the chart and every npm
// package declare.
func TestLicenseNamed(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	text, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(text), "MIT License\n") {
		t.Fatalf("LICENSE does not start with \"MIT License\": %.40q", text)
	}
	const spdx = "MIT"

	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := ch.Metadata.Annotations["artifacthub.io/license"]; got != spdx {
		t.Errorf("Chart.yaml annotation artifacthub.io/license = %q, want %q", got, spdx)
	}

	version := releaseVersion(t)
	var packages []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "dist") {
			return filepath.SkipDir
		}
		if d.Name() == "package.json" {
			packages = append(packages, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(packages) == 0 {
		t.Fatal("no package.json found under the repository")
	}
	for _, path := range packages {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var pkg struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			License string `json:"license"`
			Private bool   `json:"private"`
		}
		if err := json.Unmarshal(data, &pkg); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		if pkg.License != spdx {
			t.Errorf("%s: license %q, want %q (LICENSE)", rel, pkg.License, spdx)
		}
		// A published package is released with the rest, at VERSION.
		if !pkg.Private && pkg.Version != version {
			t.Errorf("%s: %s version %q, VERSION says %q", rel, pkg.Name, pkg.Version, version)
		}
	}
}

// TestImageLabels: the image says what it is with the OCI annotation keys,
// its version and commit from the same build arguments that stamp the
// binaries (make image passes them).
func TestImageLabels(t *testing.T) {
	t.Parallel()
	stages, _ := dockerfile(t)
	build, final := stages[0], stages[len(stages)-1]

	var buildText strings.Builder
	for _, in := range build {
		buildText.WriteString(in.cmd + " " + in.args + "\n")
	}
	for _, want := range []string{"buildinfo.version=${VERSION}", "buildinfo.commit=${COMMIT}"} {
		if !strings.Contains(buildText.String(), want) {
			t.Errorf("build stage does not stamp %s", want)
		}
	}

	// An ARG is seen only in the stage that declares it, after it.
	args := map[string]bool{}
	labels := map[string]string{}
	pair := regexp.MustCompile(`([a-z0-9.-]+)="([^"]*)"`)
	for _, in := range final {
		switch in.cmd {
		case "ARG":
			name, _, _ := strings.Cut(in.args, "=")
			args[name] = true
		case "LABEL":
			for _, m := range pair.FindAllStringSubmatch(in.args, -1) {
				labels[m[1]] = m[2]
				for _, ref := range regexp.MustCompile(`\$\{(\w+)\}`).FindAllStringSubmatch(m[2], -1) {
					if !args[ref[1]] {
						t.Errorf("label %s uses ${%s}, which the final stage does not declare before it (ARG %s): it would be empty",
							m[1], ref[1], ref[1])
					}
				}
			}
		}
	}
	// The root package compiles VERSION in: the build context must hold it.
	ignore, err := os.ReadFile(filepath.Join(repoRoot(t), ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	if rules := strings.Fields(string(ignore)); slices.Contains(rules, "VERSION") || slices.Contains(rules, "/VERSION") {
		t.Errorf(".dockerignore leaves out VERSION, which the build compiles in")
	}
	for key, want := range map[string]string{
		"org.opencontainers.image.title":    "gomsg",
		"org.opencontainers.image.version":  "${VERSION}",
		"org.opencontainers.image.revision": "${COMMIT}",
		"org.opencontainers.image.created":  "${CREATED}",
		"org.opencontainers.image.source":   "https://github.com/gomsg/gomsg",
		"org.opencontainers.image.licenses": "MIT",
	} {
		if got, ok := labels[key]; !ok || got != want {
			t.Errorf("label %s = %q, want %q", key, got, want)
		}
	}
}
