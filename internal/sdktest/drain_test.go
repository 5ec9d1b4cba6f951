package sdktest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/client"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// TestDrainBacklogPullAndReplay drains two backlogs of 5,000 stored
// messages, one replayed at connect, one pulled 100 a Pull: each reaches the
// application exactly once and leaves the store empty. It logs how long each
// took (go test -run TestDrainBacklogPullAndReplay -v ./client).
func TestDrainBacklogPullAndReplay(t *testing.T) {
	t.Parallel()
	c := startCluster(t, func(cfg *app.ClusterConfig) {
		p := platform.MustParse("ios:offline=168h/20000,android,web")
		cfg.Station.Station.Platforms, cfg.Carrier.Platforms = p, p
	})
	const n = 5000
	for _, uid := range []string{"rep", "pul"} {
		for s := 0; s < n; s += 100 {
			var bodies []*anypb.Any
			for i := s; i < s+100; i++ {
				bodies = append(bodies, textBody(fmt.Sprint("m", i))...)
			}
			if _, err := c.push.Push(context.Background(), &pushpb.PushRequest{Uids: []string{uid}, MsgBodies: bodies,
				MsgOptions: uint32(msgpb.Option_NEED_OFFLINE), PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.WaitFor(t, 30*time.Second, func() error {
		if a, b := c.stored("rep", "ios"), c.stored("pul", "ios"); a != n || b != n {
			return fmt.Errorf("stored %d and %d, want %d each", a, b, n)
		}
		return nil
	})
	start := time.Now()
	r := &recorder{}
	c.run(r, client.StaticToken(c.token("rep", "ios")))
	r.waitState(t, client.Ready, 1)
	replay := time.Since(start)
	if h := r.handled(); len(h) != n || !slices.IsSorted(h) {
		t.Fatalf("replay handled %d messages, want %d once each, in order", len(h), n)
	}
	if left := c.stored("rep", "ios"); left != 0 {
		t.Fatalf("%d left stored after the replay", left)
	}
	start = time.Now()
	r2 := &recorder{}
	rn := c.run(r2, client.StaticToken(c.token("pul", "ios")), client.WithPullOffline())
	ctx := context.Background()
	var ack, got []int64
	for {
		msgs, more, err := rn.Pull(ctx, 100, ack)
		if err != nil {
			t.Fatal(err)
		}
		ack = ack[:0]
		for _, m := range msgs {
			ack = append(ack, m.GetSeq())
		}
		got = append(got, ack...)
		if !more {
			break
		}
	}
	if _, _, err := rn.Pull(ctx, 0, ack); err != nil {
		t.Fatal(err)
	}
	pull := time.Since(start)
	if len(got) != n || !slices.IsSorted(got) || c.stored("pul", "ios") != 0 || len(r2.handled()) != 0 {
		t.Fatalf("pulled %d messages (sorted %v), %d left stored, %d pushed; want %d once each in order, none left or pushed",
			len(got), slices.IsSorted(got), c.stored("pul", "ios"), len(r2.handled()), n)
	}
	t.Logf("%d stored messages, Go SDK: replay (connect to Ready: pages of 50 pushed, ACKed, deleted) %s; pull (connect to last ACK, pages of 100) %s", n, replay, pull)
}
