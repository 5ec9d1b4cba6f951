package gomsg

import (
	"regexp"
	"testing"
)

// semver is a semantic version 2.0.0 without build metadata: the form Helm
// charts, npm packages and (behind a "v") Go module tags all accept.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

func TestVersionIsSemver(t *testing.T) {
	t.Parallel()
	if v := Version(); !semver.MatchString(v) {
		t.Fatalf("VERSION holds %q: want a semantic version without a leading v, e.g. 0.1.0", v)
	}
}
