// Package platform holds the cluster's platform configuration: which
// platforms exist and, per platform, its offline policy and notifier.
package platform

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomsg/gomsg/internal/offline"
)

// Policy is a platform's offline policy: whether NEED_OFFLINE messages are
// stored while it is offline, for how long, and how many per user.
type Policy = offline.Policy

// Platform is one configured platform.
type Platform struct {
	Name    string
	Offline Policy
	// Notifier names horn's provider for the platform ("apns", "fcm", "log");
	// empty: no mobile notifications.
	Notifier string
}

// Set is the configured platforms, in configuration order.
type Set struct {
	list []Platform
}

var nameRE = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)

// DefaultSpec is the platform configuration used when none is given.
const DefaultSpec = "ios:offline=168h/100:notify=apns,android:offline=168h/100:notify=fcm,web:offline=72h/100,desktop:offline=168h/100"

// Parse reads a comma-separated list of platforms, each
// name[:offline=<expiry>/<max>|:offline=none][:notify=<provider>], e.g.
// "ios:offline=168h/100:notify=apns,web:offline=none".
func Parse(spec string) (Set, error) {
	var s Set
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		parts := strings.Split(item, ":")
		p := Platform{Name: parts[0], Offline: Policy{Store: true, Expiry: 7 * 24 * time.Hour, MaxCount: 100}}
		if !nameRE.MatchString(p.Name) {
			return Set{}, fmt.Errorf("platform %q: names are 1-32 of [a-z0-9_]", p.Name)
		}
		if s.Has(p.Name) {
			return Set{}, fmt.Errorf("platform %q: listed twice", p.Name)
		}
		for _, opt := range parts[1:] {
			k, v, _ := strings.Cut(opt, "=")
			switch k {
			case "offline":
				pol, err := parsePolicy(v)
				if err != nil {
					return Set{}, fmt.Errorf("platform %q: %w", p.Name, err)
				}
				p.Offline = pol
			case "notify":
				p.Notifier = v
			default:
				return Set{}, fmt.Errorf("platform %q: unknown option %q (want offline= or notify=)", p.Name, k)
			}
		}
		s.list = append(s.list, p)
	}
	if len(s.list) == 0 {
		return Set{}, fmt.Errorf("no platforms configured")
	}
	return s, nil
}

func parsePolicy(v string) (Policy, error) {
	if v == "none" {
		return Policy{}, nil
	}
	exp, max, ok := strings.Cut(v, "/")
	if !ok {
		return Policy{}, fmt.Errorf("offline=%q: want <expiry>/<max count> or none", v)
	}
	d, err := time.ParseDuration(exp)
	if err != nil || d < time.Second {
		return Policy{}, fmt.Errorf("offline=%q: expiry must be a duration of at least 1s", v)
	}
	n, err := strconv.Atoi(max)
	if err != nil || n < 1 {
		return Policy{}, fmt.Errorf("offline=%q: max count must be a positive integer", v)
	}
	return Policy{Store: true, Expiry: d, MaxCount: n}, nil
}

// MustParse is Parse for specs known to be valid.
func MustParse(spec string) Set {
	s, err := Parse(spec)
	if err != nil {
		panic(err)
	}
	return s
}

// Names lists the platforms in configuration order.
func (s Set) Names() []string {
	out := make([]string, len(s.list))
	for i, p := range s.list {
		out[i] = p.Name
	}
	return out
}

// Has reports whether name is configured.
func (s Set) Has(name string) bool {
	_, ok := s.Get(name)
	return ok
}

// Get returns a platform by name.
func (s Set) Get(name string) (Platform, bool) {
	i := slices.IndexFunc(s.list, func(p Platform) bool { return p.Name == name })
	if i < 0 {
		return Platform{}, false
	}
	return s.list[i], true
}

// Select applies a request's filters: the listed platforms (all configured
// ones when empty) minus the excluded ones, in configuration order. It returns
// the first unknown name it meets.
func (s Set) Select(platforms, without []string) (selected []string, unknown string) {
	for _, names := range [...][]string{platforms, without} {
		for _, n := range names {
			if !s.Has(n) {
				return nil, n
			}
		}
	}
	for _, p := range s.list {
		if len(platforms) > 0 && !slices.Contains(platforms, p.Name) {
			continue
		}
		if slices.Contains(without, p.Name) {
			continue
		}
		selected = append(selected, p.Name)
	}
	return selected, ""
}
