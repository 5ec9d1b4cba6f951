package room

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	// '!' and '~' are the first and last printable ASCII bytes.
	for _, ok := range []string{"a", "match-42", "live://1000", "!", "a~b", strings.Repeat("r", MaxName)} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", " ", "a b", "tab\there", "é", "x*", "*", strings.Repeat("r", MaxName+1), "nl\n", "del\x7f"} {
		if err := Check(bad); err == nil {
			t.Errorf("Check(%q) = nil, want an error", bad)
		}
	}
}

func TestPatterns(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"*", "match-*", "lobby"} {
		if err := CheckPattern(ok); err != nil {
			t.Errorf("CheckPattern(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "**", "a*b", "a b*", "m*-*"} {
		if err := CheckPattern(bad); err == nil {
			t.Errorf("CheckPattern(%q) = nil, want an error", bad)
		}
	}
	if err := CheckPatterns(make([]string, MaxPatterns+1)); err == nil {
		t.Error("too many patterns accepted")
	}
	most := make([]string, MaxPatterns)
	for i := range most {
		most[i] = "room-" + strings.Repeat("x", i+1)
	}
	if err := CheckPatterns(most); err != nil {
		t.Errorf("CheckPatterns of %d valid patterns: %v", MaxPatterns, err)
	}
	if err := CheckPatterns([]string{"lobby", "match-*", "*"}); err != nil {
		t.Errorf("CheckPatterns of valid patterns: %v", err)
	}
	if err := CheckPatterns([]string{"lobby", "a b", "match-*"}); err == nil || !strings.Contains(err.Error(), "not printable") {
		t.Errorf("CheckPatterns with a bad pattern: %v, want the bad one named", err)
	}
	ps := []string{"lobby", "match-*"}
	for name, want := range map[string]bool{"lobby": true, "lobby2": false, "match-": true, "match-42": true,
		"matc": false, "other": false} {
		if got := Allowed(ps, name); got != want {
			t.Errorf("Allowed(%v, %q) = %v, want %v", ps, name, got, want)
		}
	}
	if !Allowed([]string{"*"}, "anything") || Allowed(nil, "lobby") {
		t.Error("a lone * must allow every room, no patterns none")
	}
}
