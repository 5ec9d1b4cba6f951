package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/pb/pushpb"
)

// A device's Pull ACK names seqs; only those its own offline store held
// (and so that were pulled) may be recorded as REPLAYED. eve ACKs bob's
// stored message and a seq no push ever returned: neither was hers, so
// neither gets a receipt of eve, and GetDelivery of the unknown seq stays
// NotFound. Bob's message stays stored for him.
func TestPullAckOfSeqsNeverStoredRecordsNothing(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withReceipts())
		seq := e.pushText(&pushpb.PushRequest{Uids: []string{"bob"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}},
			MsgOptions: optAck | optOffline | optReceipts}, "to bob")
		// Push returns once the task is queued; carrier stores it for bob a
		// little later.
		e.waitZcard("bob", "ios", 1)
		const bogus = 987654321
		eve := e.dialPull("eve", "ios")
		if page := eve.pull(t, 1, 100, seq, bogus); len(page.GetMsgs()) != 0 {
			t.Fatalf("eve pulled %v, want nothing (her store is empty)", page.GetMsgs())
		}
		// The hook's Record returned before the PullResult: the topic has
		// whatever it published.
		if got := e.receiptsOf("eve"); len(got) != 0 {
			t.Errorf("receipts of eve, who never got seq %d nor %d:\n  %s", seq, bogus, strings.Join(got, "\n  "))
		}
		// GetDelivery is made of the topic's receipts: with none on the topic it
		// has nothing to tell of the unknown seq.
		if resp, err := e.push.GetDelivery(context.Background(), &pushpb.GetDeliveryRequest{Seq: bogus}); status.Code(err) != codes.NotFound {
			t.Fatalf("GetDelivery of seq %d, never pushed: %s, %v; want NotFound", bogus, describeDelivery(resp), err)
		}
		// Bob's message is still his: he pulls it, and his ACK is recorded.
		bob := e.dialPull("bob", "ios")
		if page := bob.pull(t, 1, 100); len(page.GetMsgs()) != 1 || page.GetMsgs()[0].GetSeq() != seq {
			t.Fatalf("bob pulled %v, want his seq %d", page.GetMsgs(), seq)
		}
		bob.pull(t, 2, 100, seq)
		want := fmt.Sprintf("%d ios REPLAYED %s@boat-1 acked pulled", seq, bob.Sid)
		if got := e.receiptsOf("bob"); !slices.Contains(got, want) {
			t.Fatalf("receipts of bob:\n  %s\nwant among them %q", strings.Join(got, "\n  "), want)
		}
	})
}

func describeDelivery(r *pushpb.GetDeliveryResponse) string {
	var b strings.Builder
	for _, tg := range r.GetTargets() {
		fmt.Fprintf(&b, "[%s %s %s", tg.GetUid(), tg.GetPlatform(), tg.GetState())
		for _, s := range tg.GetSteps() {
			fmt.Fprintf(&b, " %s acked=%v sid=%s", s.GetState(), s.GetAcked(), s.GetSid())
		}
		b.WriteString("] ")
	}
	return b.String()
}
