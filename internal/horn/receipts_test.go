package horn_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
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
// of the given seqs that ask for receipts.
func (e *env) notifyMsgs(uid, platform, provider string, seqs ...int64) {
	e.t.Helper()
	var msgs []*msgpb.Message
	for _, s := range seqs {
		msgs = append(msgs, tracked(s))
	}
	e.notifyOf(uid, platform, provider, msgs...)
}

// tracked is a message to notify that asks for receipts, untracked one
// that does not.
func tracked(seq int64) *msgpb.Message {
	return &msgpb.Message{Seq: seq, Options: uint32(msgpb.Option_NEED_NOTIFICATION | msgpb.Option_NEED_RECEIPTS)}
}

func untracked(seq int64) *msgpb.Message {
	return &msgpb.Message{Seq: seq, Options: uint32(msgpb.Option_NEED_NOTIFICATION)}
}

// notifyOf publishes a carrier-style Notification task carrying msgs.
func (e *env) notifyOf(uid, platform, provider string, msgs ...*msgpb.Message) {
	e.t.Helper()
	v, err := proto.Marshal(&mqpb.Payload{Seq: msgs[0].GetSeq(), Timestamp: time.Now().UnixMilli(),
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

// Only the messages that ask NEED_RECEIPTS report NOTIFIED: a notification
// of messages that do not ask reports nothing, and one that mixes both
// reports the asking ones alone (the user's notifications are handled in
// order, so receipts of the first would show before those of the second).
func TestReceiptsOnlyForNotifiedMessagesThatAskForThem(t *testing.T) {
	t.Parallel()
	e := startWith(t, withReceipts(t))
	e.register("eve", "ios", "apns", "eve-phone")
	e.notifyOf("eve", "ios", "apns", untracked(1), untracked(2))
	e.waitRequests(e.apns, "eve-phone", 1)
	e.notifyOf("eve", "ios", "apns", untracked(3), tracked(4), untracked(5))
	e.waitReceipts("eve", "4 eve/ios NOTIFIED apns 200 00000000-0000-0000-0000-000000000001")
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

// flakyPublisher refuses its first fails calls, then publishes.
type flakyPublisher struct {
	p     *queue.Producer
	mu    sync.Mutex
	fails int
}

func (f *flakyPublisher) Publish(ctx context.Context, recs ...queue.Record) error {
	f.mu.Lock()
	refuse := f.fails > 0
	f.fails--
	f.mu.Unlock()
	if refuse {
		return queue.ErrUnavailable
	}
	return f.p.Publish(ctx, recs...)
}

// Receipts Kafka refuses for a moment after the notification went out are
// tried again in place: the device is notified once, and the receipt comes.
func TestNotificationReceiptsRefusedAMomentNotifyOnce(t *testing.T) {
	t.Parallel()
	e := startWith(t, func(c *horn.Config) {
		p := queue.NewProducer(queue.ProducerConfig{Brokers: c.Brokers}, zaptest.NewLogger(t))
		t.Cleanup(func() { _ = p.Close() })
		c.Receipts = receipt.New(receiptsTopic, &flakyPublisher{p: p, fails: 2})
	})
	e.register("dan", "ios", "apns", "dan-phone")
	e.notifyMsgs("dan", "ios", "apns", 5)
	// The receipt is published by the handling that sent the notification,
	// and only once that handling succeeded: then no other send can come.
	e.waitReceipts("dan", "5 dan/ios NOTIFIED apns 200 00000000-0000-0000-0000-000000000001")
	if n := e.apns.Count("dan-phone"); n != 1 {
		t.Fatalf("dan's phone got %d notifications, want 1", n)
	}
}
