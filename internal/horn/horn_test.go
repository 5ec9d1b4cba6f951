package horn_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/horn/horntest"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/queue"
	tu "github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const (
	notifyTopic = "gomsg.notify"
	retryTopic  = "gomsg.notify.retry"
	deadTopic   = "gomsg.notify.dead"
	maxRetries  = 2
	// retryAfterMax caps the mocks' Retry-After of 30s.
	retryAfterMax = 300 * time.Millisecond
)

// env is horn running against a real redis-server, an in-process Kafka
// broker and the provider mocks.
type env struct {
	t        *testing.T
	devices  *device.Store
	kafka    string
	producer *queue.Producer
	metrics  *metrics.Metrics
	apns     *horntest.APNs
	fcm      *horntest.FCM
}

func apnsConfig(a *horntest.APNs) horn.APNsConfig {
	return horn.APNsConfig{KeyFile: a.KeyFile, KeyID: a.KeyID, TeamID: a.TeamID, Topic: a.Topic, Host: a.URL(), CAFile: a.CAFile}
}

func hornConfig(e *env) horn.Config {
	return horn.Config{
		Brokers: []string{e.kafka}, Platforms: platform.MustParse("ios:notify=apns,android:notify=fcm"),
		Workers: 8, MaxRetries: maxRetries, RetryBackoff: 20 * time.Millisecond, RetryAfterMax: retryAfterMax,
		APNs: apnsConfig(e.apns), FCM: horn.FCMConfig{CredentialsFile: e.fcm.CredentialsFile, Endpoint: e.fcm.URL()},
	}
}

func start(t *testing.T) *env {
	t.Helper()
	return startWith(t, func(*horn.Config) {})
}

// startWith runs horn with the test configuration changed by mut.
func startWith(t *testing.T, mut func(*horn.Config)) *env {
	t.Helper()
	e := &env{t: t, apns: horntest.StartAPNs(t), fcm: horntest.StartFCM(t), metrics: metrics.New()}
	e.devices = device.New(tu.StartRedis(t).Client(t))
	e.kafka = tu.StartKafka(t, 2, notifyTopic, retryTopic, deadTopic, receiptsTopic)
	log := zaptest.NewLogger(t)
	e.producer = queue.NewProducer(queue.ProducerConfig{Brokers: []string{e.kafka}}, log)
	t.Cleanup(func() { _ = e.producer.Close() })
	cfg := hornConfig(e)
	mut(&cfg)
	h, err := horn.New(cfg, log, e.metrics, e.devices, e.producer)
	if err != nil {
		t.Fatalf("horn.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("horn.Run: %v", err)
		}
		if errs := append(e.apns.Errors(), e.fcm.Errors()...); len(errs) > 0 {
			t.Errorf("provider mocks refused malformed requests: %v", errs)
		}
	})
	return e
}

func (e *env) register(uid, platform, provider, token string) {
	e.t.Helper()
	if _, err := e.devices.Register(context.Background(), device.Device{UID: uid, Platform: platform, Provider: provider,
		Token: token}, 0, nil); err != nil {
		e.t.Fatal(err)
	}
}

// notify publishes a carrier-style Notification task.
func (e *env) notify(uid, platform, provider string, c *pushpb.Notification) {
	e.t.Helper()
	v, err := proto.Marshal(&mqpb.Payload{Seq: time.Now().UnixNano(), Timestamp: time.Now().UnixMilli(),
		Body: &mqpb.Payload_Notification{Notification: &mqpb.Notification{Uid: uid, Platform: platform, Provider: provider, Content: c}}})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.producer.Publish(context.Background(), queue.Record{Topic: notifyTopic, Key: uid, Value: v}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) waitRequests(m mock, token string, n int) []horntest.Request {
	e.t.Helper()
	tu.WaitFor(e.t, 15*time.Second, func() error {
		if got := m.Count(token); got < n {
			return fmt.Errorf("%d requests for %s, want %d", got, token, n)
		}
		return nil
	})
	return m.Requests(token)
}

func (e *env) tokens(uid, platform string) []string {
	e.t.Helper()
	all, err := e.devices.List(context.Background(), uid, platform)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, d := range all {
		out = append(out, d.Token)
	}
	return out
}

type mock interface {
	Respond(token string, answers ...horntest.Answer)
	Count(token string) int
	Requests(token string) []horntest.Request
}

// provider is one provider under test: its platform, mock and the answers
// that mean "token gone" and "try later".
type provider struct {
	name, platform string
	mock           func(*env) mock
	unregistered   []horntest.Answer
	unavailable    horntest.Answer
}

var providers = []provider{
	{name: "apns", platform: "ios", mock: func(e *env) mock { return e.apns },
		unregistered: []horntest.Answer{{Status: 410, Reason: "Unregistered"}, {Status: 400, Reason: "BadDeviceToken"}},
		unavailable:  horntest.Answer{Status: 503, Reason: "ServiceUnavailable"}},
	{name: "fcm", platform: "android", mock: func(e *env) mock { return e.fcm },
		unregistered: []horntest.Answer{{Status: 404, Reason: "UNREGISTERED"}, {Status: 400, Reason: "INVALID_ARGUMENT"}},
		unavailable:  horntest.Answer{Status: 503, Reason: "UNAVAILABLE"}},
}

func content() *pushpb.Notification {
	badge := int32(3)
	return &pushpb.Notification{Title: "Bob", Body: "are you there?", Sound: "default", Badge: &badge,
		CollapseId: "chat-7", Data: map[string]string{"chat": "7"}, TtlSeconds: 3600}
}

// A provider answering that the token is gone gets the token removed; a
// later notification to the same user reaches the user's other device and
// never the removed token.
func TestUnregisteredTokenIsRemovedAndNeverTriedAgain(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		for _, ans := range p.unregistered {
			t.Run(p.name+"/"+ans.Reason, func(t *testing.T) {
				t.Parallel()
				e := start(t)
				m := p.mock(e)
				m.Respond("gone-token", ans)
				e.register("carol", p.platform, p.name, "gone-token")
				e.notify("carol", p.platform, p.name, content())
				e.waitRequests(m, "gone-token", 1)
				tu.WaitFor(t, 10*time.Second, func() error {
					if got := e.tokens("carol", p.platform); len(got) != 0 {
						return fmt.Errorf("tokens %v, want none", got)
					}
					return nil
				})
				e.register("carol", p.platform, p.name, "new-token")
				e.notify("carol", p.platform, p.name, content())
				e.waitRequests(m, "new-token", 1)
				if n := m.Count("gone-token"); n != 1 {
					t.Fatalf("removed token got %d requests, want 1", n)
				}
				if v := testutil.ToFloat64(e.metrics.DeviceTokensPruned.WithLabelValues(p.name)); v != 1 {
					t.Fatalf("tokens removed metric %v, want 1", v)
				}
			})
		}
	}
}

