// Package room names rooms and decides which rooms a session may join.
// Membership itself lives in the boat that holds the session; this package
// is what boat, station and auth agree on.
package room

import (
	"fmt"
	"strings"
)

// MaxName is the longest room name, in bytes.
const MaxName = 128

// MaxPatterns caps the room patterns one token may carry.
const MaxPatterns = 64

// AllKey is the Kafka key of broadcasts to everyone: '*' is not allowed in
// a room name, so it never collides with a room.
const AllKey = "*"

// Check names what is wrong with a room name, or returns nil: 1 to MaxName
// printable ASCII bytes, no spaces and no '*' (the wildcard of patterns).
func Check(name string) error {
	if name == "" {
		return fmt.Errorf("empty room name")
	}
	if len(name) > MaxName {
		return fmt.Errorf("room name of %d bytes, at most %d", len(name), MaxName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c > '~' {
			return fmt.Errorf("room name %q: byte %d is not printable ASCII (spaces are not allowed)", name, i)
		}
		if c == '*' {
			return fmt.Errorf("room name %q: '*' is not allowed in a room name", name)
		}
	}
	return nil
}

// CheckPattern names what is wrong with a pattern of a token's rooms: a room
// name, a prefix followed by one trailing '*' ("match-*"), or a lone "*"
// (every room).
func CheckPattern(p string) error {
	if p == "*" {
		return nil
	}
	if prefix, ok := strings.CutSuffix(p, "*"); ok {
		if err := Check(prefix); err != nil {
			return fmt.Errorf("room pattern %q: %w", p, err)
		}
		return nil
	}
	return Check(p)
}

// CheckPatterns checks a token's room patterns.
func CheckPatterns(ps []string) error {
	if len(ps) > MaxPatterns {
		return fmt.Errorf("%d room patterns, at most %d", len(ps), MaxPatterns)
	}
	for _, p := range ps {
		if err := CheckPattern(p); err != nil {
			return err
		}
	}
	return nil
}

// Allowed reports whether a session whose token carries patterns may join
// name. Patterns are trusted to have passed CheckPatterns.
func Allowed(patterns []string, name string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}
