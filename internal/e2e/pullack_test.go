package e2e

import (
	"fmt"
	"slices"
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

// A device's ACK through Pull counts as seeing the messages: pia's phone is
// offline when a notify-if-unseen push comes, connects in pull mode and
// pulls and ACKs it within the delay. Her notification is cancelled
// (NOTIFY_CANCELLED) and the pulled message gets a REPLAYED receipt naming
// her session; a marker pushed to mark with the same delay once pia's ACK
// is in is due after hers: when it is notified, pia still has none.
func TestPullAckCancelsUnseenAndRecordsReplayed(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e, a := startHorn(t, queueOpt, withReceipts(), withAckWait(300*time.Millisecond), func(c *app.ClusterConfig) {
			c.Carrier.UnseenPollInterval = 20 * time.Millisecond
		})
		e.registerDevice("pia", "ios", "pia-phone")
		e.registerDevice("mark", "ipad", "mark-pad")
		const after = 4 * time.Second
		push := func(uid, platform, s string) int64 {
			return e.pushText(&pushpb.PushRequest{Uids: []string{uid}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{platform}},
				MsgOptions: optAck | optOffline | optNotify | optReceipts, NotifyIfUnseenAfter: durationpb.New(after),
				Notification: &pushpb.Notification{Title: s}}, s)
		}
		start := time.Now()
		seq := push("pia", "ios", "to pia")
		m := e.gomsg.Metrics
		testutil.WaitFor(t, 10*time.Second, func() error {
			if v := promtest.ToFloat64(m.UnseenNotifications.WithLabelValues(metrics.UnseenScheduled)); v != 1 {
				return fmt.Errorf("scheduled %v, want pia's 1", v)
			}
			return nil
		})
		pia := e.dialPull("pia", "ios")
		page := pia.pull(t, 1, 100)
		if len(page.GetMsgs()) != 1 || page.GetMsgs()[0].GetSeq() != seq || page.GetMore() {
			t.Fatalf("pulled %v (more %v), want only seq %d", page.GetMsgs(), page.GetMore(), seq)
		}
		if rest := pia.pull(t, 2, 100, seq); len(rest.GetMsgs()) != 0 {
			t.Fatalf("after the ACK pulled %v, want nothing", rest.GetMsgs())
		}
		if v := promtest.ToFloat64(m.UnseenNotifications.WithLabelValues(metrics.UnseenCancelled)); v != 1 {
			t.Fatalf("cancelled %v once the ACK was answered, want 1", v)
		}
		if d := time.Since(start); d >= after {
			t.Fatalf("pia's pull was ACKed %s after the push, not within %s: the test cannot tell", d, after)
		}
		replayed := fmt.Sprintf("%d ios REPLAYED %s@boat-1 acked pulled", seq, pia.Sid)
		cancelled := fmt.Sprintf("%d ios NOTIFY_CANCELLED", seq)
		testutil.WaitFor(t, 20*time.Second, func() error {
			got := e.receiptsOf("pia")
			if !slices.Contains(got, replayed) || !slices.Contains(got, cancelled) {
				return fmt.Errorf("receipts of pia:\n  %s\nwant among them %q and %q", strings.Join(got, "\n  "), replayed, cancelled)
			}
			return nil
		})
		push("mark", "ipad", "marker")
		waitAPNs(t, a, "mark-pad", 1)
		if n := a.Count("pia-phone"); n != 0 {
			t.Errorf("pia's phone got %d notifications, want none: she pulled and ACKed in time", n)
		}
	})
}
