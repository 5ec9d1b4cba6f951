package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// Notify only if unseen, through the whole cluster and horn's APNs mock.
// Three users with an iPhone each get a push that notifies only if unseen
// after 4s: ann's phone is online and ACKs (so her offline iPad is not
// notified either), bob's is online and never ACKs
// (the boat times it out), cy's is offline and connects right after the
// push, ACKing the replay. Only bob is notified, once. A marker pushed to
// mark's offline iPad once bob's notification came, with the same delay,
// is due after all of theirs: when it arrives, ann and cy still have none
// and bob still has one.
func TestNotifyIfUnseenNotifiesOnlyWhoDidNotAck(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e, a := startHorn(t, queueOpt, withAckWait(300*time.Millisecond), func(c *app.ClusterConfig) {
			c.Carrier.UnseenPollInterval = 20 * time.Millisecond
		})
		for _, uid := range []string{"ann", "bob", "cy"} {
			e.registerDevice(uid, "ios", uid+"-phone")
		}
		e.registerDevice("ann", "ipad", "ann-pad")
		e.registerDevice("mark", "ipad", "mark-pad")
		const after = 4 * time.Second
		push := func(uid, platform, s string) {
			e.pushText(&pushpb.PushRequest{Uids: []string{uid}, PlatformConfig: &pushpb.PlatformConfig{Platforms: strings.Split(platform, ",")},
				MsgOptions: optAck | optOffline | optNotify, NotifyIfUnseenAfter: durationpb.New(after),
				Notification: &pushpb.Notification{Title: s}}, s)
		}
		ann := e.connect("ann", "ios", true)
		bob := e.connect("bob", "ios", false)
		start := time.Now()
		push("ann", "ios,ipad", "to ann")
		push("bob", "ios", "to bob")
		push("cy", "ios", "to cy")
		cy := e.connect("cy", "ios", true)
		cy.waitCount(t, 1)
		ann.waitCount(t, 1)
		bob.waitCount(t, 1)
		m := e.gomsg.Metrics
		testutil.WaitFor(t, 10*time.Second, func() error {
			if v := promtest.ToFloat64(m.UnseenNotifications.WithLabelValues(metrics.UnseenCancelled)); v != 1 {
				return fmt.Errorf("cancelled %v, want cy's 1", v)
			}
			return nil
		})
		if d := time.Since(start); d >= after {
			t.Fatalf("cy's replay was ACKed %s after the push, not within %s: the test cannot tell", d, after)
		}
		r := waitAPNs(t, a, "bob-phone", 1)[0]
		if !strings.Contains(string(r.Raw), "to bob") {
			t.Fatalf("bob's notification %s", r.Raw)
		}
		if d := r.At.Sub(start); d < after {
			t.Fatalf("bob notified %s after the push, before the %s delay", d, after)
		}
		push("mark", "ipad", "marker")
		waitAPNs(t, a, "mark-pad", 1)
		for token, want := range map[string]int{"ann-phone": 0, "ann-pad": 0, "bob-phone": 1, "cy-phone": 0} {
			if n := a.Count(token); n != want {
				t.Errorf("%s got %d notifications, want %d", token, n, want)
			}
		}
		for event, want := range map[string]float64{metrics.UnseenScheduled: 3, metrics.UnseenSent: 2, metrics.UnseenCancelled: 1} {
			if v := promtest.ToFloat64(m.UnseenNotifications.WithLabelValues(event)); v != want {
				t.Errorf("unseen %s %v, want %v", event, v, want)
			}
		}
	})
}
