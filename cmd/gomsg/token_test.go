package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomsg/gomsg/client/token"
	"github.com/gomsg/gomsg/internal/auth"
)

// gomsg token prints a token signed with $GOMSG_JWT_SECRET, a secret file's
// or (--dev) the dev secret, with the rooms and ttl asked for; without a
// usable secret it prints nothing and fails.
func TestTokenCommand(t *testing.T) {
	t.Parallel()
	const secret = "token-command-secret-at-least-32-bytes"
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("file-secret-file-secret-file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		secret string // the token verifies with it; "" for an error
	}{
		{"env", []string{"--uid", "ann", "--platform", "web", "--room", "lobby", "--room", "match-*", "--ttl", "2h"}, map[string]string{"GOMSG_JWT_SECRET": secret}, secret},
		{"file", []string{"--uid", "ann", "--platform", "web", "--jwt-secret-file", file}, nil, "file-secret-file-secret-file-secret"},
		{"dev", []string{"--uid", "ann", "--platform", "web", "--dev"}, nil, auth.DevSecret},
		{"no secret", []string{"--uid", "ann", "--platform", "web"}, nil, ""},
		{"short secret", []string{"--uid", "ann", "--platform", "web"}, map[string]string{"GOMSG_JWT_SECRET": "short"}, ""},
		{"dev secret outside --dev", []string{"--uid", "ann", "--platform", "web"}, map[string]string{"GOMSG_JWT_SECRET": auth.DevSecret}, ""},
		{"--dev and a secret", []string{"--uid", "ann", "--platform", "web", "--dev"}, map[string]string{"GOMSG_JWT_SECRET": secret}, ""},
		{"no uid", []string{"--platform", "web"}, map[string]string{"GOMSG_JWT_SECRET": secret}, ""},
		{"no expiry", []string{"--uid", "ann", "--platform", "web", "--ttl", "0"}, map[string]string{"GOMSG_JWT_SECRET": secret}, ""},
	} {
		var out, stderr bytes.Buffer
		err := runToken(tc.args, env(tc.env), &out, &stderr)
		if tc.secret == "" {
			if err == nil || out.Len() != 0 {
				t.Errorf("%s: printed %q, err %v; want nothing and an error", tc.name, out.String(), err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c, err := token.Verify(tc.secret, strings.TrimSpace(out.String()))
		if err != nil || c.UID != "ann" || c.Platform != "web" {
			t.Fatalf("%s: printed token: %+v, %v", tc.name, c, err)
		}
		if tc.name == "env" {
			if strings.Join(c.Rooms, ",") != "lobby,match-*" || time.Until(c.ExpiresAt.Time) < time.Hour+59*time.Minute {
				t.Fatalf("env: rooms %v, expires %s", c.Rooms, c.ExpiresAt)
			}
		}
	}
}
