package e2e

import (
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// One trace runs from the Push API call through the Kafka record to
// carrier's task and the boat's delivery (on carrier's Deliver stream).
func TestTraceFromPushToDelivery(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, queueOpt)
		d := e.connect("tina", "ios", true)
		e.pushText(&pushpb.PushRequest{Uids: []string{"tina"}}, "traced")
		d.waitCount(t, 1)

		want := []string{"gomsg.push.Push/Push", "station.publish", "carrier.task", "boat.deliver"}
		testutil.WaitFor(t, 10*time.Second, func() error {
			// Other tests push too: this test's trace is the one whose carrier
			// span is about tina.
			for _, s := range spans.Ended() {
				if s.Name() != "gomsg.push.Push/Push" || s.SpanKind() != trace.SpanKindServer {
					continue
				}
				id := s.SpanContext().TraceID()
				if hasAll(namesIn(id), want) && carrierSpanFor(id, "tina") {
					return nil
				}
			}
			return fmt.Errorf("no trace holds all of %v for tina's push yet", want)
		})
	})
}

func namesIn(id trace.TraceID) map[string]bool {
	out := map[string]bool{}
	for _, s := range spans.Ended() {
		if s.SpanContext().TraceID() == id {
			out[s.Name()] = true
		}
	}
	return out
}

func carrierSpanFor(id trace.TraceID, uid string) bool {
	for _, s := range spans.Ended() {
		if s.SpanContext().TraceID() != id || s.Name() != "carrier.task" {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == "gomsg.uid" && a.Value.AsString() == uid {
				return true
			}
		}
	}
	return false
}

func hasAll(set map[string]bool, names []string) bool {
	for _, n := range names {
		if !set[n] {
			return false
		}
	}
	return true
}
