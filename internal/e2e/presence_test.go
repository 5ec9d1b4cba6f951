package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/presencepb"
)

const presenceTopic = "gomsg.presence"

// withPresence turns presence events on (station publishes them on
// presenceTopic, created with the task topic's partitions).
func withPresence() option {
	return func(c *app.ClusterConfig) { c.Backends.PresenceTopic = presenceTopic }
}

// presenceRecord is one event as a consumer of the topic reads it.
type presenceRecord struct {
	partition int
	ev        *presencepb.Event
}

// presenceOf reads every partition of the presence topic to its end, as a
// backend consuming it would, and returns uid's events in partition order.
func (e *env) presenceOf(uid string) []presenceRecord {
	e.t.Helper()
	if e.nats != nil {
		var out []presenceRecord
		for _, m := range e.natsMessages(presenceTopic) {
			ev := &presencepb.Event{}
			if err := proto.Unmarshal(m.Value, ev); err != nil {
				e.t.Fatal(err)
			}
			if m.Key != ev.GetUid() {
				e.t.Fatalf("presence record keyed %q holds %v, want keyed by its uid", m.Key, ev)
			}
			if ev.GetUid() == uid {
				out = append(out, presenceRecord{partition: m.Partition, ev: ev})
			}
		}
		return out
	}
	conn, err := kafka.Dial("tcp", e.kafka)
	if err != nil {
		e.t.Fatal(err)
	}
	parts, err := conn.ReadPartitions(presenceTopic)
	_ = conn.Close()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []presenceRecord
	for _, p := range parts {
		pc, err := kafka.DialLeader(context.Background(), "tcp", e.kafka, presenceTopic, p.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		end, err := pc.ReadLastOffset()
		_ = pc.Close()
		if err != nil {
			e.t.Fatal(err)
		}
		if end == 0 {
			continue
		}
		rd := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{e.kafka}, Topic: presenceTopic, Partition: p.ID, MaxWait: 100 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		for {
			m, err := rd.ReadMessage(ctx)
			if err != nil {
				cancel()
				_ = rd.Close()
				e.t.Fatalf("read %s partition %d: %v", presenceTopic, p.ID, err)
			}
			ev := &presencepb.Event{}
			if err := proto.Unmarshal(m.Value, ev); err != nil {
				e.t.Fatal(err)
			}
			if string(m.Key) != ev.GetUid() {
				e.t.Fatalf("presence record keyed %q holds %v, want keyed by its uid", m.Key, ev)
			}
			if ev.GetUid() == uid {
				out = append(out, presenceRecord{partition: p.ID, ev: ev})
			}
			if m.Offset+1 >= end {
				break
			}
		}
		cancel()
		_ = rd.Close()
	}
	return out
}

// A device connects, a second device of the same uid and platform kicks it
// out (kick-older), and the second disconnects: a backend consuming the
// presence topic reads, for that uid, CONNECTED (first), KICKED NEW_SESSION
// (first), CONNECTED (second), DISCONNECTED CLOSED (second), in that order,
// from one partition, each once.
func TestPresenceConnectKickDisconnect(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withPresence())
		first := e.connect("pia", "ios", true)
		second := e.connect("pia", "ios", true)
		testutil.WaitFor(t, 15*time.Second, func() error {
			first.mu.Lock()
			defer first.mu.Unlock()
			if first.kickout.GetReason() != msgpb.KickoutReason_NEW_SESSION || !first.ended {
				return fmt.Errorf("first session not kicked out yet (kickout %v, ended %v)", first.kickout, first.ended)
			}
			return nil
		})
		second.Close()

		type step struct {
			kind   presencepb.Kind
			reason presencepb.Reason
			sid    string
		}
		want := []step{
			{presencepb.Kind_CONNECTED, presencepb.Reason_REASON_UNSPECIFIED, first.Sid},
			{presencepb.Kind_KICKED, presencepb.Reason_NEW_SESSION, first.Sid},
			{presencepb.Kind_CONNECTED, presencepb.Reason_REASON_UNSPECIFIED, second.Sid},
			{presencepb.Kind_DISCONNECTED, presencepb.Reason_CLOSED, second.Sid},
		}
		var got []presenceRecord
		testutil.WaitFor(t, 20*time.Second, func() error {
			got = e.presenceOf("pia")
			if len(got) < len(want) {
				return fmt.Errorf("%d presence events of pia, want %d", len(got), len(want))
			}
			return nil
		})
		// The first session's own end report (NEW_SESSION) must add nothing.
		// The boat reports ends in the order sessions ended, and station
		// queues a report's events in order, so an event of it would come
		// before the second's DISCONNECTED, among the four read.
		steps := make([]step, len(got))
		for i, r := range got {
			steps[i] = step{r.ev.GetKind(), r.ev.GetReason(), r.ev.GetSid()}
			if r.partition != got[0].partition {
				t.Fatalf("pia's events on partitions %d and %d, want one", got[0].partition, r.partition)
			}
			if r.ev.GetPlatform() != "ios" || r.ev.GetBoatId() != "boat-1" || r.ev.GetTime() == 0 {
				t.Fatalf("event %v: want platform ios, boat boat-1 and a time", r.ev)
			}
		}
		if !slices.Equal(steps, want) {
			t.Fatalf("pia's presence events:\n%v\nwant\n%v", steps, want)
		}
	})
}
