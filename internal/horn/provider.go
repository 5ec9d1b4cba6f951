package horn

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// Verdict is what horn does after a provider answered.
type Verdict int

const (
	// Sent: the provider accepted the notification.
	Sent Verdict = iota
	// Unregistered: the token is no longer valid; it is removed.
	Unregistered
	// Retry: throttled (429), a 5xx or no answer; retried with backoff.
	Retry
	// Rejected: any other answer; retrying cannot help, dead-lettered.
	Rejected
)

// Result is a provider's answer to one send.
type Result struct {
	Verdict Verdict
	// Status is the HTTP status (0: no answer).
	Status int
	// Reason is the provider's reason ("Unregistered", "UNAVAILABLE", …) or
	// the transport error.
	Reason string
	// RetryAfter is the provider's Retry-After (0: none).
	RetryAfter time.Duration
	// ID is the provider's id of a notification it accepted (APNs'
	// apns-id, FCM's message name); "" when it gave none.
	ID string
}

// detail is the answer of a provider in a receipt: "apns 200 <apns-id>".
func (r Result) detail(provider string) string {
	return strings.TrimSpace(strings.Join([]string{provider, strings.TrimSpace(r.Answer()), r.ID}, " "))
}

// Answer is the provider's answer in one line, e.g. "503 ServiceUnavailable".
func (r Result) Answer() string {
	if r.Status == 0 {
		return r.Reason
	}
	return strconv.Itoa(r.Status) + " " + r.Reason
}

// label is the metric label of a result.
func (r Result) label() string {
	switch r.Verdict {
	case Sent:
		return "sent"
	case Unregistered:
		return "unregistered"
	}
	if r.Status == 0 {
		return "error"
	}
	if r.Reason != "" {
		return r.Reason
	}
	return strconv.Itoa(r.Status)
}

// Provider sends one notification to one device. It is safe for concurrent
// use and keeps one connection pool across sends.
type Provider interface {
	Name() string
	Send(ctx context.Context, d device.Device, n *pushpb.Notification) Result
}

// sender bounds a provider's concurrency and records its metrics.
type sender struct {
	p       Provider
	sem     chan struct{}
	timeout time.Duration
	m       *metrics.Metrics
	log     *zap.Logger
	// The collectors of every send, looked up once.
	latency prometheus.Observer
	sent    prometheus.Counter
}

func newSender(p Provider, concurrency int, timeout time.Duration, m *metrics.Metrics, log *zap.Logger) *sender {
	return &sender{p: p, sem: make(chan struct{}, concurrency), timeout: timeout, m: m,
		log:     log.With(zap.String("provider", p.Name())),
		latency: m.NotifyLatency.WithLabelValues(p.Name()), sent: m.NotificationsSent.WithLabelValues(p.Name(), "sent")}
}

// send waits for a slot, sends and counts the result.
func (s *sender) send(ctx context.Context, d device.Device, n *pushpb.Notification) Result {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return Result{Verdict: Retry, Reason: ctx.Err().Error()}
	}
	defer func() { <-s.sem }()
	sctx, cancel := context.WithTimeout(ctx, s.timeout)
	start := time.Now()
	r := s.p.Send(sctx, d, n)
	cancel()
	s.latency.Observe(time.Since(start).Seconds())
	if r.Verdict == Sent {
		s.sent.Inc()
	} else {
		s.m.NotificationsSent.WithLabelValues(s.p.Name(), r.label()).Inc()
		s.log.Info("provider did not accept notification", zap.String("uid", d.UID), zap.String("platform", d.Platform),
			zap.String("answer", r.Answer()), zap.Duration("retry_after", r.RetryAfter))
	}
	return r
}

// logProvider only logs: `gomsg dev` and tests without APNs or FCM.
type logProvider struct {
	name string
	log  *zap.Logger
}

// NewLogProvider returns a provider that logs every notification and
// accepts it; name is the provider name it stands in for.
func NewLogProvider(name string, log *zap.Logger) Provider {
	return &logProvider{name: name, log: log.With(zap.String("component", "horn.log"), zap.String("provider", name))}
}

func (l *logProvider) Name() string { return l.name }

func (l *logProvider) Send(_ context.Context, d device.Device, n *pushpb.Notification) Result {
	// Device tokens and notification text are secrets of the user (one-time
	// codes travel in notifications): log a fingerprint and sizes only.
	l.log.Info("notification", zap.String("uid", d.UID), zap.String("platform", d.Platform),
		zap.String("token_sha256", TokenFingerprint(d.Token)), zap.Int("title_bytes", len(n.GetTitle())),
		zap.Int("body_bytes", len(n.GetBody())))
	return Result{Verdict: Sent, Status: 200}
}

// TokenFingerprint is what logs show of a device token: the first 12 hex
// digits of its SHA-256, enough to match a token an operator holds.
func TokenFingerprint(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:6])
}

// verdictOf classifies an HTTP status that has no provider-specific meaning.
func verdictOf(status int) Verdict {
	switch {
	case status >= 200 && status < 300:
		return Sent
	case status == 429 || status >= 500:
		return Retry
	}
	return Rejected
}

// parseRetryAfter reads a Retry-After header (seconds or an HTTP date).
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := time.Parse(time.RFC1123, v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

var errNoProvider = fmt.Errorf("no provider")
