package apikey

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// A refused client certificate is logged by its name, and a certificate
// line without a label by `cert:<name>`; a refusal without a certificate
// has no client_cert field, and a line after no left-out refusals no
// not_logged_before field: a line carries only what the refusal had.
func TestGuardLogsCertificateRefusals(t *testing.T) {
	t.Parallel()
	s, err := NewStore(Config{Keys: "cert:backend-1 online;" + Line("reader-key", []Scope{Online}, "")}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	var reasons []string
	g := &Guard{Keys: s, Log: zap.New(core), OnFail: func(r string) { reasons = append(reasons, r) },
		ScopeOf: func(string) (Scope, bool) { return Push, false }}
	handled := 0
	h := g.HTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { handled++ }))
	call := func(cn, authz string) int {
		req := httptest.NewRequest(http.MethodPost, "/v1/push", strings.NewReader("{}"))
		req.RemoteAddr = "192.0.2.9:5000"
		if cn != "" {
			leaf := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
			req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
		}
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}

	for _, c := range []struct {
		cn, authz string
		want      int
	}{
		{"stranger", "", http.StatusUnauthorized},
		{"backend-1", "", http.StatusForbidden},
		{"", "Bearer reader-key", http.StatusForbidden},
	} {
		if got := call(c.cn, c.authz); got != c.want {
			t.Errorf("certificate %q, authorization %q: %d, want %d", c.cn, c.authz, got, c.want)
		}
	}
	if handled != 0 || strings.Join(reasons, " ") != "invalid scope scope" {
		t.Fatalf("handled %d, refusals counted %q; want 0 and invalid, scope, scope", handled, reasons)
	}
	entries := logs.TakeAll()
	if len(entries) != 3 {
		t.Fatalf("%d log lines for 3 refusals: %v", len(entries), entries)
	}
	reader := Hash("reader-key")
	for i, want := range []map[string]any{
		{"reason": "invalid", "peer": "192.0.2.9:5000", "client_cert": "stranger"},
		{"reason": "scope", "peer": "192.0.2.9:5000", "client_cert": "backend-1", "key": "cert:backend-1"},
		{"reason": "scope", "peer": "192.0.2.9:5000", "key_sha256_prefix": hex.EncodeToString(reader[:4])},
	} {
		got := entries[i].ContextMap()
		delete(got, "method")
		delete(got, "error")
		if len(got) != len(want) {
			t.Errorf("line %d: fields %v, want exactly %v", i, got, want)
			continue
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i, k, got[k], v, got)
			}
		}
	}
}
