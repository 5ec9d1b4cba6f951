package apikey

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
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
