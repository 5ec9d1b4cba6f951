package horntest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// APNs is an HTTP/2 TLS stand-in for api.push.apple.com on 127.0.0.1.
type APNs struct {
	recorder
	Server *httptest.Server
	// KeyFile is a generated P-256 key in .p8 (PKCS#8 PEM) form; KeyID and
	// TeamID are what the provider token must carry.
	KeyFile string
	KeyID   string
	TeamID  string
	// CAFile is the server's certificate in PEM, for the client to trust.
	CAFile string
	// Topic is the bundle id every request must carry.
	Topic string
	pub   *ecdsa.PublicKey
}

// StartAPNs starts the mock; t.Cleanup stops it.
func StartAPNs(tb testing.TB) *APNs {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	a := &APNs{KeyFile: filepath.Join(dir, "AuthKey_TESTKEY123.p8"), KeyID: "TESTKEY123", TeamID: "TEAM123456",
		Topic: "com.example.gomsg", pub: &key.PublicKey, CAFile: filepath.Join(dir, "apns-ca.pem")}
	if err := os.WriteFile(a.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	a.Server = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	a.Server.EnableHTTP2 = true
	a.Server.StartTLS()
	tb.Cleanup(a.Server.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Server.Certificate().Raw})
	if err := os.WriteFile(a.CAFile, ca, 0o600); err != nil {
		tb.Fatal(err)
	}
	return a
}

// URL is the mock's host URL (https://127.0.0.1:port).
func (a *APNs) URL() string { return a.Server.URL }

func (a *APNs) serve(w http.ResponseWriter, r *http.Request) {
	reject := func(status int, reason, format string, args ...any) {
		a.fail(format, args...)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"reason": reason})
	}
	token, ok := strings.CutPrefix(r.URL.Path, "/3/device/")
	switch {
	case r.ProtoMajor != 2:
		reject(http.StatusBadRequest, "BadPath", "request over %s, APNs speaks HTTP/2 only", r.Proto)
		return
	case r.Method != http.MethodPost || !ok || token == "":
		reject(http.StatusNotFound, "BadPath", "%s %s", r.Method, r.URL.Path)
		return
	}
	if err := a.verifyToken(r.Header.Get("Authorization")); err != "" {
		reject(http.StatusForbidden, "InvalidProviderToken", "provider token: %s", err)
		return
	}
	if got := r.Header.Get("apns-topic"); got != a.Topic {
		reject(http.StatusBadRequest, "BadTopic", "apns-topic %q, want %q", got, a.Topic)
		return
	}
	switch r.Header.Get("apns-push-type") {
	case "alert", "background":
	default:
		reject(http.StatusBadRequest, "InvalidPushType", "apns-push-type %q", r.Header.Get("apns-push-type"))
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil || len(raw) > 4096 {
		reject(http.StatusBadRequest, "PayloadEmpty", "payload of %d bytes: %v", len(raw), err)
		return
	}
	ans := a.record(Request{Token: token, Header: r.Header.Clone(), Body: body, Raw: raw, At: time.Now()})
	if ans.RetryAfter != "" {
		w.Header().Set("Retry-After", ans.RetryAfter)
	}
	w.Header().Set("apns-id", "00000000-0000-0000-0000-000000000001")
	w.WriteHeader(ans.Status)
	if ans.Status != http.StatusOK {
		resp := map[string]any{"reason": ans.Reason}
		if ans.Status == http.StatusGone {
			resp["timestamp"] = time.Now().UnixMilli()
		}
		_ = json.NewEncoder(w).Encode(resp)
	}
}

// verifyToken checks the ES256 provider token: signature with the key's
// public half, kid header, iss claim and a recent iat. It returns what is
// wrong, "" when nothing.
func (a *APNs) verifyToken(auth string) string {
	bearer, ok := strings.CutPrefix(auth, "bearer ")
	if !ok {
		return "authorization header " + auth
	}
	tok, err := jwt.Parse(bearer, func(t *jwt.Token) (any, error) { return a.pub, nil },
		jwt.WithValidMethods([]string{"ES256"}), jwt.WithIssuedAt(), jwt.WithIssuer(a.TeamID))
	if err != nil {
		return err.Error()
	}
	if kid, _ := tok.Header["kid"].(string); kid != a.KeyID {
		return "kid " + kid + ", want " + a.KeyID
	}
	iat, err := tok.Claims.GetIssuedAt()
	if err != nil || iat == nil || time.Since(iat.Time) > time.Hour {
		return "iat missing or older than an hour"
	}
	return ""
}
