package ops

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

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
	get := serve(t, s)
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

// A request whose body (or header) never arrives is cut after the read
// timeout: the port has no authentication, and held connections would pile
// up without bound.
func TestSlowRequestsAreCut(t *testing.T) {
	t.Parallel()
	s, err := Listen("127.0.0.1:0", prometheus.NewRegistry(), false)
	if err != nil {
		t.Fatal(err)
	}
	if s.srv.ReadTimeout != readTimeout || s.srv.ReadHeaderTimeout != readTimeout || readTimeout <= 0 || readTimeout > 30*time.Second {
		t.Fatalf("read timeouts %s (header %s), want %s", s.srv.ReadTimeout, s.srv.ReadHeaderTimeout, readTimeout)
	}
	// Shortened so the test is quick; what is tested is that the server
	// applies them to a body and a header that never end.
	const short = 300 * time.Millisecond
	s.srv.ReadTimeout, s.srv.ReadHeaderTimeout = short, short
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	for _, req := range []string{
		"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789",
		"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
		"GET /metrics HTTP/1.1\r\nHost: x\r\n",
	} {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10*short + 2*time.Second))
		if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%q: still open after %s, want it cut after %s", req, 10*short+2*time.Second, short)
		}
	}
}

// /readyz?exclude=<backend> leaves out that backend's checks (and only
// those); draining fails /readyz whatever is excluded.
func TestReadyzExclude(t *testing.T) {
	t.Parallel()
	s, err := Listen("127.0.0.1:0", prometheus.NewRegistry(), false)
	if err != nil {
		t.Fatal(err)
	}
	s.AddCheck("redis 10.0.0.1:6379", func(context.Context) error { return errors.New("connection refused") })
	s.AddCheck("kafka 10.0.0.2:9092", func(context.Context) error { return errors.New("no brokers") })
	s.AddCheck("etcd 10.0.0.3:2379", func(context.Context) error { return nil })
	get := serve(t, s)
	cases := []struct {
		path     string
		code     int
		names    []string
		notNamed []string
	}{
		{"/readyz", http.StatusServiceUnavailable, []string{"redis 10.0.0.1:6379: connection refused", "kafka 10.0.0.2:9092: no brokers"}, []string{"etcd"}},
		{"/readyz?exclude=redis", http.StatusServiceUnavailable, []string{"kafka 10.0.0.2:9092"}, []string{"redis"}},
		{"/readyz?exclude=kafka", http.StatusServiceUnavailable, []string{"redis 10.0.0.1:6379"}, []string{"kafka"}},
		// A backend named by its address, or by a prefix of its name, is not excluded.
		{"/readyz?exclude=10.0.0.1:6379&exclude=red&exclude=kafka", http.StatusServiceUnavailable, []string{"redis 10.0.0.1:6379"}, []string{"kafka"}},
		{"/readyz?exclude=redis&exclude=kafka", http.StatusOK, []string{"ok"}, nil},
		{"/readyz?exclude=redis&exclude=kafka&exclude=etcd&exclude=nats", http.StatusOK, []string{"ok"}, nil},
	}
	for _, tc := range cases {
		code, body := get(tc.path)
		if code != tc.code {
			t.Errorf("%s: %d %q, want %d", tc.path, code, body, tc.code)
		}
		for _, n := range tc.names {
			if !strings.Contains(body, n) {
				t.Errorf("%s: %q does not name %q", tc.path, body, n)
			}
		}
		for _, n := range tc.notNamed {
			if strings.Contains(body, n) {
				t.Errorf("%s: %q names %q", tc.path, body, n)
			}
		}
	}
	s.SetDraining()
	if code, body := get("/readyz?exclude=redis&exclude=kafka&exclude=etcd"); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Errorf("draining, every backend excluded: %d %q, want 503 draining", code, body)
	}
}

// serve runs s until the test ends and returns a GET of a path on it: the
// status and the body.
func serve(t *testing.T, s *Server) func(path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + s.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
}
