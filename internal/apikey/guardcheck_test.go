package apikey

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

// What a call is admitted by: a key when it sends an authorization (a
// verified client certificate then counts for nothing, so a wrong key is
// not rescued by a certificate), the certificate's names when it sends
// none (or an empty one), and never two authorization values at once.
func TestGuardKeyOrCertificate(t *testing.T) {
	t.Parallel()
	s, err := NewStore(Config{Keys: "cert:backend-1 push b1;" + Line("pusher", []Scope{Push}, "k")}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	withKeys := &Guard{Keys: s, ScopeOf: func(string) (Scope, bool) { return Push, false }}
	noKeys := &Guard{ScopeOf: func(string) (Scope, bool) { return Push, false }}
	for _, c := range []struct {
		name  string
		g     *Guard
		cn    string
		authz []string
		want  int
		key   string // the name of the key the call carries
	}{
		{"certificate", withKeys, "backend-1", nil, http.StatusOK, "b1"},
		{"certificate, empty authorization", withKeys, "backend-1", []string{""}, http.StatusOK, "b1"},
		{"key", withKeys, "", []string{"Bearer pusher"}, http.StatusOK, "k"},
		{"key and a certificate", withKeys, "backend-1", []string{"Bearer pusher"}, http.StatusOK, "k"},
		{"wrong key and a good certificate", withKeys, "backend-1", []string{"Bearer wrong"}, http.StatusUnauthorized, ""},
		{"two authorizations", withKeys, "", []string{"Bearer pusher", "Bearer pusher"}, http.StatusUnauthorized, ""},
		{"nothing", withKeys, "", nil, http.StatusUnauthorized, ""},
		{"certificate, no key store", noKeys, "backend-1", nil, http.StatusUnauthorized, ""},
		{"key, no key store", noKeys, "", []string{"Bearer pusher"}, http.StatusUnauthorized, ""},
	} {
		var got *Key
		h := c.g.HTTP(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = FromContext(r.Context()) }))
		req := httptest.NewRequest(http.MethodPost, "/v1/push", strings.NewReader("{}"))
		if c.cn != "" {
			leaf := &x509.Certificate{Subject: pkix.Name{CommonName: c.cn}}
			req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}
		}
		for _, v := range c.authz {
			req.Header.Add("Authorization", v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s: %d, want %d", c.name, rec.Code, c.want)
			continue
		}
		if c.want == http.StatusOK && (got == nil || got.Name != c.key) {
			t.Errorf("%s: admitted with key %+v, want %q", c.name, got, c.key)
		}
	}
}
