package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

const (
	receiptsTopic = "gomsg.receipts"
	optReceipts   = uint32(msgpb.Option_NEED_RECEIPTS)
)

func withReceipts() option {
	return func(c *app.ClusterConfig) { c.Backends.ReceiptsTopic = receiptsTopic }
}

// receiptsOf returns uid's receipts on the receipts topic, in order, one
// line each: "seq platform STATE [sid@boat] [acked] [attempt=n] [detail]".
// It drops repeats by id, as the receipts' consumers are told to: station
// and carrier both write a message's ACCEPTED.
func (e *env) receiptsOf(uid string) []string {
	e.t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, v := range e.readTopic(receiptsTopic, 0) {
		var rc receiptpb.Receipt
		if err := proto.Unmarshal(v, &rc); err != nil {
			e.t.Fatal(err)
		}
		if rc.GetUid() != uid || seen[rc.GetId()] {
			continue
		}
		seen[rc.GetId()] = true
		s := fmt.Sprintf("%d %s %s", rc.GetSeq(), rc.GetPlatform(), rc.GetState())
		if rc.GetSid() != "" {
			s += " " + rc.GetSid() + "@" + rc.GetBoatId()
		}
		if rc.GetAcked() {
			s += " acked"
		}
		if rc.GetAttempt() != 0 {
			s += fmt.Sprintf(" attempt=%d", rc.GetAttempt())
		}
		if d := rc.GetDetail(); d != "" {
			s += " " + strings.SplitN(d, ":", 2)[0]
		}
		out = append(out, s)
	}
	return out
}

// waitReceipts waits until uid's receipts are want, in that order.
func (e *env) waitReceipts(uid string, want ...string) {
	e.t.Helper()
	testutil.WaitFor(e.t, 20*time.Second, func() error {
		if got := e.receiptsOf(uid); !slices.Equal(got, want) {
			return fmt.Errorf("receipts of %s:\n  %s\nwant:\n  %s", uid, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		return nil
	})
}

// Every step of a delivery of a message that asks NEED_RECEIPTS reaches the
// receipts topic, per uid in order: an ACKing device online, a device
// offline that connects later, a device that reads but never ACKs, and a
// notification through APNs. A message that does not ask gets none, not
// even ACCEPTED.
func TestReceiptsOfEveryStep(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e, _ := startHorn(t, withReceipts(), withAckWait(300*time.Millisecond), withRetries(1), queueOpt)
		on := func(pl string) *pushpb.PlatformConfig { return &pushpb.PlatformConfig{Platforms: []string{pl}} }

		// (a) online, ACKing: ACCEPTED, then DELIVERED to its session, acked.
		ann := e.connect("ann", "web", true)
		seq := e.pushText(&pushpb.PushRequest{Uids: []string{"ann"}, PlatformConfig: on("web"), MsgOptions: optAck | optReceipts}, "a")
		e.waitReceipts("ann", fmt.Sprintf("%d web ACCEPTED", seq), fmt.Sprintf("%d web DELIVERED %s@boat-1 acked", seq, ann.Sid))

		// (b) offline: ACCEPTED, STORED; REPLAYED to the session that connects.
		seq = e.pushText(&pushpb.PushRequest{Uids: []string{"bob"}, PlatformConfig: on("web"), MsgOptions: optOffline | optReceipts}, "b")
		e.waitReceipts("bob", fmt.Sprintf("%d web ACCEPTED", seq), fmt.Sprintf("%d web STORED", seq))
		bob := e.connect("bob", "web", true)
		bob.waitCount(t, 1)
		e.waitReceipts("bob", fmt.Sprintf("%d web ACCEPTED", seq), fmt.Sprintf("%d web STORED", seq),
			fmt.Sprintf("%d web REPLAYED %s@boat-1 acked", seq, bob.Sid))

		// (c) a device that reads and never ACKs: the delivery fails and is
		// retried once. The retry ends the message for good either way: it is
		// dead-lettered when the session is still recorded and fails again, or
		// dropped (it is not to be stored) when boat's ACK timeout ended the
		// session first.
		cy := e.connect("cy", "web", false)
		seq = e.pushText(&pushpb.PushRequest{Uids: []string{"cy"}, PlatformConfig: on("web"), MsgOptions: optAck | optReceipts}, "c")
		cy.waitCount(t, 1)
		head := []string{fmt.Sprintf("%d web ACCEPTED", seq), fmt.Sprintf("%d web RETRIED attempt=1 delivery failed on [web]", seq)}
		ends := []string{fmt.Sprintf("%d web DEAD_LETTERED failed 2 attempts; last", seq), fmt.Sprintf("%d web DROPPED", seq)}
		testutil.WaitFor(t, 20*time.Second, func() error {
			got := e.receiptsOf("cy")
			if len(got) != 3 || !slices.Equal(got[:2], head) || !slices.Contains(ends, got[2]) {
				return fmt.Errorf("receipts of cy:\n  %s\nwant %q then one of %q", strings.Join(got, "\n  "), head, ends)
			}
			return nil
		})

		// (d) offline with a device token: ACCEPTED, STORED, NOTIFIED by APNs.
		e.registerDevice("dan", "ios", "da11")
		seq = e.pushText(&pushpb.PushRequest{Uids: []string{"dan"}, PlatformConfig: on("ios"), MsgOptions: optOffline | optNotify | optReceipts,
			Notification: &pushpb.Notification{Title: "hi"}}, "d")
		e.waitReceipts("dan", fmt.Sprintf("%d ios ACCEPTED", seq), fmt.Sprintf("%d ios STORED", seq),
			fmt.Sprintf("%d ios NOTIFIED apns 200 00000000-0000-0000-0000-000000000001", seq))

		// (e) a message without NEED_RECEIPTS, then one with it, to the same
		// ACKing device: the first's receipts would come before the second's.
		eve := e.connect("eve", "web", true)
		e.pushText(&pushpb.PushRequest{Uids: []string{"eve"}, PlatformConfig: on("web"), MsgOptions: optAck}, "untracked")
		seq = e.pushText(&pushpb.PushRequest{Uids: []string{"eve"}, PlatformConfig: on("web"), MsgOptions: optAck | optReceipts}, "tracked")
		eve.waitCount(t, 2)
		e.waitReceipts("eve", fmt.Sprintf("%d web ACCEPTED", seq), fmt.Sprintf("%d web DELIVERED %s@boat-1 acked", seq, eve.Sid))
	})
}
