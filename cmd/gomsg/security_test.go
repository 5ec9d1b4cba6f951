package main

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
)

// Outside dev, station, boat and carrier refuse to start without their
// credentials, and station refuses the public dev key and dev JWT secret;
// each error names the setting.
func TestStartRefusedWithoutCredentials(t *testing.T) {
	t.Parallel()
	key := "GOMSG_API_KEYS=" + apikey.Line("k", []apikey.Scope{apikey.Push}, "")
	secret := "GOMSG_JWT_SECRET=" + strings.Repeat("s", 32)
	token := "GOMSG_INTERNAL_TOKEN=" + strings.Repeat("t", 24)
	cases := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{"station without keys", []string{secret, token}, []string{"station"}, []string{"--api-keys-file", "GOMSG_API_KEYS"}},
		{"station with the dev key", []string{"GOMSG_API_KEYS=" + apikey.Line(apikey.DevKey, []apikey.Scope{apikey.All}, ""), secret, token},
			[]string{"station"}, []string{"dev key"}},
		{"station with a bad key line", []string{"GOMSG_API_KEYS=nothex push", secret, token}, []string{"station"}, []string{"GOMSG_API_KEYS"}},
		{"station with a short secret", []string{key, token, "GOMSG_JWT_SECRET=short"}, []string{"station"}, []string{"--jwt-secret", "at least 32"}},
		{"station with the dev secret", []string{key, token, "GOMSG_JWT_SECRET=gomsg-dev-secret-do-not-use-in-production"},
			[]string{"station"}, []string{"--jwt-secret", "dev secret"}},
		{"station without a secret", []string{key, token}, []string{"station"}, []string{"--jwt-secret"}},
		{"station without an internal token", []string{key, secret}, []string{"station"}, []string{"--internal-token-file", "GOMSG_INTERNAL_TOKEN", "--insecure-internal"}},
		{"boat without an internal token", nil, []string{"boat"}, []string{"--internal-token-file", "GOMSG_INTERNAL_TOKEN"}},
		{"carrier without an internal token", nil, []string{"carrier"}, []string{"--internal-token-file", "GOMSG_INTERNAL_TOKEN"}},
		{"short internal token", []string{"GOMSG_INTERNAL_TOKEN=short"}, []string{"carrier"}, []string{"GOMSG_INTERNAL_TOKEN", "at least 16"}},
		{"require-exp not a bool", []string{key, secret, token, "GOMSG_JWT_REQUIRE_EXP=maybe"}, []string{"station"}, []string{"--jwt-require-exp"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stderr := run(t, tc.env, tc.args...)
			if code == 0 {
				t.Fatalf("gomsg %v started; stderr:\n%s", tc.args, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("gomsg %v: stderr does not name %q:\n%s", tc.args, w, stderr)
				}
			}
		})
	}
}

func TestKeygen(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(binary(t), "keygen", "--scopes", "push,online", "--name", "backend-1").Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("keygen printed %q, want 2 lines", out)
	}
	keys, err := apikey.Parse(lines[1])
	if err != nil || len(keys) != 1 || keys[0].Name != "backend-1" {
		t.Fatalf("line %q: %v %+v", lines[1], err, keys)
	}
	set := apikey.NewSet(keys)
	if _, err := set.Check(lines[0], apikey.Online); err != nil {
		t.Fatalf("the printed key does not match its line: %v", err)
	}
	if _, err := set.Check(lines[0], apikey.Devices); err == nil {
		t.Fatal("the key has a scope it was not given")
	}
	out2, _ := exec.Command(binary(t), "keygen").Output()
	if strings.Split(string(out2), "\n")[0] == lines[0] {
		t.Fatal("two keygen runs printed the same key")
	}
	if code, stderr := run(t, nil, "keygen", "--scopes", "admin"); code == 0 || !strings.Contains(stderr, "--scopes") {
		t.Fatalf("unknown scope: exit %d, %s", code, stderr)
	}
}

// station takes its JWT secret from --jwt-secret-file alone: start-up gets
// past the credential checks to dialing the backends (unreachable here).
// An empty or missing file is refused naming the flag.
func TestStationJWTSecretFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "jwt")
	if err := os.WriteFile(good, []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key := "GOMSG_API_KEYS=" + apikey.Line("k", []apikey.Scope{apikey.Push}, "")
	token := "GOMSG_INTERNAL_TOKEN=" + strings.Repeat("t", 24)

	code, stderr := run(t, []string{key, token, "GOMSG_JWT_SECRET_FILE=" + good}, "station", "--start-timeout", "1s")
	if code == 0 || strings.Contains(stderr, "jwt-secret") || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Fatalf("station with --jwt-secret-file: exit %d, want a failure naming the unreachable backend and no secret setting:\n%s", code, stderr)
	}
	code, stderr = run(t, []string{key, token}, "station", "--jwt-secret-file", good, "--start-timeout", "1s")
	if code == 0 || strings.Contains(stderr, "jwt-secret") {
		t.Fatalf("station --jwt-secret-file as a flag: exit %d:\n%s", code, stderr)
	}
	for _, tc := range []struct{ file, want string }{{empty, "empty"}, {filepath.Join(dir, "missing"), "no such file"}} {
		code, stderr := run(t, []string{key, token, "GOMSG_JWT_SECRET_FILE=" + tc.file}, "station", "--start-timeout", "1s")
		if code == 0 || !strings.Contains(stderr, "--jwt-secret-file") || !strings.Contains(stderr, tc.want) {
			t.Errorf("station with --jwt-secret-file %s: exit %d, want it refused naming the flag and %q:\n%s", tc.file, code, tc.want, stderr)
		}
	}
}

// The JWT library apns2 brings in is at a release that parses token headers
// without unbounded allocation (CVE-2025-30204, fixed in v4.5.2).
func TestJWTv4IsAFixedRelease(t *testing.T) {
	t.Parallel()
	info, err := buildinfo.ReadFile(binary(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range info.Deps {
		if d.Path != "github.com/golang-jwt/jwt/v4" {
			continue
		}
		var major, minor, patch int
		if _, err := fmt.Sscanf(d.Version, "v%d.%d.%d", &major, &minor, &patch); err != nil {
			t.Fatalf("version %q: %v", d.Version, err)
		}
		if minor < 5 || minor == 5 && patch < 2 {
			t.Fatalf("github.com/golang-jwt/jwt/v4 %s, want v4.5.2 or later", d.Version)
		}
		return
	}
}

// `gomsg dev` starts station with the public dev secret; every other
// command refuses it, before dialing anything.
func TestPreflightAcceptsTheDevSecretOnlyInDev(t *testing.T) {
	t.Parallel()
	_, cfg, err := serviceConfig("station", []string{"--jwt-secret", strings.Repeat("s", 32)})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dev, cfg.Station.JWTSecret = true, app.DevJWTSecret
	if err := preflight("station", cfg); err != nil {
		t.Fatalf("gomsg dev's station: %v, want it accepted", err)
	}
	cfg.Dev = false
	if err := preflight("station", cfg); err == nil || !strings.Contains(err.Error(), "only accepted by `gomsg dev`") {
		t.Fatalf("gomsg station with the dev secret: %v, want it refused", err)
	}
}
