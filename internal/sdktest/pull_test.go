package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/client"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// A client in pull mode is pushed none of its 120 stored messages: it pulls
// them in pages of 50 (a boat restart in between: the Pull waits for the
// next session and goes on), each once and in order, while a live message
// reaches the handler; the last ACK empties the store. Bad ACKs are refused.
func TestPullOffline(t *testing.T) {
	t.Parallel()
	c := startCluster(t, func(cfg *app.ClusterConfig) {
		p := platform.MustParse("ios:offline=168h/1000,android,web")
		cfg.Station.Station.Platforms, cfg.Carrier.Platforms = p, p
	})
	var stored []int64
	for start := 0; start < 120; start += 60 {
		var bodies []*anypb.Any
		for i := start; i < start+60; i++ {
			bodies = append(bodies, textBody(fmt.Sprint("old-", i))...)
		}
		resp, err := c.push.Push(context.Background(), &pushpb.PushRequest{Uids: []string{"sue"}, MsgBodies: bodies,
			MsgOptions: uint32(msgpb.Option_NEED_OFFLINE), PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}}})
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, resp.GetSeqs()...)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if n := c.stored("sue", "ios"); n != 120 {
			return fmt.Errorf("%d stored, want 120", n)
		}
		return nil
	})

	r := &recorder{}
	rn := c.run(r, client.StaticToken(c.token("sue", "ios")), client.WithPullOffline())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var pulled, ack []int64
	for page := 1; ; page++ {
		msgs, more, err := rn.Pull(ctx, 50, ack)
		if err != nil {
			t.Fatalf("pull page %d: %v", page, err)
		}
		ack = ack[:0]
		for _, m := range msgs {
			pulled = append(pulled, m.GetSeq())
			ack = append(ack, m.GetSeq())
		}
		if page == 1 {
			live := c.mustPush("sue", "ios", "live", ackOffline)
			testutil.WaitFor(t, 20*time.Second, func() error {
				if h := r.handled(); !slices.Equal(h, []int64{live}) {
					return fmt.Errorf("handled %v, want the live %d", h, live)
				}
				return nil
			})
			c.stopBoat()
			c.startBoat("boat-b")
		}
		if !more {
			break
		}
		if page == 5 {
			t.Fatalf("more still set after 5 pages of 50")
		}
	}
	if !slices.Equal(pulled, stored) {
		t.Fatalf("pulled %d messages, want the %d stored once each, in order", len(pulled), len(stored))
	}
	if msgs, more, err := rn.Pull(ctx, 0, ack); err != nil || len(msgs) != 0 || more {
		t.Fatalf("last pull: %d messages, more %v, %v; want none", len(msgs), more, err)
	}
	if n := c.stored("sue", "ios"); n != 0 {
		t.Fatalf("%d left stored after the last ACK, want 0", n)
	}
	if len(r.handled()) != 1 {
		t.Fatalf("handler got %v, want only the live message", r.handled())
	}
	if _, _, err := rn.Pull(ctx, 0, []int64{0}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("pull acking seq 0: %v, want InvalidArgument", err)
	}
	if _, _, err := rn.Pull(ctx, 0, make([]int64, client.MaxPullAck+1)); err == nil {
		t.Fatal("pull acking too many seqs: no error")
	}
}