// 503 with Retry-After goes through the retry topic and succeeds on the
// retry, which waits Retry-After capped at RetryAfterMax.
func TestUnavailableIsRetriedThenSucceeds(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := start(t)
			m := p.mock(e)
			first := p.unavailable
			first.RetryAfter = "30"
			m.Respond("flaky", first, horntest.Answer{Status: 200})
			e.register("dave", p.platform, p.name, "flaky")
			e.notify("dave", p.platform, p.name, content())
			reqs := e.waitRequests(m, "flaky", 2)
			if gap := reqs[1].At.Sub(reqs[0].At); gap < retryAfterMax || gap > 10*time.Second {
				t.Fatalf("retry %s after the first attempt, want Retry-After capped at %s", gap, retryAfterMax)
			}
			tu.WaitFor(t, 5*time.Second, func() error {
				if v := testutil.ToFloat64(e.metrics.NotificationsSent.WithLabelValues(p.name, "sent")); v != 1 {
					return fmt.Errorf("sent metric %v, want 1", v)
				}
				return nil
			})
			if got := e.tokens("dave", p.platform); len(got) != 1 {
				t.Fatalf("tokens %v, want the token kept", got)
			}
			if recs := horntest.ReadTopic(t, e.kafka, deadTopic); len(recs) != 0 {
				t.Fatalf("%d dead letters, want none", len(recs))
			}
		})
	}
}

// A provider that always answers 503 gets 1 + MaxRetries requests, then the
// notification is in the dead-letter topic with the provider's answer.
func TestAlwaysUnavailableEndsInDeadLetters(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := start(t)
			m := p.mock(e)
			m.Respond("down", p.unavailable)
			e.register("erin", p.platform, p.name, "down")
			e.notify("erin", p.platform, p.name, content())
			var dead []*mqpb.Payload
			tu.WaitFor(t, 15*time.Second, func() error {
				if dead = horntest.ReadTopic(t, e.kafka, deadTopic); len(dead) == 0 {
					return fmt.Errorf("no dead letter yet (%d requests)", m.Count("down"))
				}
				return nil
			})
			n := dead[0].GetNotification()
			want := strconv.Itoa(p.unavailable.Status) + " " + p.unavailable.Reason
			if len(dead) != 1 || dead[0].GetRetryCount() != maxRetries || n.GetLastError() != want ||
				n.GetToken() != "down" || n.GetUid() != "erin" || n.GetProvider() != p.name || n.GetContent().GetTitle() != "Bob" {
				t.Fatalf("dead letters %v, want one for erin/down after %d retries with answer %q", dead, maxRetries, want)
			}
			if got := m.Count("down"); got != 1+maxRetries {
				t.Fatalf("%d requests, want %d", got, 1+maxRetries)
			}
			if got := len(horntest.ReadTopic(t, e.kafka, retryTopic)); got != maxRetries {
				t.Fatalf("%d retry records, want %d", got, maxRetries)
			}
		})
	}
}

// A retry waiting for its Retry-After does not hold up new notifications,
// for other users or for the same user.
func TestWaitingRetryDoesNotBlockNotifications(t *testing.T) {
	t.Parallel()
	e := startWith(t, func(c *horn.Config) { c.RetryAfterMax = time.Hour })
	e.apns.Respond("slow", horntest.Answer{Status: 429, Reason: "TooManyRequests", RetryAfter: "3600"})
	e.register("gina", "ios", "apns", "slow")
	e.notify("gina", "ios", "apns", content())
	tu.WaitFor(t, 10*time.Second, func() error {
		recs := horntest.ReadTopic(t, e.kafka, retryTopic)
		if len(recs) != 1 || recs[0].GetNotification().GetRetryAfterMs() != 3600_000 {
			return fmt.Errorf("retry records %v, want one with Retry-After 3600s", recs)
		}
		return nil
	})
	e.register("hank", "ios", "apns", "fast")
	e.notify("hank", "ios", "apns", content())
	e.waitRequests(e.apns, "fast", 1)
	e.apns.Respond("slow") // back to 200, but the retry is not due for an hour
	e.register("gina", "ios", "apns", "gina-ipad")
	e.notify("gina", "ios", "apns", content())
	e.waitRequests(e.apns, "gina-ipad", 1)
	// The new notification goes to gina's two devices at once: wait for
	// the throttled one's request too, then check the retry added none.
	e.waitRequests(e.apns, "slow", 2)
	if n := e.apns.Count("slow"); n != 2 {
		t.Fatalf("throttled token got %d requests, want 2 (the first, and the new notification; the retry still waits)", n)
	}
}
