package horn_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/horn/horntest"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	tu "github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

const receiptsTopic = "gomsg.receipts"

// withReceipts turns receipts on, published through a producer of the
// test's broker.
func withReceipts(t *testing.T) func(*horn.Config) {
	return func(c *horn.Config) {
		p := queue.NewProducer(queue.ProducerConfig{Brokers: c.Brokers}, zaptest.NewLogger(t))
		t.Cleanup(func() { _ = p.Close() })
		c.Receipts = receipt.New(receiptsTopic, p)
	}
}

// notifyMsgs publishes a carrier-style Notification task carrying messages
// of the given seqs.
func (e *env) notifyMsgs(uid, platform, provider string, seqs ...int64) {
	e.t.Helper()
	var msgs []*msgpb.Message
	for _, s := range seqs {
		msgs = append(msgs, &msgpb.Message{Seq: s, Options: uint32(msgpb.Option_NEED_NOTIFICATION)})
	}
	v, err := proto.Marshal(&mqpb.Payload{Seq: seqs[0], Timestamp: time.Now().UnixMilli(),
		Body: &mqpb.Payload_Notification{Notification: &mqpb.Notification{Uid: uid, Platform: platform, Provider: provider,
			Msgs: msgs, Content: content()}}})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.producer.Publish(context.Background(), queue.Record{Topic: notifyTopic, Key: uid, Value: v}); err != nil {
		e.t.Fatal(err)
	}
}

// receiptsOf returns the receipts of uid on the receipts topic, in order,
// as "seq uid/platform STATE detail" lines.
func (e *env) receiptsOf(uid string) []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", e.kafka)
	if err != nil {
		e.t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(receiptsTopic)
	_ = conn.Close()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, p := range parts {
		pc, err := kafka.DialLeader(ctx, "tcp", e.kafka, receiptsTopic, p.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		first, last, err := pc.ReadOffsets()
		if err == nil {
			_, err = pc.Seek(first, kafka.SeekAbsolute)
		}
		for off := first; err == nil && off < last; off++ {
			var m kafka.Message
			if m, err = pc.ReadMessage(10 << 20); err != nil {
				break
			}
			var rc receiptpb.Receipt
			if err = proto.Unmarshal(m.Value, &rc); err == nil && rc.GetUid() == uid {
				if string(m.Key) != uid || rc.GetId() != receipt.ID(&rc) || rc.GetAt() == 0 {
					e.t.Fatalf("receipt %v keyed %q: want keyed by uid, with id and time", &rc, m.Key)
				}
				out = append(out, fmt.Sprintf("%d %s/%s %s %s", rc.GetSeq(), rc.GetUid(), rc.GetPlatform(), rc.GetState(), rc.GetDetail()))
			}
		}
		_ = pc.Close()
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

// waitReceipts waits until uid's receipts are want, and fails if they are
// more.
func (e *env) waitReceipts(uid string, want ...string) {
	e.t.Helper()
	tu.WaitFor(e.t, 15*time.Second, func() error {
		if got := e.receiptsOf(uid); !slices.Equal(got, want) {
			return fmt.Errorf("receipts of %s %q, want %q", uid, got, want)
		}
		return nil
	})
}

// A notification the provider accepted reports NOTIFIED per message, once
// per (uid, platform) however many devices got it, with the provider and its
// answer; one the provider refuses for good reports DEAD_LETTERED with the
// answer once it is in the dead-letter topic.
func TestReceiptsOfNotifications(t *testing.T) {
	t.Parallel()
	e := startWith(t, withReceipts(t))
	e.register("ann", "ios", "apns", "ann-phone")
	e.register("ann", "ios", "apns", "ann-pad")
	e.notifyMsgs("ann", "ios", "apns", 1, 2)
	const apnsID = "00000000-0000-0000-0000-000000000001"
	e.waitReceipts("ann", "1 ann/ios NOTIFIED apns 200 "+apnsID, "2 ann/ios NOTIFIED apns 200 "+apnsID)

	e.register("bob", "android", "fcm", "bob-phone")
	e.notifyMsgs("bob", "android", "fcm", 3)
	e.waitReceipts("bob", "3 bob/android NOTIFIED fcm 200 projects/"+e.fcm.ProjectID+"/messages/1")

	e.apns.Respond("cy-phone", horntest.Answer{Status: 400, Reason: "BadTopic"})
	e.register("cy", "ios", "apns", "cy-phone")
	e.notifyMsgs("cy", "ios", "apns", 4)
	e.waitReceipts("cy", "4 cy/ios DEAD_LETTERED apns 400 BadTopic "+apnsID)
	if dead := horntest.ReadTopic(t, e.kafka, deadTopic); len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
}

// When Kafka refuses the receipts the notification is not done: the
// consumer handles it again, so the provider sees it again.
func TestNotificationReceiptsRefusedRetryTheTask(t *testing.T) {
	t.Parallel()
	e := startWith(t, func(c *horn.Config) {
		k := tu.StartKafkaBroker(t, 1, receiptsTopic)
		k.Close()
		p := queue.NewProducer(queue.ProducerConfig{Brokers: []string{k.Addr}, WriteTimeout: 200 * time.Millisecond}, zaptest.NewLogger(t))
		t.Cleanup(func() { _ = p.Close() })
		c.Receipts = receipt.New(receiptsTopic, p)
	})
	e.register("dan", "ios", "apns", "dan-phone")
	e.notifyMsgs("dan", "ios", "apns", 5)
	e.waitRequests(e.apns, "dan-phone", 2)
}
