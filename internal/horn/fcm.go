package horn

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const fcmScope = "https://www.googleapis.com/auth/firebase.messaging"

// FCMConfig configures the FCM HTTP v1 provider.
type FCMConfig struct {
	// CredentialsFile is a Google service-account JSON; its project_id is
	// the Firebase project and its token_uri the OAuth token endpoint.
	CredentialsFile string
	// Endpoint overrides https://fcm.googleapis.com (tests, proxies).
	Endpoint string
}

// Defaults fills unset fields: Google's FCM endpoint.
func (c *FCMConfig) Defaults() {
	if c.Endpoint == "" {
		c.Endpoint = "https://fcm.googleapis.com"
	}
}

func (c FCMConfig) configured() bool { return c.CredentialsFile != "" }

// fcmProvider is a small FCM HTTP v1 client: one net/http pool for the
// token exchange and the sends; OAuth tokens are cached until they expire.
type fcmProvider struct {
	url    string
	http   *http.Client
	tokens oauth2.TokenSource
}

type serviceAccount struct {
	Type        string `json:"type"`
	ProjectID   string `json:"project_id"`
	PrivateKey  string `json:"private_key"`
	ClientEmail string `json:"client_email"`
	TokenURI    string `json:"token_uri"`
}

// NewFCM reads and checks the service account now, so bad credentials stop
// the service at start-up with the setting's name.
func NewFCM(cfg FCMConfig) (Provider, error) {
	data, err := os.ReadFile(cfg.CredentialsFile)
	if err != nil {
		return nil, fmt.Errorf("--fcm-credentials-file: %w", err)
	}
	var sa serviceAccount
	if err := json.Unmarshal(data, &sa); err != nil {
		return nil, fmt.Errorf("--fcm-credentials-file %q: not a service-account JSON: %w", cfg.CredentialsFile, err)
	}
	switch {
	case sa.Type != "service_account":
		return nil, fmt.Errorf("--fcm-credentials-file %q: type %q, want service_account", cfg.CredentialsFile, sa.Type)
	case sa.ProjectID == "" || sa.ClientEmail == "":
		return nil, fmt.Errorf("--fcm-credentials-file %q: project_id and client_email must be set", cfg.CredentialsFile)
	}
	if err := checkRSAKey(sa.PrivateKey); err != nil {
		return nil, fmt.Errorf("--fcm-credentials-file %q: private_key: %w", cfg.CredentialsFile, err)
	}
	cfg.Defaults()
	endpoint := strings.TrimSuffix(cfg.Endpoint, "/")
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		ForceAttemptHTTP2: true, MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, hc)
	creds, err := google.CredentialsFromJSONWithType(ctx, data, google.ServiceAccount, fcmScope)
	if err != nil {
		return nil, fmt.Errorf("--fcm-credentials-file %q: %w", cfg.CredentialsFile, err)
	}
	return &fcmProvider{url: endpoint + "/v1/projects/" + sa.ProjectID + "/messages:send", http: hc,
		tokens: creds.TokenSource}, nil
}

func checkRSAKey(p string) error {
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		return fmt.Errorf("not a PEM key")
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		return nil
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
		return fmt.Errorf("not an RSA private key: %w", err)
	}
	return nil
}

func (f *fcmProvider) Name() string { return "fcm" }

// fcmMessage is the v1 message: notification and data, with Android and web
// push fields.
type fcmMessage struct {
	Token        string            `json:"token"`
	Notification *fcmNotification  `json:"notification,omitempty"`
	Data         map[string]string `json:"data,omitempty"`
	Android      *fcmAndroid       `json:"android,omitempty"`
	Webpush      *fcmWebpush       `json:"webpush,omitempty"`
}

type fcmNotification struct {
	Title string `json:"title,omitempty"`
	Body  string `json:"body,omitempty"`
}

type fcmAndroid struct {
	CollapseKey  string                  `json:"collapse_key,omitempty"`
	Priority     string                  `json:"priority,omitempty"`
	TTL          string                  `json:"ttl,omitempty"`
	Notification *fcmAndroidNotification `json:"notification,omitempty"`
}

type fcmAndroidNotification struct {
	Sound string `json:"sound,omitempty"`
}

type fcmWebpush struct {
	Headers map[string]string `json:"headers,omitempty"`
}

// Message builds the v1 request body of a device.
func (f *fcmProvider) Message(d device.Device, n *pushpb.Notification) ([]byte, error) {
	m := fcmMessage{Token: d.Token, Data: n.GetData(), Android: &fcmAndroid{Priority: "HIGH", CollapseKey: n.GetCollapseId()}}
	if n.GetTitle() != "" || n.GetBody() != "" {
		m.Notification = &fcmNotification{Title: n.GetTitle(), Body: n.GetBody()}
	}
	if n.GetSound() != "" {
		m.Android.Notification = &fcmAndroidNotification{Sound: n.GetSound()}
	}
	web := map[string]string{}
	if ttl := n.GetTtlSeconds(); ttl > 0 {
		m.Android.TTL = strconv.FormatInt(ttl, 10) + "s"
		web["TTL"] = strconv.FormatInt(ttl, 10)
	}
	if n.GetCollapseId() != "" {
		web["Topic"] = n.GetCollapseId()
	}
	if len(web) > 0 {
		m.Webpush = &fcmWebpush{Headers: web}
	}
	return json.Marshal(map[string]any{"message": m})
}

// fcmError is the v1 error body.
type fcmError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type            string `json:"@type"`
			ErrorCode       string `json:"errorCode"`
			FieldViolations []struct {
				Field string `json:"field"`
			} `json:"fieldViolations"`
		} `json:"details"`
	} `json:"error"`
}

func (f *fcmProvider) Send(ctx context.Context, d device.Device, n *pushpb.Notification) Result {
	body, err := f.Message(d, n)
	if err != nil {
		return Result{Verdict: Rejected, Reason: err.Error()}
	}
	tok, err := f.tokens.Token()
	if err != nil {
		return Result{Verdict: Retry, Reason: "oauth token: " + err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(body))
	if err != nil {
		return Result{Verdict: Rejected, Reason: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	tok.SetAuthHeader(req)
	resp, err := f.http.Do(req)
	if err != nil {
		return Result{Verdict: Retry, Reason: err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	r := Result{Verdict: verdictOf(resp.StatusCode), Status: resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	if r.Verdict == Sent {
		var ok struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(raw, &ok)
		r.ID = ok.Name
		return r
	}
	var e fcmError
	_ = json.Unmarshal(raw, &e)
	r.Reason = e.Error.Status
	tokenField := strings.Contains(strings.ToLower(e.Error.Message), "registration token")
	for _, det := range e.Error.Details {
		if det.ErrorCode != "" {
			r.Reason = det.ErrorCode
		}
		for _, v := range det.FieldViolations {
			tokenField = tokenField || v.Field == "message.token"
		}
	}
	if r.Reason == "UNREGISTERED" || (r.Reason == "INVALID_ARGUMENT" && tokenField) {
		r.Verdict = Unregistered
	}
	return r
}
