package carrier

import (
	"slices"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// smallTopicBytes is max.message.bytes of the topics createSmallTopic makes:
// a notification of one message with a 2 KB body does not fit.
const smallTopicBytes = 1024

// createSmallTopic creates topic on the harness's broker with one partition
// that refuses records larger than smallTopicBytes.
func (h *harness) createSmallTopic(topic string) {
	h.t.Helper()
	conn, err := kafka.Dial("tcp", h.brokers[0])
	if err != nil {
		h.t.Fatal(err)
	}
	defer conn.Close()
	err = conn.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "1024"}}})
	if err != nil {
		h.t.Fatal(err)
	}
}

// bigMsg is a message whose body alone is larger than smallTopicBytes.
func bigMsg(seq int64, opts ...msgpb.Option) *msgpb.Message {
	m := msg(seq, opts...)
	m.Body, _ = anypb.New(wrapperspb.String(strings.Repeat("x", 2*smallTopicBytes)))
	return m
}

func (h *harness) unwritable(outcome string) int {
	return int(promtest.ToFloat64(h.m.UnwritableRecords.WithLabelValues("carrier", outcome)))
}

// runUnwritable runs the harness's carrier on Kafka and publishes two tasks
// for u1 to the task topic: the first asks for a notification that the
// notify topic refuses as too large, the second only for storage. The second
// is stored once the first is settled: the partition has moved on.
func (h *harness) runUnwritable() {
	h.t.Helper()
	h.run()
	for _, task := range []*mqpb.Payload{
		toUid("u1", []string{"ios"}, bigMsg(1, needOff, msgpb.Option_NEED_NOTIFICATION)),
		toUid("u1", []string{"ios"}, msg(2, needOff)),
	} {
		v, err := proto.Marshal(task)
		if err != nil {
			h.t.Fatal(err)
		}
		if err := h.prod.Publish(h.t.Context(), queue.Record{Topic: taskTopic, Key: "u1", Value: v}); err != nil {
			h.t.Fatal(err)
		}
	}
	testutil.WaitFor(h.t, 20*time.Second, func() error {
		if s := h.stored("u1", "ios"); !slices.Equal(s, []int64{1, 2}) {
			return testutil.Errorf("stored %v, want [1 2]: the task after the one Kafka refuses a record of was not handled", s)
		}
		return nil
	})
}

// A task whose work produces a record Kafka will never take (here its
// notification, larger than the notify topic accepts) is dead-lettered as it
// was consumed, counted, and the partition moves on to the next task; it is
// not retried in place for good.
func TestTaskWithUnwritableRecordIsDeadLettered(t *testing.T) {
	t.Parallel()
	const notify = "t.small-notify"
	h := newHarness(t, "ios:offline=1h/100:notify=log", func(c *Config) { c.NotifyTopic = notify })
	h.createSmallTopic(notify)
	h.runUnwritable()

	dl := h.published(dlqTopic)
	if len(dl) != 1 || dl[0].Key != "u1" {
		t.Fatalf("%d dead letters (%v), want 1 keyed u1", len(dl), dl)
	}
	var d mqpb.DeadLetter
	if err := proto.Unmarshal(dl[0].Value, &d); err != nil {
		t.Fatal(err)
	}
	msgs := d.GetPayload().GetToUid().GetMsgs()
	if len(msgs) != 1 || msgs[0].GetSeq() != 1 || len(msgs[0].GetBody().GetValue()) < 2*smallTopicBytes ||
		!strings.Contains(d.GetReason(), "refused by Kafka") || d.GetDeadAt() == 0 {
		t.Fatalf("dead letter %v, want task 1 with the reason", &d)
	}
	if n := h.published(notify); len(n) != 0 {
		t.Fatalf("%d notifications written", len(n))
	}
	if dead, dropped := h.unwritable(unwritableDeadLettered), h.unwritable(unwritableDropped); dead != 1 || dropped != 0 {
		t.Fatalf("unwritable dead_lettered %d dropped %d, want 1 and 0", dead, dropped)
	}
	if e := h.logged("task dead-lettered: Kafka refuses"); len(e) != 1 {
		t.Fatalf("logged %d dead-letter lines, want 1", len(e))
	}
}

// When the dead-letter topic refuses the task too, it is logged, counted as
// dropped and skipped: the partition still moves on.
func TestTaskWithUnwritableRecordAndDeadLetterIsDropped(t *testing.T) {
	t.Parallel()
	const notify, dead = "t.small-notify", "t.small-dead"
	h := newHarness(t, "ios:offline=1h/100:notify=log", func(c *Config) { c.NotifyTopic, c.DeadLetterTopic = notify, dead })
	h.createSmallTopic(notify)
	h.createSmallTopic(dead)
	h.runUnwritable()

	if dl := h.published(dead); len(dl) != 0 {
		t.Fatalf("%d dead letters written", len(dl))
	}
	if d, dropped := h.unwritable(unwritableDeadLettered), h.unwritable(unwritableDropped); d != 0 || dropped != 1 {
		t.Fatalf("unwritable dead_lettered %d dropped %d, want 0 and 1", d, dropped)
	}
	e := h.logged("task dropped: Kafka refuses")
	if len(e) != 1 || e[0].ContextMap()["key"] != "u1" || e[0].ContextMap()["topic"] != taskTopic {
		t.Fatalf("logged %v, want one line naming the task's key and topic", e)
	}
}
