// Package release checks the artefacts `make dist` (scripts/dist.sh) writes:
// for each platform, the archive and what it holds, the SHA256SUMS lines, a
// CycloneDX SBOM per binary that describes that very binary, the version
// stamped into the binaries and, on the machine's own platform, what each
// binary's `version` prints. CI runs it (make dist-check) so that a release
// cut by hand finds the recipe working.
package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Module is the path of the module the binaries are built from.
const Module = "github.com/gomsg/gomsg"

// Commands are the binaries every archive holds, Docs the files beside them.
var (
	Commands = []string{"gomsg", "gomsgctl", "gomsg-bench"}
	Docs     = []string{"LICENSE", "README.md", "CHANGELOG.md"}
)

// DevBackends are the modules of the embedded etcd, Kafka-protocol broker and
// Redis that `gomsg dev` runs on: a release's gomsg keeps them.
var DevBackends = []string{"go.etcd.io/etcd/server/v3", "github.com/twmb/franz-go/pkg/kfake", "github.com/alicebob/miniredis/v2"}

// Name is the base name of a platform's artefacts, e.g. gomsg_0.1.0_linux_amd64.
func Name(version, goos, goarch string) string {
	return "gomsg_" + strings.TrimPrefix(version, "v") + "_" + goos + "_" + goarch
}

// Spec says what one platform's artefacts must be. The stamped version shows
// only when a binary runs (-trimpath keeps -ldflags out of the build
// information): the SBOMs must name it, and Run checks what the binaries of
// this machine's platform print; the others are built by the same command.
type Spec struct {
	Dir     string // the folder make dist wrote
	Version string // the stamped version, e.g. v0.1.0 or v0.1.0-dev
	GOOS    string
	GOARCH  string
	// Requires lists, per command, modules its binary must be built with.
	Requires map[string][]string
	// Packages names, per command, the main package it must be built from
	// (by default Module/cmd/<command>).
	Packages map[string]string
	// Run asks each binary for its version (the platform must be this
	// machine's).
	Run bool
}

// Check returns every way the platform's artefacts differ from s, joined, or
// nil.
func Check(s Spec) error {
	name := Name(s.Version, s.GOOS, s.GOARCH)
	archive := name + ".tar.gz"
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	sums, err := readSums(filepath.Join(s.Dir, "SHA256SUMS"))
	if err != nil {
		fail("%v", err)
	}
	wantListed := []string{archive}
	for _, c := range Commands {
		wantListed = append(wantListed, name+"."+c+".cdx.json")
	}
	for _, f := range wantListed {
		if _, ok := sums[f]; !ok && sums != nil {
			fail("SHA256SUMS does not list %s", f)
		}
	}
	for f, want := range sums {
		got, err := fileSHA256(filepath.Join(s.Dir, f))
		if err != nil {
			fail("SHA256SUMS lists %s: %v", f, err)
		} else if got != want {
			fail("%s: sha256 %s, SHA256SUMS says %s", f, got, want)
		}
	}

	scratch, err := os.MkdirTemp("", "distcheck")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	defer os.RemoveAll(scratch)
	bins, problems, err := extract(filepath.Join(s.Dir, archive), name, scratch)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, p := range problems {
		fail("%s: %s", archive, p)
	}
	for _, c := range Commands {
		bin, ok := bins[c]
		if !ok {
			continue // a problem extract reported
		}
		for _, err := range checkBuild(bin, c, s) {
			fail("%s/%s: %v", archive, c, err)
		}
		sbom := name + "." + c + ".cdx.json"
		for _, err := range checkSBOM(filepath.Join(s.Dir, sbom), bin, c, s) {
			fail("%s: %v", sbom, err)
		}
		if s.Run {
			out, err := exec.Command(bin, "version").CombinedOutput()
			if want := c + " " + s.Version + " commit "; err != nil || !strings.HasPrefix(string(out), want) {
				fail("%s/%s version printed %q (%v), want it to start with %q", archive, c, out, err, want)
			}
		}
	}
	return errors.Join(errs...)
}

