package apikey

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

func TestParse(t *testing.T) {
	t.Parallel()
	good := Line("k1", []Scope{Push, Online}, "backend-1") + "\n# a comment\n\n" + Line("k2", []Scope{All}, "") + " # trailing"
	keys, err := Parse(good)
	if err != nil || len(keys) != 2 {
		t.Fatalf("Parse: %v, %d keys, want 2", err, len(keys))
	}
	if keys[0].Name != "backend-1" || len(keys[0].Scopes) != 2 || keys[0].Hash != Hash("k1") || keys[1].Scopes[0] != All {
		t.Fatalf("Parse: %+v", keys)
	}
	if keys, err := Parse(Line("a", []Scope{Push}, "") + ";" + Line("b", []Scope{Push}, "")); err != nil || len(keys) != 2 {
		t.Fatalf("';'-separated: %v, %d keys", err, len(keys))
	}
	for name, bad := range map[string]string{
		"hash only":     strings.Repeat("ab", 32),
		"short hash":    "abcd push",
		"not hex":       strings.Repeat("zz", 32) + " push",
		"unknown scope": strings.Repeat("ab", 32) + " push,admin",
		"too many":      strings.Repeat("ab", 32) + " push name extra",
		"raw key":       "gmk_secretsecretsecret push",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%s: Parse(%q) accepted it", name, bad)
		}
	}
	// A key pasted by mistake is not echoed whole in the error.
	_, err = Parse("gmk_verysecretkeymaterial push")
	if err == nil || strings.Contains(err.Error(), "verysecretkeymaterial") {
		t.Fatalf("error echoes the key: %v", err)
	}
}

