package platform

import (
	"strings"
	"testing"
)

// FuzzParse checks that any --platforms value either is refused or yields a
// set whose names are valid, unique and found again by Get.
func FuzzParse(f *testing.F) {
	f.Add(DefaultSpec)
	f.Add("web:offline=none")
	f.Add("ios:offline=1s/1:notify=apns,web")
	f.Add("a:offline=-1h/3")
	f.Add(",,x:unknown=1")
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := Parse(spec)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		names := s.Names()
		if len(names) == 0 {
			t.Fatalf("Parse(%q) accepted a set with no platform", spec)
		}
		seen := map[string]bool{}
		for _, n := range names {
			if !nameRE.MatchString(n) || seen[n] {
				t.Fatalf("Parse(%q): bad or repeated name %q in %v", spec, n, names)
			}
			seen[n] = true
			p, ok := s.Get(n)
			if !ok || p.Name != n {
				t.Fatalf("Parse(%q): Get(%q) = %v, %v", spec, n, p, ok)
			}
			if p.Offline.Store && (p.Offline.Expiry < 1e9 || p.Offline.MaxCount < 1) {
				t.Fatalf("Parse(%q): %q stores with expiry %s and max %d", spec, n, p.Offline.Expiry, p.Offline.MaxCount)
			}
			if strings.ContainsAny(p.Notifier, ",:") {
				t.Fatalf("Parse(%q): notifier %q holds a separator", spec, p.Notifier)
			}
		}
	})
}
