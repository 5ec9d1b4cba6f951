package station

import (
	"context"
	"embed"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/apikey"
)

// The admin console: a web page station serves on its own listener
// (--console-addr), and the JSON endpoints the page calls. The page is
// static (console_assets, embedded); everything it shows comes from
// endpoints behind an API key with the console scope, sent by the page in
// the Authorization header. The key never travels in a URL or a cookie, so
// another site cannot make a browser call the console with it (no ambient
// credential to forge a request with), and answers carry no CORS header,
// so another site cannot read them either.
//
// The actions (push, kickout, dead-letter reads and redrive) are the Push
// API's own HTTP/JSON handlers (gatewayHandler): the same validation and
// the same errors, and a key needs their scope on top of console.

//go:embed console_assets
var consoleAssets embed.FS

// consoleScopes are the console's JSON endpoints and the scope each needs
// besides console; "" is a read the console scope covers.
var consoleScopes = map[string]apikey.Scope{
	"/v1/console/whoami":  "",
	"/v1/console/cluster": "",
	"/v1/console/user":    "",
	// What became of a seq: states, boats and sids, never a body.
	"/v1/delivery":       "",
	"/v1/push":           apikey.Push,
	"/v1/broadcast/room": apikey.Broadcast,
	"/v1/kickout":        apikey.Kickout,
	"/v1/dlq/list":       apikey.DLQ,
	"/v1/dlq/show":       apikey.DLQ,
	"/v1/dlq/redrive":    apikey.DLQ,
}

// consoleActions are the endpoints that change something or read message
// bodies: each call is logged with the key that made it.
var consoleActions = map[string]bool{"/v1/push": true, "/v1/broadcast/room": true, "/v1/kickout": true, "/v1/dlq/show": true, "/v1/dlq/redrive": true}

// consoleCSP allows the page's own script, style and calls, nothing else:
// no inline script, no other origin, no framing.
const consoleCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// serveConsole serves the console on consoleLn until ctx ends.
func (s *Station) serveConsole(ctx context.Context) error {
	h, err := s.consoleHandler(ctx)
	if err != nil {
		return err
	}
	return s.serveOn(ctx, s.consoleLn, h)
}

// consoleHandler builds the console's handler chain. A request passes,
// outermost first:
//
//	consoleHeaders  CSP, X-Frame-Options DENY, nosniff, no-referrer; no-store on /v1/
//	static          GET / and the page's assets (no key: they hold no data)
//	console guard   401 without a valid key, 403 without the console scope
//	known paths     404 for a /v1/ path the console does not serve
//	action guard    403 without the endpoint's own scope (push, kickout, dlq)
//	audit           a log line per action with the key's name
//	limitBody       413 past --http-max-body-bytes
//	endpoints       the console's reads, or the Push API's gateway
func (s *Station) consoleHandler(ctx context.Context) (http.Handler, error) {
	gw, err := s.gatewayHandler(ctx)
	if err != nil {
		return nil, err
	}
	api := http.NewServeMux()
	api.HandleFunc("GET /v1/console/whoami", s.consoleWhoami)
	api.HandleFunc("GET /v1/console/cluster", s.consoleCluster)
	api.HandleFunc("GET /v1/console/user", s.consoleUser)
	api.Handle("/v1/", gw)

	var h http.Handler = api
	h = s.limitBody(h)
	h = s.consoleAudit(h)
	h = s.consoleGuard("console_action", func(path string) (apikey.Scope, bool) {
		sc := consoleScopes[path]
		return sc, sc == ""
	}).HTTP(h)
	h = consoleKnownPaths(h)
	h = s.consoleGuard("console", func(string) (apikey.Scope, bool) { return apikey.Console, false }).HTTP(h)

	assets, err := fs.Sub(consoleAssets, "console_assets")
	if err != nil {
		return nil, err
	}
	static := http.FileServerFS(assets)
	return consoleHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/"):
			h.ServeHTTP(w, r)
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			static.ServeHTTP(w, r)
		default:
			w.Header().Set("Allow", "GET, HEAD")
			writeHTTPError(w, http.StatusMethodNotAllowed, status.Newf(codes.Unimplemented, "method %s not allowed on %s", r.Method, r.URL.Path))
		}
	})), nil
}

func (s *Station) consoleGuard(api string, scopeOf func(string) (apikey.Scope, bool)) *apikey.Guard {
	return &apikey.Guard{Keys: s.cfg.APIKeys, ScopeOf: scopeOf, WriteHTTPError: writeHTTPError, OnFail: func(reason string) {
		s.metrics.AuthFailures.WithLabelValues(api, reason).Inc()
	}, Log: s.log.With(zap.String("api", api))}
}

// consoleKnownPaths answers 404 for a /v1/ path the console does not serve
// (the rest of the Push API is not reachable through it).
func consoleKnownPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := consoleScopes[r.URL.Path]; !ok {
			writeHTTPError(w, http.StatusNotFound, status.Newf(codes.NotFound, "no such console endpoint: %s", r.URL.Path))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// consoleHeaders sets the headers that keep the page from being framed,
// sniffed or leaking its URL, and keeps API answers out of every cache.
func consoleHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			h.Set("Cache-Control", "no-store")
		} else {
			h.Set("Cache-Control", "no-cache")
		}
		next.ServeHTTP(w, r)
	})
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// consoleAudit logs every action made through the console with the name of
// the key that made it, its answer's status and how long it took.
func (s *Station) consoleAudit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !consoleActions[r.URL.Path] {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		s.log.Info("console action", keyField(r.Context()), zap.String("action", r.URL.Path),
			zap.Int("status", sw.code), zap.String("peer", r.RemoteAddr), zap.Duration("took", time.Since(start)))
	})
}
