package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/app"
	tu "github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// TestFencedStationAndBoatRefuse: station and boat reach etcd through a
// proxy; once it is cut, and within the lease TTL, station's Push answers
// Unavailable and publishes nothing, and boat refuses new sessions with
// Unavailable. When etcd is reachable again, both work again.
func TestFencedStationAndBoatRefuse(t *testing.T) {
	eachQueue(t, func(t *testing.T, queueOpt option) {
		var px *tu.Proxy
		e := start(t, queueOpt, func(c *app.ClusterConfig) {
			px = tu.StartProxy(t, c.Backends.EtcdEndpoints[0])
			c.Backends.EtcdEndpoints = []string{px.Addr()}
			c.Station.Station.LeaseTTL = 3 * time.Second
			c.Boat.LeaseTTL = 3 * time.Second
		})
		e.dial("alice", "ios", true)
		e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}}, "before")

		px.Cut()
		cut := time.Now()
		req := &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: []*anypb.Any{text("fenced")}}
		tu.WaitFor(t, 3*time.Second, func() error {
			_, err := e.push.Push(context.Background(), req)
			if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "node id claim lapsed") {
				return tu.Errorf("push %s after the cut: %v", time.Since(cut), err)
			}
			return nil
		})
		// Fenced: a refused push publishes nothing.
		before := e.topicRecords()
		if _, err := e.push.Push(context.Background(), req); status.Code(err) != codes.Unavailable {
			t.Fatalf("push while fenced: %v, want Unavailable", err)
		}
		if after := e.topicRecords(); after != before {
			t.Fatalf("a refused push published %d task records", after-before)
		}
		tu.WaitFor(t, 3*time.Second, func() error {
			_, err := e.tryDial("bob", "ios", true)
			if err == nil || !strings.Contains(err.Error(), "boat's node id claim lapsed") || !strings.Contains(err.Error(), codes.Unavailable.String()) {
				return tu.Errorf("connect %s after the cut: %v", time.Since(cut), err)
			}
			return nil
		})

		px.Restore()
		tu.WaitFor(t, 30*time.Second, func() error {
			_, err := e.push.Push(context.Background(), req)
			return err
		})
		tu.WaitFor(t, 30*time.Second, func() error {
			_, err := e.tryDial("bob", "ios", true)
			return err
		})
	})
}