// A Pull ACKing MaxPullAck seqs while the client holds ACKs of its own
// (stored messages it had ACKed otherwise, here with Ack) is taken: the server is sent at most
// MaxPullAck, and the held ACK goes with the next Pull.
func TestPullFullAckWithHeldAcks(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	stored := c.storeOffline("ned", "ios", 3)
	rn := c.run(&recorder{}, client.StaticToken(c.token("ned", "ios")), client.WithPullOffline(), client.WithManualAck())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// An Ack makes the client hold the message's ACK for a Pull: the page
	// leaves it out.
	if err := rn.Ack(stored[0]); err != nil {
		t.Fatal(err)
	}
	msgs, _, err := rn.Pull(ctx, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(msgs); !slices.Equal(got, stored[1:]) {
		t.Fatalf("first page %v, want %v (the one ACKed before left out)", got, stored[1:])
	}
	full := make([]int64, client.MaxPullAck)
	for i := range full {
		full[i] = int64(i + 1) // none of them stored: the server ignores them
	}
	msgs, _, err = rn.Pull(ctx, 100, full)
	if err != nil {
		t.Fatalf("pull acking %d seqs with one held: %v", len(full), err)
	}
	if got, n := seqsOf(msgs), c.stored("ned", "ios"); !slices.Equal(got, stored[1:]) || n != 3 {
		t.Fatalf("second page %v with %d stored, want %v with 3 (the held ACK not sent yet)", got, n, stored[1:])
	}
	msgs, _, err = rn.Pull(ctx, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, n := seqsOf(msgs), c.stored("ned", "ios"); !slices.Equal(got, stored[1:]) || n != 2 {
		t.Fatalf("third page %v with %d stored, want %v with 2 (the held ACK went with it)", got, n, stored[1:])
	}
}

func seqsOf(msgs []*msgpb.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.GetSeq()
	}
	return out
}

// A Pull whose ctx ends right after it was sent, followed at once by
// another: the second waits for the first's answer and is served (not
// refused RESOURCE_EXHAUSTED). A Pull whose ctx ended before it was sent
// keeps its ACKs for the next Pull, which applies them.
func TestPullAfterCancelledPull(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	stored := c.storeOffline("pat", "ios", 4)
	gone := &cancels{match: func(p *msgpb.ClientPayload) bool { return p.GetPull() != nil }}
	rn := c.run(&recorder{}, client.StaticToken(c.token("pat", "ios")), client.WithPullOffline(), sendHook(gone.sent))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		if _, _, err := rn.Pull(gone.arm(ctx), 1, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: the cancelled Pull: %v, want context.Canceled", i, err)
		}
		msgs, _, err := rn.Pull(ctx, 1, nil)
		if err != nil {
			t.Fatalf("round %d: Pull right after a cancelled one: %v", i, err)
		}
		if got := seqsOf(msgs); !slices.Equal(got, stored[:1]) {
			t.Fatalf("round %d: page %v, want %v", i, got, stored[:1])
		}
	}
	// ACKs given to a Pull that could not be sent go with the next.
	done, stop := context.WithCancel(ctx)
	stop()
	if _, _, err := rn.Pull(done, 10, stored[:2]); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pull with an ended ctx: %v, want context.Canceled", err)
	}
	msgs, _, err := rn.Pull(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(msgs); !slices.Equal(got, stored[2:]) {
		t.Fatalf("page %v after ACKing %v with a Pull whose ctx had ended, want %v", got, stored[:2], stored[2:])
	}
}

// A loop draining a backlog page by page outruns the session's request
// rate: the boat refuses the Pulls past it, and the SDK sends each again
// after a wait instead of failing it, so the loop gets every message, in
// order, with no error.
func TestPullLoopIsPacedToTheRequestRate(t *testing.T) {
	t.Parallel()
	c := startCluster(t, func(cfg *app.ClusterConfig) {
		cfg.Boat.SessionRequestRate, cfg.Boat.SessionRequestBurst = 20, 2
	})
	stored := c.storeOffline("quin", "ios", 12)
	rn := c.run(&recorder{}, client.StaticToken(c.token("quin", "ios")), client.WithPullOffline())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got, ack []int64
	for {
		msgs, more, err := rn.Pull(ctx, 1, ack)
		if err != nil {
			t.Fatalf("Pull after %v: %v", got, err)
		}
		ack = seqsOf(msgs)
		got = append(got, ack...)
		if !more {
			break
		}
	}
	if _, _, err := rn.Pull(ctx, 0, ack); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, stored) {
		t.Fatalf("pulled %v, want %v", got, stored)
	}
	if n := promtest.ToFloat64(c.boat.Metrics.LimitRejections.WithLabelValues("session_request_rate")); n < 1 {
		t.Fatalf("the boat refused %v Pulls for the rate: the loop never outran it, so nothing was paced", n)
	}
	if left := c.rdb.ZCard(ctx, "msg/u:quin/p:ios/oms").Val(); left != 0 {
		t.Fatalf("%d still stored after the last ACK", left)
	}
}