func TestSetCheck(t *testing.T) {
	t.Parallel()
	keys, err := Parse(Line("pusher", []Scope{Push}, "p") + "\n" + Line("admin", []Scope{All}, "a"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSet(keys)
	cases := []struct {
		key   string
		scope Scope
		want  error
	}{
		{"pusher", Push, nil},
		{"pusher", Kickout, ErrScope},
		{"pusher", Devices, ErrScope},
		{"admin", Devices, nil},
		{"admin", Kickout, nil},
		{"", Push, ErrMissing},
		{"pushe", Push, ErrInvalid},
		{"pusherx", Push, ErrInvalid},
		{DevKey, Push, ErrInvalid},
	}
	for _, c := range cases {
		_, err := s.Check(c.key, c.scope)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("Check(%q, %s) = %v, want %v", c.key, c.scope, err, c.want)
		}
	}
	if k, _ := s.Check("admin", Push); k == nil || k.Name != "a" {
		t.Fatalf("Check returned key %+v, want the one named a", k)
	}
	if Bearer("Bearer abc") != "abc" || Bearer("bearer abc") != "abc" || Bearer("Basic abc") != "" || Bearer("Bearer") != "" {
		t.Fatal("Bearer parses wrongly")
	}
}

func TestNewStore(t *testing.T) {
	t.Parallel()
	log := zaptest.NewLogger(t)
	dir := t.TempDir()
	if _, err := NewStore(Config{}, log); err == nil || !strings.Contains(err.Error(), "--api-keys-file") || !strings.Contains(err.Error(), "GOMSG_API_KEYS") {
		t.Fatalf("no keys: %v, want an error naming --api-keys-file and GOMSG_API_KEYS", err)
	}
	if _, err := NewStore(Config{Keys: Line(DevKey, []Scope{All}, "")}, log); err == nil || !strings.Contains(err.Error(), "dev key") {
		t.Fatalf("dev key outside dev: %v, want refused", err)
	}
	devFile := filepath.Join(dir, "dev")
	_ = os.WriteFile(devFile, []byte(Line(DevKey, []Scope{Push}, "")), 0o600)
	if _, err := NewStore(Config{File: devFile, Keys: Line("k", []Scope{Push}, "")}, log); err == nil || !strings.Contains(err.Error(), "--api-keys-file") {
		t.Fatalf("dev key in the file outside dev: %v, want refused naming the file", err)
	}
	if _, err := NewStore(Config{File: filepath.Join(dir, "missing")}, log); err == nil || !strings.Contains(err.Error(), "--api-keys-file") {
		t.Fatalf("missing file: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := NewStore(Config{File: empty}, log); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty file: %v", err)
	}
	// In dev the dev key works with every scope, and nothing else is needed.
	s, err := NewStore(Config{Dev: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Check(DevKey, Devices); err != nil {
		t.Fatalf("dev key in dev: %v", err)
	}
	// Inline keys and the file's add up.
	f := filepath.Join(dir, "keys")
	_ = os.WriteFile(f, []byte(Line("from-file", []Scope{Push}, "")), 0o600)
	s, err = NewStore(Config{File: f, Keys: Line("from-env", []Scope{Push}, "")}, log)
	if err != nil || s.Len() != 2 {
		t.Fatalf("file + env: %v, %d keys", err, s.Len())
	}
	if _, err := s.Check(DevKey, Push); err == nil {
		t.Fatal("dev key accepted outside dev")
	}
}

func TestStoreReload(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "keys")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	works := func(s *Store, key string) bool { _, err := s.Check(key, Push); return err == nil }
	write(Line("old", []Scope{Push}, "old"))
	s, err := NewStore(Config{File: f, Keys: Line("env", []Scope{Push}, "")}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	write(Line("old", []Scope{Push}, "old") + "\n" + Line("new", []Scope{Push}, "new"))
	if err := s.Reload(); err != nil || !works(s, "old") || !works(s, "new") {
		t.Fatalf("rotation: %v old %v new %v", err, works(s, "old"), works(s, "new"))
	}
	write(Line("new", []Scope{Push}, "new"))
	if err := s.Reload(); err != nil || works(s, "old") || !works(s, "new") {
		t.Fatalf("old removed: %v old %v new %v", err, works(s, "old"), works(s, "new"))
	}
	for name, bad := range map[string]string{"unparsable": "garbage", "empty": "", "dev key": Line(DevKey, []Scope{All}, "")} {
		write(bad)
		if err := s.Reload(); err == nil {
			t.Errorf("%s file: Reload accepted it", name)
		}
		if !works(s, "new") || !works(s, "env") {
			t.Errorf("%s file: the previous keys are no longer in force", name)
		}
	}
	write("# all revoked\n")
	if err := s.Reload(); err != nil || works(s, "new") {
		t.Fatalf("comments only: %v, new still works %v", err, works(s, "new"))
	}
	if !works(s, "env") {
		t.Fatal("comments only in the file revoked the inline keys too")
	}
}

// BenchmarkCheck is the cost of one key check (SHA-256 of the presented key
// and a constant-time compare with each of 10 configured keys).
func BenchmarkCheck(b *testing.B) {
	var lines []string
	for i := range 10 {
		lines = append(lines, Line("key-"+string(rune('a'+i)), []Scope{Push}, ""))
	}
	keys, err := Parse(strings.Join(lines, "\n"))
	if err != nil {
		b.Fatal(err)
	}
	s := NewSet(keys)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Check("key-j", Push); err != nil {
			b.Fatal(err)
		}
	}
}

// A key file that is deleted, emptied or broken keeps its keys in force for
// Grace (a file being rewritten, a volume remounted), with one ERROR and the
// unusable gauge at 1; after Grace they are dropped, counted, the inline
// keys kept; a usable file later brings its keys back.
func TestStoreDropsKeysOfAnUnusableFileAfterGrace(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	breaks := map[string]func(f string) error{
		"deleted": os.Remove,
		"emptied": func(f string) error { return os.WriteFile(f, nil, 0o600) },
		"broken":  func(f string) error { return os.WriteFile(f, []byte("not a key line"), 0o600) },
		"dev key": func(f string) error { return os.WriteFile(f, []byte(Line(DevKey, []Scope{All}, "")), 0o600) },
	}
	for name, breakFile := range breaks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := filepath.Join(t.TempDir(), "keys")
			if err := os.WriteFile(f, []byte(Line("old", []Scope{Push}, "old")), 0o600); err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zap.InfoLevel)
			s, err := NewStore(Config{File: f, Keys: Line("env", []Scope{Push}, ""), Grace: grace}, zap.New(core))
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1_700_000_000, 0)
			s.now = func() time.Time { return now }
			unusable := prometheus.NewGauge(prometheus.GaugeOpts{Name: "unusable"})
			dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
			s.Instrument(unusable, dropped)
			works := func(key string) bool { _, err := s.Check(key, Push); return err == nil }
			errorLogs := func() int { return logs.FilterLevelExact(zap.ErrorLevel).Len() }

			if err := breakFile(f); err != nil {
				t.Fatal(err)
			}
			start := now
			for i, at := range []time.Duration{0, grace / 2, grace - time.Second} {
				now = start.Add(at)
				if err := s.Reload(); err == nil {
					t.Fatalf("reload %d of a %s file: no error", i, name)
				}
				if !works("old") || !works("env") {
					t.Fatalf("reload %d, within the grace: old %v env %v, want both in force", i, works("old"), works("env"))
				}
			}
			if n := errorLogs(); n != 1 {
				t.Fatalf("%d ERROR logs within the grace, want 1 (when the file became unusable): %v", n, logs.All())
			}
			if v := promtest.ToFloat64(unusable); v != 1 {
				t.Fatalf("unusable gauge %v, want 1", v)
			}
			if v := promtest.ToFloat64(dropped); v != 0 {
				t.Fatalf("dropped %v within the grace, want 0", v)
			}

			now = start.Add(grace)
			_ = s.Reload()
			if works("old") || !works("env") {
				t.Fatalf("past the grace: old %v env %v, want old dropped and env kept", works("old"), works("env"))
			}
			_ = s.Reload()
			if v := promtest.ToFloat64(dropped); v != 1 {
				t.Fatalf("dropped %v, want 1", v)
			}
			if n := errorLogs(); n != 2 {
				t.Fatalf("%d ERROR logs, want 2 (unusable, dropped): %v", n, logs.All())
			}

			if err := os.WriteFile(f, []byte(Line("old", []Scope{Push}, "old")), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := s.Reload(); err != nil || !works("old") {
				t.Fatalf("file usable again: %v, old works %v", err, works("old"))
			}
			if v := promtest.ToFloat64(unusable); v != 0 {
				t.Fatalf("unusable gauge %v once the file is usable, want 0", v)
			}
		})
	}
}