// readSums parses a sha256sum file: "<hex>  <name>" (or " *<name>") per line.
func readSums(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		sum, file, ok := strings.Cut(sc.Text(), " ")
		file = strings.TrimPrefix(strings.TrimPrefix(file, " "), "*")
		if _, err := hex.DecodeString(sum); !ok || err != nil || len(sum) != 64 || file == "" || strings.Contains(file, "/") {
			return nil, fmt.Errorf("SHA256SUMS line %d is not \"<sha256>  <file>\": %q", n, sc.Text())
		}
		sums[file] = sum
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(sums) == 0 {
		return nil, errors.New("SHA256SUMS is empty")
	}
	return sums, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// extract writes the archive's binaries into dir and returns their paths by
// command, and what the archive lacks or holds that it should not.
func extract(archive, name, dir string) (bins map[string]string, problems []string, err error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", filepath.Base(archive), err)
	}
	bins = map[string]string{}
	seen := map[string]bool{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", filepath.Base(archive), err)
		}
		rel, ok := strings.CutPrefix(strings.TrimSuffix(h.Name, "/"), name+"/")
		if h.Typeflag == tar.TypeDir && strings.TrimSuffix(h.Name, "/") == name {
			continue
		}
		if !ok || strings.Contains(rel, "/") || h.Typeflag != tar.TypeReg {
			problems = append(problems, "unexpected entry "+h.Name)
			continue
		}
		seen[rel] = true
		if !slices.Contains(Commands, rel) {
			continue
		}
		if h.Mode&0o111 == 0 {
			problems = append(problems, rel+" is not executable")
		}
		path := filepath.Join(dir, rel)
		out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return nil, nil, err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, nil, err
		}
		bins[rel] = path
	}
	for _, want := range append(slices.Clone(Commands), Docs...) {
		if !seen[want] {
			problems = append(problems, "no "+name+"/"+want)
		}
	}
	return bins, problems, nil
}

// checkBuild reads the build information the Go linker put into bin.
func checkBuild(bin, command string, s Spec) []error {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return []error{err}
	}
	var errs []error
	settings := map[string]string{}
	for _, kv := range bi.Settings {
		settings[kv.Key] = kv.Value
	}
	for k, want := range map[string]string{"GOOS": s.GOOS, "GOARCH": s.GOARCH, "CGO_ENABLED": "0"} {
		if settings[k] != want {
			errs = append(errs, fmt.Errorf("built with %s=%q, want %q", k, settings[k], want))
		}
	}
	pkg := s.Packages[command]
	if pkg == "" {
		pkg = Module + "/cmd/" + command
	}
	if bi.Path != pkg {
		errs = append(errs, fmt.Errorf("built from %s, want %s", bi.Path, pkg))
	}
	deps := map[string]bool{}
	for _, d := range bi.Deps {
		deps[d.Path] = true
	}
	for _, m := range s.Requires[command] {
		if !deps[m] {
			errs = append(errs, fmt.Errorf("built without %s (tags %q)", m, settings["-tags"]))
		}
	}
	return errs
}

// sbom is the part of a CycloneDX document checked here.
type sbom struct {
	BOMFormat string `json:"bomFormat"`
	Metadata  struct {
		Component struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"component"`
		Properties []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"properties"`
	} `json:"metadata"`
	Components []struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"components"`
}

// checkSBOM checks that the SBOM at path describes bin: its version and
// platform, its SHA-256, and the modules it is built with.
func checkSBOM(path, bin, command string, s Spec) []error {
	data, err := os.ReadFile(path)
	if err != nil {
		return []error{err}
	}
	var doc sbom
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return []error{fmt.Errorf("not JSON: %w", err)}
	}
	var errs []error
	if doc.BOMFormat != "CycloneDX" {
		errs = append(errs, fmt.Errorf("bomFormat %q, want CycloneDX", doc.BOMFormat))
	}
	if c := doc.Metadata.Component; c.Name != Module || c.Version != s.Version {
		errs = append(errs, fmt.Errorf("describes %s %s, want %s %s", c.Name, c.Version, Module, s.Version))
	}
	props := map[string]string{}
	for _, p := range doc.Metadata.Properties {
		props[p.Name] = p.Value
	}
	sum, err := fileSHA256(bin)
	if err != nil {
		return append(errs, err)
	}
	if got := props["cdx:gomod:binary:hash:SHA-256"]; got != sum {
		errs = append(errs, fmt.Errorf("describes a binary with sha256 %q, the archive's %s has %s", got, command, sum))
	}
	for k, want := range map[string]string{"cdx:gomod:build:env:GOOS": s.GOOS, "cdx:gomod:build:env:GOARCH": s.GOARCH} {
		if props[k] != want {
			errs = append(errs, fmt.Errorf("%s is %q, want %q", k, props[k], want))
		}
	}
	components := map[string]bool{}
	for _, c := range doc.Components {
		components[c.Name] = true
	}
	for _, m := range s.Requires[command] {
		if !components[m] {
			errs = append(errs, fmt.Errorf("lists no component %s", m))
		}
	}
	if len(doc.Components) == 0 {
		errs = append(errs, errors.New("lists no components"))
	}
	return errs
}
