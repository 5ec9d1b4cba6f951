// Package gomsg carries this source tree's release version, the VERSION file
// at the root of the repository, into every binary built from it, so that a
// build that was not stamped (go run, go install ./cmd/..., go build) still
// says which release it is on its way to. The programs are under cmd/; the
// Go SDK is github.com/gomsg/gomsg/client.
package gomsg

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var version string

// Version is the release this tree is or is about to be, as VERSION holds it:
// a semantic version without the "v" that tags put in front, e.g. "0.1.0".
func Version() string { return strings.TrimSpace(version) }
