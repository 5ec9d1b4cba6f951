// Package ops serves a process's operational HTTP endpoints: /metrics,
// /healthz (the process runs), /readyz (it can serve: dependencies reachable,
// not draining) and, when enabled, /debug/pprof/.
package ops

import (
	"context"
	"crypto/tls"
	"errors"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Limits of the ops port's requests.
const (
	readTimeout    = 10 * time.Second
	idleTimeout    = time.Minute
	maxHeaderBytes = 64 << 10
)

// Check reports whether something the process needs is usable.
type Check func(ctx context.Context) error

// Server is the ops HTTP server.
type Server struct {
	ln  net.Listener
	srv *http.Server

	mu     sync.Mutex
	checks map[string]Check
	down   error // set while draining
}

// Listen binds addr and prepares the handlers.
func Listen(addr string, reg *prometheus.Registry, withPprof bool) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, checks: make(map[string]Check)}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", s.ready)
	if withPprof {
		// No /debug/pprof/cmdline: the command line may hold a secret
		// (--jwt-secret …) and the ops port has no authentication.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	// The port has no authentication and takes no request body: a request
	// whose header or body never arrives is cut after readTimeout, and an
	// idle keep-alive connection after idleTimeout, so that such
	// connections cannot pile up.
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: readTimeout, ReadTimeout: readTimeout,
		IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes}
	return s, nil
}

// UseTLS serves the endpoints over TLS from now on; call it before Run.
func (s *Server) UseTLS(c *tls.Config) { s.ln = tls.NewListener(s.ln, c) }

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// AddCheck adds a readiness check. name is "<backend> <address…>": the
// backend is what /readyz?exclude= names.
func (s *Server) AddCheck(name string, c Check) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks[name] = c
}

// SetDraining makes /readyz fail from now on.
func (s *Server) SetDraining() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = errors.New("draining")
}

// ready answers /readyz. Each ?exclude=<backend> (as Kubernetes' own
// /readyz takes it) leaves out the checks of that backend — the first word
// of a check's name, "redis" of "redis 10.0.0.1:6379" — so that a probe can
// ask only what it means: station's readiness follows its draining, not
// Redis, whether the kubelet asks grpc.health.v1 or, where that cannot be
// reached (TLS), this endpoint. Draining fails it whatever is excluded. An
// exclude naming a backend this process does not use is no error: one probe
// definition serves every service.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	exclude := r.URL.Query()["exclude"]
	s.mu.Lock()
	down := s.down
	checks := make(map[string]Check, len(s.checks))
	for k, v := range s.checks {
		if backend, _, _ := strings.Cut(k, " "); !slices.Contains(exclude, backend) {
			checks[k] = v
		}
	}
	s.mu.Unlock()
	if down != nil {
		http.Error(w, down.Error(), http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	// Every check at once, each failure named, in a stable order.
	names := slices.Sorted(maps.Keys(checks))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = checks[name](ctx)
		}()
	}
	wg.Wait()
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, names[i]+": "+err.Error())
		}
	}
	if len(failed) > 0 {
		http.Error(w, strings.Join(failed, "\n"), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(sctx)
	<-errc
	return nil
}
