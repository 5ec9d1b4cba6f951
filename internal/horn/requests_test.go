package horn_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/horn/horntest"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// asJSON re-encodes a decoded value for comparison.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The APNs request carries the device token in the path, a verified ES256
// provider token (checked by the mock), the topic and the headers taken
// from the content, and the JSON payload.
func TestAPNsRequestCarriesContent(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.register("bob", "ios", "apns", "a1b2c3")
	before := time.Now()
	e.notify("bob", "ios", "apns", content())
	r := e.waitRequests(e.apns, "a1b2c3", 1)[0]
	h := r.Header
	if h.Get("apns-topic") != e.apns.Topic || h.Get("apns-push-type") != "alert" || h.Get("apns-priority") != "10" ||
		h.Get("apns-collapse-id") != "chat-7" {
		t.Fatalf("headers %v", h)
	}
	exp, err := strconv.ParseInt(h.Get("apns-expiration"), 10, 64)
	if err != nil || exp < before.Add(time.Hour).Unix()-1 || exp > time.Now().Add(time.Hour).Unix()+1 {
		t.Fatalf("apns-expiration %q, want now + 3600s", h.Get("apns-expiration"))
	}
	want := `{"aps":{"alert":{"body":"are you there?","title":"Bob"},"badge":3,"sound":"default"},"chat":"7"}`
	if got := asJSON(t, r.Body); got != want {
		t.Fatalf("payload %s, want %s", got, want)
	}
}

// The FCM request went through the OAuth exchange (the mock verified the
// assertion's RS256 signature and issued the bearer token it checks) and
// carries notification, data, Android and web push fields.
func TestFCMRequestCarriesContent(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.register("bob", "android", "fcm", "fcm-token-1")
	e.notify("bob", "android", "fcm", content())
	r := e.waitRequests(e.fcm, "fcm-token-1", 1)[0]
	want := `{"android":{"collapse_key":"chat-7","notification":{"sound":"default"},"priority":"HIGH","ttl":"3600s"},` +
		`"data":{"chat":"7"},"notification":{"body":"are you there?","title":"Bob"},"token":"fcm-token-1",` +
		`"webpush":{"headers":{"TTL":"3600","Topic":"chat-7"}}}`
	if got := asJSON(t, r.Body); got != want {
		t.Fatalf("message %s, want %s", got, want)
	}
	if n := e.fcm.Exchanges(); n != 1 {
		t.Fatalf("%d token exchanges, want 1", n)
	}
}

// Credentials are checked by New: a bad one is an error naming the setting,
// before anything is consumed.
func TestBadCredentialsFailAtStartup(t *testing.T) {
	t.Parallel()
	a := horntest.StartAPNs(t)
	f := horntest.StartFCM(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	garbage := write("garbage.p8", "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
	badJSON := write("bad.json", `{"type":"service_account",`)
	badKey := write("badkey.json", `{"type":"service_account","project_id":"p","client_email":"e@x","private_key":"nope"}`)
	ok := apnsConfig(a)
	okFCM := horn.FCMConfig{CredentialsFile: f.CredentialsFile, Endpoint: f.URL()}
	with := func(mut func(*horn.Config)) horn.Config {
		c := horn.Config{Brokers: []string{"127.0.0.1:1"}, Platforms: platform.MustParse("ios:notify=apns,android:notify=fcm"),
			APNs: ok, FCM: okFCM}
		mut(&c)
		return c
	}
	for _, tc := range []struct {
		name, want string
		cfg        horn.Config
	}{
		{"missing p8", "apns-key-file", with(func(c *horn.Config) { c.APNs.KeyFile = filepath.Join(dir, "nope.p8") })},
		{"garbage p8", "apns-key-file", with(func(c *horn.Config) { c.APNs.KeyFile = garbage })},
		{"no key id", "apns-key-id", with(func(c *horn.Config) { c.APNs.KeyID = "" })},
		{"no topic", "apns-topic", with(func(c *horn.Config) { c.APNs.Topic = "" })},
		{"bad certificate", "apns-cert-file", with(func(c *horn.Config) { c.APNs = horn.APNsConfig{CertFile: garbage, Topic: "x"} })},
		{"no apns credentials", "apns-key-file", with(func(c *horn.Config) { c.APNs = horn.APNsConfig{} })},
		{"missing json", "fcm-credentials-file", with(func(c *horn.Config) { c.FCM.CredentialsFile = filepath.Join(dir, "nope.json") })},
		{"bad json", "fcm-credentials-file", with(func(c *horn.Config) { c.FCM.CredentialsFile = badJSON })},
		{"bad private key", "fcm-credentials-file", with(func(c *horn.Config) { c.FCM.CredentialsFile = badKey })},
		{"unknown notifier", "unknown notifier", with(func(c *horn.Config) { c.Platforms = platform.MustParse("ios:notify=pigeon") })},
	} {
		_, err := horn.New(tc.cfg, zaptest.NewLogger(t), metrics.New(), device.New(nil), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
	if _, err := horn.New(with(func(*horn.Config) {}), zaptest.NewLogger(t), metrics.New(), device.New(nil), nil); err != nil {
		t.Fatalf("good credentials: %v", err)
	}
}

// The mock refuses a provider token signed with another key: the check in
// the other tests can fail.
func TestAPNsMockRefusesForeignProviderToken(t *testing.T) {
	t.Parallel()
	a := horntest.StartAPNs(t)
	other := horntest.StartAPNs(t)
	cfg := apnsConfig(a)
	cfg.KeyFile = other.KeyFile // right key id, wrong key
	p, err := horn.NewAPNs(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Send(context.Background(), device.Device{UID: "u", Platform: "ios", Provider: "apns", Token: "t1"},
		&pushpb.Notification{Body: "hi"})
	if r.Verdict != horn.Rejected || r.Status != 403 || r.Reason != "InvalidProviderToken" {
		t.Fatalf("result %+v, want 403 InvalidProviderToken", r)
	}
	if len(a.Errors()) != 1 || a.Count("") != 0 {
		t.Fatalf("mock errors %v, requests %d; want the token refused", a.Errors(), a.Count(""))
	}
}
