package horntest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FCM is an HTTP stand-in for fcm.googleapis.com and Google's OAuth token
// endpoint on 127.0.0.1.
type FCM struct {
	recorder
	Server *httptest.Server
	// CredentialsFile is a service-account JSON with a generated RSA key
	// whose token_uri points at the mock.
	CredentialsFile string
	ProjectID       string
	ClientEmail     string
	pub             *rsa.PublicKey

	tokMu  sync.Mutex
	issued map[string]bool
	// Exchanges counts OAuth token exchanges.
	exchanges int
}

// StartFCM starts the mock; t.Cleanup stops it.
func StartFCM(tb testing.TB) *FCM {
	tb.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	f := &FCM{ProjectID: "gomsg-test", ClientEmail: "horn@gomsg-test.iam.gserviceaccount.com", pub: &key.PublicKey,
		issued: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", f.serveToken)
	mux.HandleFunc("POST /v1/projects/{project}/messages:send", f.serveSend)
	f.Server = httptest.NewServer(mux)
	tb.Cleanup(f.Server.Close)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	sa := map[string]string{
		"type": "service_account", "project_id": f.ProjectID, "private_key_id": "key-1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": f.ClientEmail, "client_id": "1", "token_uri": f.Server.URL + "/token",
	}
	raw, _ := json.Marshal(sa)
	f.CredentialsFile = filepath.Join(tb.TempDir(), "service-account.json")
	if err := os.WriteFile(f.CredentialsFile, raw, 0o600); err != nil {
		tb.Fatal(err)
	}
	return f
}

// URL is the mock's base URL, FCM's endpoint.
func (f *FCM) URL() string { return f.Server.URL }

// Exchanges is how many OAuth token exchanges the mock served.
func (f *FCM) Exchanges() int {
	f.tokMu.Lock()
	defer f.tokMu.Unlock()
	return f.exchanges
}

// serveToken is the OAuth 2.0 JWT-bearer exchange: the assertion must be
// signed (RS256) by the service account's key, issued by its client_email
// for the token_uri audience and the firebase.messaging scope.
func (f *FCM) serveToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		f.fail("token exchange: grant_type %q", r.PostForm.Get("grant_type"))
		http.Error(w, `{"error":"unsupported_grant_type"}`, http.StatusBadRequest)
		return
	}
	tok, err := jwt.Parse(r.PostForm.Get("assertion"), func(*jwt.Token) (any, error) { return f.pub, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(f.ClientEmail),
		jwt.WithAudience(f.Server.URL+"/token"), jwt.WithExpirationRequired())
	if err == nil {
		if scope, _ := tok.Claims.(jwt.MapClaims)["scope"].(string); !strings.Contains(scope, "firebase.messaging") {
			err = fmt.Errorf("scope %q lacks firebase.messaging", scope)
		}
	}
	if err != nil {
		f.fail("token exchange: assertion: %v", err)
		http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
		return
	}
	f.tokMu.Lock()
	f.exchanges++
	access := fmt.Sprintf("ya29.test-%d", f.exchanges)
	f.issued[access] = true
	f.tokMu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": access, "token_type": "Bearer", "expires_in": 3600})
}

func (f *FCM) serveSend(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, code, format string, args ...any) {
		f.fail(format, args...)
		writeFCMError(w, Answer{Status: status, Reason: code})
	}
	access, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	f.tokMu.Lock()
	ok := f.issued[access]
	f.tokMu.Unlock()
	if !ok {
		fail(http.StatusUnauthorized, "THIRD_PARTY_AUTH_ERROR", "send: access token %q was not issued", access)
		return
	}
	if p := r.PathValue("project"); p != f.ProjectID {
		fail(http.StatusNotFound, "SENDER_ID_MISMATCH", "send: project %q, want %q", p, f.ProjectID)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var body struct {
		Message map[string]any `json:"message"`
	}
	if err := json.Unmarshal(raw, &body); err != nil || body.Message == nil {
		fail(http.StatusBadRequest, "INVALID_ARGUMENT", "send: body %s: %v", raw, err)
		return
	}
	token, _ := body.Message["token"].(string)
	if token == "" {
		fail(http.StatusBadRequest, "INVALID_ARGUMENT", "send: no message.token")
		return
	}
	ans := f.record(Request{Token: token, Header: r.Header.Clone(), Body: body.Message, Raw: raw, At: time.Now(),
		Account: f.ProjectID})
	if ans.Status == http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"name": "projects/" + f.ProjectID + "/messages/1"})
		return
	}
	writeFCMError(w, ans)
}

// writeFCMError writes FCM v1's error body; Reason is the FcmError
// errorCode. INVALID_ARGUMENT names message.token as the bad field.
func writeFCMError(w http.ResponseWriter, a Answer) {
	status := map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND",
		429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}[a.Status]
	details := []map[string]any{{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": a.Reason}}
	msg := "error"
	if a.Reason == "INVALID_ARGUMENT" {
		msg = "The registration token is not a valid FCM registration token"
		details = append(details, map[string]any{"@type": "type.googleapis.com/google.rpc.BadRequest",
			"fieldViolations": []map[string]string{{"field": "message.token", "description": msg}}})
	}
	if a.RetryAfter != "" {
		w.Header().Set("Retry-After", a.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.Status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": a.Status, "message": msg, "status": status, "details": details}})
}
