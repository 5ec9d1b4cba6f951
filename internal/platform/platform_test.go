package platform

import (
	"slices"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	s, err := Parse("ios:offline=24h/10:notify=apns, web:offline=none,desktop")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !slices.Equal(got, []string{"ios", "web", "desktop"}) {
		t.Fatalf("names = %v", got)
	}
	ios, _ := s.Get("ios")
	if ios.Offline != (Policy{Store: true, Expiry: 24 * time.Hour, MaxCount: 10}) || ios.Notifier != "apns" {
		t.Fatalf("ios = %+v", ios)
	}
	web, _ := s.Get("web")
	if web.Offline.Store {
		t.Fatalf("web stores offline: %+v", web)
	}
	desktop, _ := s.Get("desktop")
	if !desktop.Offline.Store || desktop.Offline.MaxCount != 100 {
		t.Fatalf("desktop default policy = %+v", desktop.Offline)
	}
	if _, err := Parse(DefaultSpec); err != nil {
		t.Fatalf("default spec: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"", "iOS", "a-b", "ios,ios", "ios:offline=1h", "ios:offline=x/1",
		"ios:offline=1h/0", "ios:offline=10ms/5", "ios:color=red"} {
		if _, err := Parse(spec); err == nil {
			t.Errorf("Parse(%q) succeeded", spec)
		}
	}
}

// The bounds themselves are accepted: an expiry of exactly 1s, a count of 1.
func TestParseBounds(t *testing.T) {
	t.Parallel()
	s, err := Parse("ios:offline=1s/1")
	if err != nil {
		t.Fatalf("offline=1s/1: %v", err)
	}
	p, _ := s.Get("ios")
	if p.Offline != (Policy{Store: true, Expiry: time.Second, MaxCount: 1}) {
		t.Fatalf("policy %+v, want 1s/1 stored", p.Offline)
	}
}

func TestSelect(t *testing.T) {
	t.Parallel()
	s := MustParse("ios,android,web")
	cases := []struct {
		platforms, without []string
		want               []string
		unknown            string
	}{
		{nil, nil, []string{"ios", "android", "web"}, ""},
		{[]string{"web", "ios"}, nil, []string{"ios", "web"}, ""},
		{nil, []string{"android"}, []string{"ios", "web"}, ""},
		{[]string{"ios"}, []string{"ios"}, nil, ""},
		{[]string{"pc"}, nil, nil, "pc"},
		{nil, []string{"pc"}, nil, "pc"},
	}
	for _, c := range cases {
		got, unknown := s.Select(c.platforms, c.without)
		if !slices.Equal(got, c.want) || unknown != c.unknown {
			t.Errorf("Select(%v,%v) = %v,%q want %v,%q", c.platforms, c.without, got, unknown, c.want, c.unknown)
		}
	}
}
