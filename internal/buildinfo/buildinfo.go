// Package buildinfo says which gomsg a binary is: its version, the VCS commit
// it was built from (and whether the tree had uncommitted changes) and the Go
// toolchain, read from the build information the Go linker embeds
// (runtime/debug.ReadBuildInfo).
//
// The version is, in order: the one stamped with -ldflags (`make build`,
// `make dist` and the Dockerfile stamp vX.Y.Z on the commit tagged so and
// vX.Y.Z-dev elsewhere, scripts/version.sh); the module version the toolchain
// recorded (`go install github.com/gomsg/gomsg/cmd/gomsg@v0.1.0` records
// v0.1.0, a build in a git clone a pseudo-version); otherwise Dev, the VERSION
// file's release with "-dev".
//
// The Go toolchain records the commit only when it builds inside a git
// checkout whose .git is a directory (not in a git worktree, not in the
// Docker build, which copies no .git). Such builds stamp the version and
// commit ("+dirty" for uncommitted changes) instead, as `make build` and the
// Dockerfile do:
//
//	go build -ldflags "-X github.com/gomsg/gomsg/internal/buildinfo.version=v1.2.3 \
//	  -X github.com/gomsg/gomsg/internal/buildinfo.commit=$(git rev-parse HEAD)" ./cmd/gomsg
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/gomsg/gomsg"
)

// Set with -ldflags "-X …"; they win over what the build information says.
var (
	version string
	commit  string
)

// Dev is the version of a build that carries no other: the release VERSION
// names with "-dev", e.g. v0.1.0-dev. Semantic versioning orders it before
// the release itself, which holds between releases too because VERSION moves
// on to the next release right after a tag.
func Dev() string { return "v" + gomsg.Version() + "-dev" }

// Info describes one build.
type Info struct {
	// Version is the stamped version, else the main module's (a tag such
	// as v1.2.3 or a pseudo-version), else Dev().
	Version string
	// Commit is the VCS revision ("" when unknown); Dirty means the tree
	// had uncommitted changes; Time is the commit time (RFC 3339).
	Commit string
	Dirty  bool
	Time   string
	// GoVersion is the toolchain, Platform GOOS/GOARCH.
	GoVersion string
	Platform  string
}

// Read returns this binary's build information.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	i := FromBuildInfo(bi, ok)
	if version != "" {
		i.Version = version
	}
	if commit != "" {
		i.Commit, i.Dirty = strings.CutSuffix(commit, "+dirty")
		i.Time = ""
	}
	return i
}

// FromBuildInfo extracts an Info from bi (ok false: no build information).
func FromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	i := Info{Version: Dev(), GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		return i
	}
	// "(devel)" is the toolchain's word for "no version known".
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		i.Version = v
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
		case "vcs.modified":
			i.Dirty = s.Value == "true"
		case "vcs.time":
			i.Time = s.Value
		}
	}
	return i
}

// String is the one line `gomsg version` prints, e.g.
// "v1.2.3 commit 0123abcd…(+dirty) 2025-01-02T03:04:05Z go1.26.8 linux/amd64".
func (i Info) String() string {
	parts := []string{i.Version}
	if i.Commit != "" {
		c := "commit " + i.Commit
		if i.Dirty {
			c += "+dirty"
		}
		parts = append(parts, c)
	} else {
		parts = append(parts, "commit unknown")
	}
	if i.Time != "" {
		parts = append(parts, i.Time)
	}
	parts = append(parts, i.GoVersion, i.Platform)
	return strings.Join(parts, " ")
}
