package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gomsg/gomsg/internal/apikey"
)

func TestInternalAuthResolve(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zap.WarnLevel)
	log := zap.New(core)
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-the-file-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := (InternalAuth{TokenFile: file}).Resolve(false, log); err != nil || tok != "from-the-file-0123456789" {
		t.Fatalf("file: %q %v", tok, err)
	}
	if _, err := (InternalAuth{}).Resolve(false, log); err == nil || !strings.Contains(err.Error(), "--internal-token-file") {
		t.Fatalf("none outside dev: %v, want an error naming --internal-token-file", err)
	}
	if _, err := (InternalAuth{Token: "a", TokenFile: file}).Resolve(false, log); err == nil {
		t.Fatal("both a token and a file accepted")
	}
	if logs.Len() != 0 {
		t.Fatalf("warnings before --insecure-internal: %v", logs.All())
	}
	if tok, err := (InternalAuth{Insecure: true}).Resolve(false, log); err != nil || tok != "" {
		t.Fatalf("insecure: %q %v", tok, err)
	}
	if logs.FilterMessageSnippet("--insecure-internal").Len() != 1 {
		t.Fatalf("--insecure-internal logged %v, want one WARN", logs.All())
	}
	a, err1 := (InternalAuth{}).Resolve(true, log)
	b, err2 := (InternalAuth{}).Resolve(true, log)
	if err1 != nil || err2 != nil || len(a) < 32 || a == b {
		t.Fatalf("dev tokens %q %q (%v %v): want random, different per run", a, b, err1, err2)
	}
}

// gomsg dev accepts the dev API key and JWT secret; nothing else does.
func TestDevCredentials(t *testing.T) {
	t.Parallel()
	dev := ClusterConfig{Dev: true, Services: []string{"station", "boat"}, Station: StationOptions{JWTSecret: DevJWTSecret}}
	if err := dev.secure(nil, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if _, err := dev.Station.keys.Check(DevAPIKey, apikey.Push); err != nil {
		t.Fatalf("dev key in dev: %v", err)
	}
	if dev.Backends.internalToken == "" {
		t.Fatal("dev runs without an internal token")
	}
	prod := ClusterConfig{Services: []string{"station"}, Internal: InternalAuth{Token: strings.Repeat("t", 16)},
		Station: StationOptions{JWTSecret: DevJWTSecret, APIKeys: apikey.Line("k", []apikey.Scope{apikey.Push}, "")}}
	if err := prod.secure(nil, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "--jwt-secret") {
		t.Fatalf("dev secret outside dev: %v", err)
	}
}
