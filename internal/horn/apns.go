package horn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sideshow/apns2"
	"github.com/sideshow/apns2/certificate"
	"github.com/sideshow/apns2/token"
	"golang.org/x/net/http2"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/notification"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// APNsConfig configures the APNs provider: token auth (KeyFile, KeyID,
// TeamID) or certificate auth (CertFile).
type APNsConfig struct {
	KeyFile string // .p8 (PKCS#8 PEM) signing key
	KeyID   string
	TeamID  string
	// CertFile is a .p12 or PEM client certificate (with its key).
	CertFile     string
	CertPassword string
	// Topic is the app's bundle id; a device's app_id overrides it.
	Topic string
	// Environment is "production" or "sandbox".
	Environment string
	// Host overrides the environment's host (tests, proxies).
	Host string
	// CAFile is a PEM bundle of extra trusted roots (tests, proxies).
	CAFile string
	// PushType is apns-push-type of notifications with an alert (default
	// "alert"); content without title and body goes as "background".
	PushType string
}

func (c APNsConfig) configured() bool { return c.KeyFile != "" || c.CertFile != "" }

// apnsProvider sends through one apns2.Client (one HTTP/2 connection pool).
type apnsProvider struct {
	cfg    APNsConfig
	client *apns2.Client
}

// Defaults fills unset fields: push type alert, the production host.
func (c *APNsConfig) Defaults() {
	if c.PushType == "" {
		c.PushType = string(apns2.PushTypeAlert)
	}
	if c.Environment == "" {
		c.Environment = "production"
	}
}

// NewAPNs checks the credentials now, so a bad key or certificate stops the
// service at start-up with the setting's name.
func NewAPNs(cfg APNsConfig) (Provider, error) {
	if cfg.Topic == "" {
		return nil, fmt.Errorf("--apns-topic: must be set (the app's bundle id)")
	}
	cfg.Defaults()
	host := cfg.Host
	switch {
	case host != "":
	case cfg.Environment == "production":
		host = apns2.HostProduction
	case cfg.Environment == "sandbox":
		host = apns2.HostDevelopment
	default:
		return nil, fmt.Errorf("--apns-environment: %q, want production or sandbox", cfg.Environment)
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--apns-ca-file: %w", err)
		}
		tlsConf.RootCAs = x509.NewCertPool()
		if !tlsConf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--apns-ca-file %q: no PEM certificate in it", cfg.CAFile)
		}
	}
	client := &apns2.Client{Host: host}
	switch {
	case cfg.KeyFile != "":
		key, err := token.AuthKeyFromFile(cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--apns-key-file %q: %w", cfg.KeyFile, err)
		}
		if cfg.KeyID == "" || cfg.TeamID == "" {
			return nil, fmt.Errorf("--apns-key-id and --apns-team-id: must be set with --apns-key-file")
		}
		tok := &token.Token{AuthKey: key, KeyID: cfg.KeyID, TeamID: cfg.TeamID}
		if _, err := tok.Generate(); err != nil {
			return nil, fmt.Errorf("--apns-key-file %q: signing a provider token: %w", cfg.KeyFile, err)
		}
		client.Token = tok
	case cfg.CertFile != "":
		var cert tls.Certificate
		var err error
		if strings.HasSuffix(strings.ToLower(cfg.CertFile), ".p12") {
			cert, err = certificate.FromP12File(cfg.CertFile, cfg.CertPassword)
		} else {
			cert, err = certificate.FromPemFile(cfg.CertFile, cfg.CertPassword)
		}
		if err != nil {
			return nil, fmt.Errorf("--apns-cert-file %q: %w", cfg.CertFile, err)
		}
		client.Certificate = cert
		tlsConf.Certificates = []tls.Certificate{cert}
	default:
		return nil, fmt.Errorf("--apns-key-file or --apns-cert-file: must be set")
	}
	// No client timeout: every send has its own deadline (SendTimeout).
	client.HTTPClient = &http.Client{
		Transport: &retryAfterTransport{next: &http2.Transport{TLSClientConfig: tlsConf, ReadIdleTimeout: 15 * time.Second}},
	}
	return &apnsProvider{cfg: cfg, client: client}, nil
}

func (a *apnsProvider) Name() string { return "apns" }

// Notification builds the apns2 request of a device: payload from content,
// and apns-push-type, apns-priority, apns-expiration (from ttl) and
// apns-collapse-id headers.
func (a *apnsProvider) Notification(d device.Device, n *pushpb.Notification, now time.Time) (*apns2.Notification, error) {
	payload, err := notification.APNs(n)
	if err != nil {
		return nil, err
	}
	out := &apns2.Notification{DeviceToken: d.Token, Topic: a.cfg.Topic, Payload: payload,
		PushType: apns2.EPushType(a.cfg.PushType), Priority: apns2.PriorityHigh, CollapseID: n.GetCollapseId()}
	if d.AppID != "" {
		out.Topic = d.AppID
	}
	if n.GetTitle() == "" && n.GetBody() == "" {
		// Apple requires priority 5 for background notifications.
		out.PushType, out.Priority = apns2.PushTypeBackground, apns2.PriorityLow
	}
	if ttl := n.GetTtlSeconds(); ttl > 0 {
		out.Expiration = now.Add(time.Duration(ttl) * time.Second)
	}
	return out, nil
}

func (a *apnsProvider) Send(ctx context.Context, d device.Device, n *pushpb.Notification) Result {
	req, err := a.Notification(d, n, time.Now())
	if err != nil {
		return Result{Verdict: Rejected, Reason: err.Error()}
	}
	var after retryAfter
	resp, err := a.client.PushWithContext(context.WithValue(ctx, retryAfterKey{}, &after), req)
	if err != nil {
		return Result{Verdict: Retry, Reason: err.Error()}
	}
	r := Result{Verdict: verdictOf(resp.StatusCode), Status: resp.StatusCode, Reason: resp.Reason,
		RetryAfter: parseRetryAfter(after.value, time.Now()), ID: resp.ApnsID}
	switch {
	case resp.StatusCode == 410, resp.Reason == apns2.ReasonUnregistered, resp.Reason == apns2.ReasonBadDeviceToken:
		r.Verdict = Unregistered
	}
	return r
}

// retryAfter receives a response's Retry-After header: apns2 does not
// expose response headers, so the transport hands it over through the
// request's context.
type retryAfter struct{ value string }

type retryAfterKey struct{}

type retryAfterTransport struct{ next http.RoundTripper }

func (t *retryAfterTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err == nil {
		if ra, ok := r.Context().Value(retryAfterKey{}).(*retryAfter); ok {
			ra.value = resp.Header.Get("Retry-After")
		}
	}
	return resp, err
}

// CloseIdleConnections lets apns2's CloseIdleConnections reach the pool.
func (t *retryAfterTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