func TestStoreGrace(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(f, []byte(Line("k", []Scope{Push}, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewStore(Config{File: f, Grace: -time.Second}, zaptest.NewLogger(t)); err == nil || !strings.Contains(err.Error(), "--api-keys-grace") {
		t.Fatalf("negative grace: %v, want an error naming --api-keys-grace", err)
	}
	s, err := NewStore(Config{File: f}, zaptest.NewLogger(t))
	if err != nil || s.cfg.Grace != DefaultGrace {
		t.Fatalf("no grace given: %v, grace %s, want %s", err, s.cfg.Grace, DefaultGrace)
	}
}

// A bad line is named by its number (counting every line, comments and
// blanks too), and a bad hash is quoted only up to 8 characters: it may be a
// key pasted by mistake.
func TestParseErrorsNameTheLine(t *testing.T) {
	t.Parallel()
	good := Line("k", []Scope{Push}, "")
	for _, tc := range []struct{ bad, want string }{
		{"only-one-field", "line 3: want `<sha256-hex>"},
		{strings.Repeat("a", 64) + " admin", "line 3: "},
		{"cert: push", "line 3: cert: needs"},
		{"abcdefgh push", `line 3: "abcdefgh" is not a SHA-256`},
		{"abcdefghi push", `line 3: "abcdefgh…" is not a SHA-256`},
	} {
		_, err := Parse(good + "\n# a comment\n" + tc.bad)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v, want it to start with %q", tc.bad, err, tc.want)
		}
	}
	if _, err := Parse(good + ";" + "x push"); err == nil || !strings.HasPrefix(err.Error(), "line 2:") {
		t.Errorf("';'-separated: %v, want line 2", err)
	}
}

// Generate makes distinct keys of 32 random bytes; Has finds a key's hash.
func TestGenerateAndHas(t *testing.T) {
	t.Parallel()
	a, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate()
	if a == b || !strings.HasPrefix(a, "gmk_") || len(a) != len("gmk_")+43 {
		t.Fatalf("Generate: %q and %q, want two different gmk_ keys of 43 base64 characters", a, b)
	}
	keys, err := Parse(Line(a, []Scope{Push}, "a"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSet(keys)
	if !s.Has(Hash(a)) || s.Has(Hash(b)) {
		t.Fatalf("Has: %v for the key in the set, %v for one not in it", s.Has(Hash(a)), s.Has(Hash(b)))
	}
}
