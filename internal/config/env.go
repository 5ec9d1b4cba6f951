package config

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
)

// EnvOnly lists GOMSG_* variables that are not named after a flag of the
// binary that checks its environment but are still legitimate in it: the
// variables of gomsg's other binary (a shell or container often sets both)
// and of its tests and benchmarks. Packages that read such a variable add it
// here in an init function (AllowEnv), so CheckEnv does not reject it.
var EnvOnly = []string{
	// gomsgctl's flags (its own GOMSG_* variables).
	"GOMSG_ADDR", "GOMSG_PUSH_ADDR", "GOMSG_UID", "GOMSG_PLATFORM", "GOMSG_TOKEN", "GOMSG_COUNT",
	"GOMSG_WITHOUT_PLATFORM", "GOMSG_ACK", "GOMSG_OFFLINE", "GOMSG_NOTIFY", "GOMSG_TITLE",
	"GOMSG_BODY_TEXT", "GOMSG_BODY_FILE", "GOMSG_SOUND", "GOMSG_BADGE", "GOMSG_COLLAPSE_ID",
	"GOMSG_TTL", "GOMSG_DATA", "GOMSG_PROVIDER", "GOMSG_APP_ID", "GOMSG_API_KEY", "GOMSG_TIMEOUT",
	"GOMSG_TLS", "GOMSG_CA_FILE", "GOMSG_JWT_SECRET", "GOMSG_REGISTER_TOKEN",
	"GOMSG_IDEMPOTENCY_KEY", "GOMSG_CERT_FILE", "GOMSG_KEY_FILE", "GOMSG_ROOM", "GOMSG_ALL", "GOMSG_PULL",
	"GOMSG_RECEIPTS",
	// The scripts' own: where scripts/node.sh keeps Node.js, and whether it
	// may fetch it.
	"GOMSG_NODE_DIR", "GOMSG_NODE_FETCH",
}

// AllowEnv adds names to EnvOnly. Call it from an init function.
func AllowEnv(names ...string) { EnvOnly = append(EnvOnly, names...) }

// CheckEnv returns an error naming the first GOMSG_* variable of the
// environment that is neither the variable of a flag in any of the flag sets
// nor in EnvOnly or extra: a typo that would otherwise be ignored without a
// word. The error suggests the closest known name.
func CheckEnv(sets []*flag.FlagSet, extra ...string) error {
	return checkEnv(os.Environ(), sets, extra)
}

func checkEnv(environ []string, sets []*flag.FlagSet, extra []string) error {
	known := make(map[string]bool)
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) { known[EnvName(f.Name)] = true })
	}
	for _, n := range slices.Concat(EnvOnly, extra) {
		known[n] = true
	}
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "GOMSG_") && !known[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	name := unknown[0]
	msg := fmt.Sprintf("unknown environment variable %s (no such setting", name)
	if s := closest(name, known, len("GOMSG_")); s != "" {
		msg += "; did you mean " + s + "?"
	}
	msg += ")"
	if len(unknown) > 1 {
		msg += fmt.Sprintf("; also unknown: %s", strings.Join(unknown[1:], ", "))
	}
	return fmt.Errorf("%s", msg)
}

// closest returns the known name at the smallest edit distance from name,
// if that distance is small enough to be a typo; the first shared bytes of
// every name (GOMSG_) do not count towards its length.
func closest(name string, known map[string]bool, shared int) string {
	best, bestD := "", 0
	for k := range known {
		d := distance(name, k)
		if best == "" || d < bestD || (d == bestD && k < best) {
			best, bestD = k, d
		}
	}
	if bestD > max(2, (len(name)-shared)/3) {
		return ""
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
