package ops

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// With --pprof the profiles are served, but not the command line, which may
// hold a secret given as a flag.
func TestPprofHidesCommandLine(t *testing.T) {
	t.Parallel()
	s, err := Listen("127.0.0.1:0", prometheus.NewRegistry(), true)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/: %d %.80q, want 200 with the profile index", code, body)
	}
	code, body := get("/debug/pprof/cmdline")
	if code == http.StatusOK || strings.Contains(body, os.Args[0]) {
		t.Fatalf("/debug/pprof/cmdline: %d %.200q, want it not served", code, body)
	}
}

// UseTLS: the endpoints answer over TLS only.
func TestUseTLS(t *testing.T) {
	t.Parallel()
	s, err := Listen("127.0.0.1:0", prometheus.NewRegistry(), false)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS() // only for its certificate and a client trusting it
	srv.Close()
	s.UseTLS(&tls.Config{Certificates: srv.TLS.Certificates})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	resp, err := srv.Client().Get("https://" + s.Addr() + "/healthz")
	if err != nil {
		t.Fatalf("https: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("https /healthz: %d", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + s.Addr() + "/healthz"); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain http answered 200")
		}
	}
}
