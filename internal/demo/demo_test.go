package demo

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/auth"
)

func TestPageAndBundleAreServed(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(Handler(auth.DevSecret))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		path, ctype, contains string
	}{
		{"/", "text/html", `<script src="gomsg-demo.js"`},
		{"/gomsg-demo.js", "text/javascript", "gomsg.v1.proto"},
		{"/demo.css", "text/css", "#state"},
	} {
		resp, err := http.Get(srv.URL + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", c.path, resp.StatusCode)
		}
		if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, c.ctype) {
			t.Errorf("GET %s: Content-Type %q, want %s", c.path, got, c.ctype)
		}
		if !strings.Contains(string(body), c.contains) {
			t.Errorf("GET %s: body lacks %q", c.path, c.contains)
		}
		if resp.Header.Get("Content-Security-Policy") == "" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: security headers missing: %v", c.path, resp.Header)
		}
	}
	for _, p := range []string{"/index.html.orig", "/static/index.html", "/v1/connect", "/../demo.go"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("POST %s: answer is not JSON: %v", body, err)
	}
	return resp.StatusCode, m
}

func TestTokenIsAWebTokenForTheUID(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(Handler(auth.DevSecret))
	t.Cleanup(srv.Close)
	code, m := post(t, srv.URL+"/dev/token", `{"uid":"alice"}`)
	if code != http.StatusOK {
		t.Fatalf("status %d: %v", code, m)
	}
	if m["uid"] != "alice" || m["platform"] != "web" {
		t.Fatalf("answer %v", m)
	}
	id, err := auth.NewJWT(auth.DevSecret, true).Authenticate(context.Background(), m["token"].(string))
	if err != nil {
		t.Fatalf("the minted token does not authenticate: %v", err)
	}
	if id.UID != "alice" || id.Platform != "web" || len(id.Rooms) != 1 || id.Rooms[0] != "*" {
		t.Fatalf("identity %+v", id)
	}
	exp, err := time.Parse(time.RFC3339, m["expires_at"].(string))
	if err != nil || time.Until(exp) <= 0 || time.Until(exp) > TokenTTL {
		t.Fatalf("expires_at %v (%v)", m["expires_at"], err)
	}
}

func TestTokenBadInput(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(Handler(auth.DevSecret))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		name, body string
		code       int
		err        string
	}{
		{"no uid", `{}`, 400, "uid: required"},
		{"empty uid", `{"uid":""}`, 400, "uid: required"},
		{"space", `{"uid":"a b"}`, 400, "uid: only printable ASCII"},
		{"non-ascii", `{"uid":"é"}`, 400, "uid: only printable ASCII"},
		{"long", `{"uid":"` + strings.Repeat("a", 129) + `"}`, 400, "uid: longer than 128 bytes"},
		{"not json", `uid=alice`, 400, "body: want JSON"},
		{"unknown field", `{"uid":"a","platform":"ios"}`, 400, `unknown field "platform"`},
		{"two objects", `{"uid":"a"}{"uid":"b"}`, 400, "body: want one JSON object"},
		{"too big", `{"uid":"` + strings.Repeat("a", 5000) + `"}`, 413, "larger than 4 KiB"},
	} {
		code, m := post(t, srv.URL+"/dev/token", c.body)
		if code != c.code || !strings.Contains(m["error"].(string), c.err) {
			t.Errorf("%s: %d %v, want %d %q", c.name, code, m, c.code, c.err)
		}
		if _, ok := m["token"]; ok {
			t.Errorf("%s: a token was minted", c.name)
		}
	}
	resp, err := http.Get(srv.URL + "/dev/token")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /dev/token: %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestTokenRefusedWithAnotherSecret(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(Handler(strings.Repeat("s", 32)))
	t.Cleanup(srv.Close)
	code, m := post(t, srv.URL+"/dev/token", `{"uid":"alice"}`)
	if code != http.StatusForbidden || !strings.Contains(m["error"].(string), "only with the public dev JWT secret") {
		t.Fatalf("%d %v, want 403", code, m)
	}
	if _, ok := m["token"]; ok {
		t.Fatal("a token was minted")
	}
	// The page itself is still served: it takes a pasted token.
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %d", resp.StatusCode)
	}
}
