// Command distcheck checks the release artefacts `make dist` wrote, for the
// platforms given (make dist-check):
//
//	go run ./internal/release/distcheck -dir dist -version v0.1.0 linux/amd64 darwin/arm64
//
// It exits 1 naming every problem it found, after one line per platform.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/gomsg/gomsg"
	"github.com/gomsg/gomsg/internal/buildinfo"
	"github.com/gomsg/gomsg/internal/release"
)

func main() {
	dir := flag.String("dir", "dist", "the folder make dist wrote")
	version := flag.String("version", "", "the version make dist stamped (scripts/version.sh)")
	flag.Parse()
	if err := run(os.Stdout, *dir, *version, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "distcheck:", err)
		os.Exit(1)
	}
}

// run checks each platform and writes a line (or the problems) for each to w.
func run(w io.Writer, dir, version string, platforms []string) error {
	// The stamp is VERSION's release, or that release with -dev.
	if rel := "v" + gomsg.Version(); version != rel && version != buildinfo.Dev() {
		return fmt.Errorf("-version %q: VERSION says %s, so want %s or %s", version, gomsg.Version(), rel, buildinfo.Dev())
	}
	if len(platforms) == 0 {
		return fmt.Errorf("name the platforms to check, e.g. linux/amd64")
	}
	failed := 0
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok {
			return fmt.Errorf("platform %q: want OS/ARCH", p)
		}
		err := release.Check(release.Spec{
			Dir: dir, Version: version, GOOS: goos, GOARCH: goarch,
			Requires: map[string][]string{"gomsg": release.DevBackends},
			Run:      goos == runtime.GOOS && goarch == runtime.GOARCH,
		})
		name := release.Name(version, goos, goarch)
		if err != nil {
			failed++
			fmt.Fprintf(w, "FAIL %s:\n  %s\n", name, strings.ReplaceAll(err.Error(), "\n", "\n  "))
			continue
		}
		ran := ""
		if goos == runtime.GOOS && goarch == runtime.GOARCH {
			ran = ", each binary's version run"
		}
		fmt.Fprintf(w, "ok   %s: archive, SHA256SUMS, SBOMs and stamp %s checked%s\n", name, version, ran)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d platforms failed", failed, len(platforms))
	}
	return nil
}
