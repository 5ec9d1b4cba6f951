package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/client"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// A boat is drained and replaced (another id, the same address) while
// NEED_ACK|NEED_OFFLINE pushes go on: the client reconnects at once after the
// SERVER_DRAINING kickout, and its handler gets every message once, in push
// order.
func TestReconnectAcrossBoatRestart(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	var r recorder
	var dups atomic.Int32
	c.run(&r, client.StaticToken(c.token("ann", "ios")), client.WithBackoff(time.Second, 2*time.Second),
		client.WithDuplicateHandler(func(int64) { dups.Add(1) }))
	r.waitState(t, client.Ready, 1)

	const n = 120
	var (
		mu     sync.Mutex
		pushed []int64
	)
	pushErr := make(chan error, 1)
	go func() {
		for i := range n {
			seq, err := c.pushText("ann", "ios", fmt.Sprint("m", i), ackOffline)
			if err != nil {
				pushErr <- err
				return
			}
			mu.Lock()
			pushed = append(pushed, seq)
			mu.Unlock()
		}
		pushErr <- nil
	}()
	testutil.WaitFor(t, 15*time.Second, func() error {
		if got := len(r.handled()); got < n/4 {
			return fmt.Errorf("%d handled before the restart, want %d", got, n/4)
		}
		return nil
	})
	c.stopBoat()
	c.startBoat("boat-b")
	if err := <-pushErr; err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if got := len(r.handled()); got < n {
			return fmt.Errorf("%d handled, want %d", got, n)
		}
		return nil
	})
	if got := r.handled(); !slices.Equal(got, pushed) {
		t.Fatalf("handled %d seqs %v,\nwant the %d pushed, once each, in order: %v", len(got), got, len(pushed), pushed)
	}
	// The drain was followed by a connect at once, not after the backoff.
	ch := r.changes()
	i := slices.IndexFunc(ch, func(s stamped) bool { return s.State == client.Disconnected })
	var ke *client.KickoutError
	if i < 0 || !errors.As(ch[i].Err, &ke) || ke.Reason != msgpb.KickoutReason_SERVER_DRAINING {
		t.Fatalf("first disconnect %+v, want a SERVER_DRAINING kickout (changes %v)", ch[i], ch)
	}
	if ch[i].RetryIn != 0 || i+1 >= len(ch) || ch[i+1].State != client.Connecting || ch[i+1].at.Sub(ch[i].at) > 300*time.Millisecond {
		t.Fatalf("after SERVER_DRAINING: %+v then %+v, want Connecting at once", ch[i], ch[min(i+1, len(ch)-1)])
	}
	r.waitState(t, client.Ready, 2) // one per boat
	t.Logf("%d messages, %d duplicates dropped", n, dups.Load())
}

// The TokenSource is called again for every connect and its new token is
// the one used: the second token alone allows room "second".
func TestTokenRefreshedOnReconnect(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	var r recorder
	var calls atomic.Int32
	tokens := func(context.Context) (string, error) {
		n := calls.Add(1)
		return c.token("tom", "web", fmt.Sprint("room-", n)), nil
	}
	cl := c.run(&r, tokens)
	r.waitState(t, client.Ready, 1)
	ctx := context.Background()
	if err := cl.JoinRoom(ctx, "room-1"); err != nil {
		t.Fatalf("join room-1 with the first token: %v", err)
	}
	if _, err := c.push.Kickout(ctx, &pushpb.KickoutRequest{Uid: "tom"}); err != nil {
		t.Fatal(err)
	}
	r.waitState(t, client.Ready, 2)
	if got := r.tokenCalls(); got != 2 {
		t.Fatalf("TokenSource called %d times for two connects", got)
	}
	if err := cl.JoinRoom(ctx, "room-2"); err != nil {
		t.Fatalf("join room-2 after the reconnect: %v (the new token was not used)", err)
	}
	// room-1 was joined again with the new token, which does not allow it.
	err := cl.JoinRoom(ctx, "room-1")
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("join room-1 with the second token: %v, want PermissionDenied", err)
	}
}

// A second client of the same uid and platform (station kicks older
// sessions) ends the first for good: Run returns ErrNewSession and the
// client does not connect again.
func TestNewSessionStopsForGood(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	var first, second recorder
	r1 := c.run(&first, client.StaticToken(c.token("nia", "android")))
	first.waitState(t, client.Ready, 1)
	c.run(&second, client.StaticToken(c.token("nia", "android")))
	err := r1.wait(t)
	if !errors.Is(err, client.ErrNewSession) {
		t.Fatalf("first client's Run: %v, want ErrNewSession", err)
	}
	if !strings.Contains(err.Error(), "NEW_SESSION") {
		t.Fatalf("error %q does not name NEW_SESSION", err)
	}
	if got := first.tokenCalls(); got != 1 {
		t.Fatalf("first client connected %d times", got)
	}
	ch := first.changes()
	if last := ch[len(ch)-1]; last.State != client.Closed || !errors.Is(last.Err, client.ErrNewSession) {
		t.Fatalf("last change %+v, want Closed with ErrNewSession", last)
	}
	second.waitState(t, client.Ready, 1)
	if second.count(client.Disconnected) != 0 {
		t.Fatalf("second client was disconnected: %v", second.changes())
	}
}

// A token the server refuses is followed at once by a connect with a fresh
// token from the TokenSource; refused again, Run ends with Unauthenticated
// (close code 4516, stop range).
func TestInvalidTokenStops(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	var r recorder
	rn := c.run(&r, client.StaticToken("not-a-token"), client.WithBackoff(time.Minute, time.Minute))
	err := rn.wait(t)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "Unauthenticated") {
		t.Fatalf("Run: %v, want Unauthenticated", err)
	}
	if got := r.tokenCalls(); got != 2 {
		t.Fatalf("TokenSource called %d times, want 2 (one retry with a fresh token)", got)
	}
	ch := r.changes()
	if i := slices.IndexFunc(ch, func(s stamped) bool { return s.State == client.Disconnected }); i < 0 ||
		ch[i].RetryIn != 0 || ch[i].CloseCode != 4516 {
		t.Fatalf("changes %v, want a Disconnected with close code 4516 and a retry at once", ch)
	}
	if last := ch[len(ch)-1]; last.State != client.Closed || last.CloseCode != 4516 {
		t.Fatalf("last change %+v, want Closed with close code 4516", last)
	}
}

// A refused token is retried at once with the TokenSource's next token,
// which the server takes: the client connects.
func TestRefusedTokenRetriedWithFreshToken(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	var r recorder
	var calls atomic.Int32
	tokens := func(context.Context) (string, error) {
		if calls.Add(1) == 1 {
			return "expired-token", nil
		}
		return c.token("fay", "web"), nil
	}
	c.run(&r, tokens, client.WithBackoff(time.Minute, time.Minute))
	r.waitState(t, client.Ready, 1)
	if got := r.tokenCalls(); got != 2 {
		t.Fatalf("TokenSource called %d times, want 2", got)
	}
}

// A token naming a platform the cluster does not know is refused
// InvalidArgument (close code 4503, stop range): Run ends at once instead of
// retrying forever, and the first failure is told by a Closed state.
func TestInvalidArgumentStops(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	var r recorder
	rn := c.run(&r, client.StaticToken(c.token("tia", "tv")), client.WithBackoff(10*time.Millisecond, 10*time.Millisecond))
	err := rn.wait(t)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "platform") {
		t.Fatalf("Run: %v, want InvalidArgument naming the platform", err)
	}
	if got := r.tokenCalls(); got != 1 {
		t.Fatalf("TokenSource called %d times, want 1", got)
	}
	if ch := r.changes(); len(ch) != 2 || ch[1].State != client.Closed || ch[1].CloseCode != 4503 {
		t.Fatalf("changes %v, want Connecting then Closed with close code 4503", ch)
	}
}

// A kickout by request (Push API) is followed by a reconnect after the
// backoff; the room joined before is joined again.
func TestKickByRequestBacksOffAndRejoins(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	var r recorder
	const minWait = 400 * time.Millisecond
	cl := c.run(&r, client.StaticToken(c.token("kim", "web", "lobby")), client.WithBackoff(minWait, 2*minWait))
	r.waitState(t, client.Ready, 1)
	ctx := context.Background()
	if err := cl.JoinRoom(ctx, "lobby"); err != nil {
		t.Fatal(err)
	}
	first, _ := cl.Session()
	if _, err := c.push.Kickout(ctx, &pushpb.KickoutRequest{Uid: "kim"}); err != nil {
		t.Fatal(err)
	}
	r.waitState(t, client.Ready, 2)
	ch := r.changes()
	i := slices.IndexFunc(ch, func(s stamped) bool { return s.State == client.Disconnected })
	var ke *client.KickoutError
	if !errors.As(ch[i].Err, &ke) || ke.Reason != msgpb.KickoutReason_BY_REQUEST {
		t.Fatalf("disconnect %+v, want a BY_REQUEST kickout", ch[i])
	}
	if ch[i].RetryIn < minWait/2 || ch[i].RetryIn > minWait {
		t.Fatalf("retry in %s after BY_REQUEST, want [%s, %s]", ch[i].RetryIn, minWait/2, minWait)
	}
	if gap := ch[i+1].at.Sub(ch[i].at); ch[i+1].State != client.Connecting || gap < ch[i].RetryIn {
		t.Fatalf("%s after %s, want Connecting after %s", ch[i+1].State, gap, ch[i].RetryIn)
	}
	second, _ := cl.Session()
	if second.Sid == first.Sid || second.UID != "kim" || second.Platform != "web" {
		t.Fatalf("sessions %+v then %+v", first, second)
	}
	// The new session is in the room.
	testutil.WaitFor(t, 10*time.Second, func() error {
		resp, err := c.push.RoomOnline(ctx, &pushpb.RoomOnlineRequest{Room: "lobby"})
		if err != nil || resp.GetMembers() != 1 {
			return fmt.Errorf("lobby online %v: %v", resp, err)
		}
		return nil
	})
	body := textBody("hello lobby")
	if _, err := c.push.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: []string{"lobby"}, MsgBodies: body}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !slices.Equal(r.room["lobby"], []string{"hello lobby"}) {
			return fmt.Errorf("lobby messages %q", r.room["lobby"])
		}
		return nil
	})
}

// A handler slower than the ack wait gets its session kicked (ACK_TIMEOUT);
// the message, stored offline, comes again on the next session: it is not
// passed to the handler again, and it is ACKed, which empties the store.
func TestDuplicateReachesHandlerOnce(t *testing.T) {
	t.Parallel()
	c := startCluster(t, func(cfg *app.ClusterConfig) { cfg.Carrier.AckWait = 300 * time.Millisecond })
	var r recorder
	var dups sync.Map
	var calls atomic.Int32
	r.handler = func(ctx context.Context, m *msgpb.Message) error {
		if calls.Add(1) > 1 {
			return nil
		}
		// Hold the first message until the boat gave up waiting for its ACK.
		deadline := time.Now().Add(10 * time.Second)
		for promtest.ToFloat64(c.boat.Metrics.Kickouts.WithLabelValues("ACK_TIMEOUT")) < 1 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}
	c.run(&r, client.StaticToken(c.token("dee", "ios")), client.WithDuplicateHandler(func(seq int64) { dups.Store(seq, true) }))
	r.waitState(t, client.Ready, 1)
	seq := c.mustPush("dee", "ios", "once", ackOffline)
	r.waitState(t, client.Ready, 2)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := c.stored("dee", "ios"); n != 0 {
			return fmt.Errorf("%d messages still stored: the message coming again was not ACKed", n)
		}
		return nil
	})
	if got := r.handled(); !slices.Equal(got, []int64{seq}) {
		t.Fatalf("handled %v, want [%d] once", got, seq)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times", n)
	}
	// It did come again (the test is not passing for want of a duplicate).
	if _, ok := dups.Load(seq); !ok {
		t.Fatalf("message %d not delivered again", seq)
	}
}

// A handler error leaves the message unACKed and ends the session; the
// message comes again and the handler sees the messages in push order.
func TestHandlerErrorRedelivers(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	var r recorder
	var failed atomic.Bool
	r.handler = func(ctx context.Context, m *msgpb.Message) error {
		var s wrapperspb.StringValue
		if err := m.GetBody().UnmarshalTo(&s); err != nil {
			return err
		}
		if s.GetValue() == "1" && !failed.Swap(true) { // the second message fails once
			return errors.New("disk full")
		}
		return nil
	}
	c.run(&r, client.StaticToken(c.token("hal", "web")))
	r.waitState(t, client.Ready, 1)
	var seqs []int64
	for i := range 3 {
		seqs = append(seqs, c.mustPush("hal", "web", fmt.Sprint(i), ackOffline))
	}
	testutil.WaitFor(t, 15*time.Second, func() error {
		if got := r.handled(); !slices.Equal(got, seqs) {
			return fmt.Errorf("handled %v, want %v", got, seqs)
		}
		return nil
	})
	var he *client.HandlerError
	ch := r.changes()
	i := slices.IndexFunc(ch, func(s stamped) bool { return s.State == client.Disconnected })
	if !failed.Load() || i < 0 || !errors.As(ch[i].Err, &he) || he.Seq != seqs[1] {
		t.Fatalf("changes %v, want a disconnect for the handler error on %d", ch, seqs[1])
	}
}

// After Close, Run returns and nothing of the client is left running. Not
// parallel: other tests' clients would be counted.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	c := startCluster(t)
	// A first session makes the cluster's own connections (boat to
	// station, …), which stay.
	var warm recorder
	rw := c.run(&warm, client.StaticToken(c.token("gus", "web")))
	warm.waitState(t, client.Ready, 1)
	_ = rw.Close()
	_ = rw.wait(t)
	var before []string
	testutil.WaitFor(t, 5*time.Second, func() error {
		before = clientGoroutines()
		if g := clientGoroutines(); len(g) != len(before) {
			return fmt.Errorf("goroutines still changing")
		}
		return nil
	})

	var r recorder
	rn := c.run(&r, client.StaticToken(c.token("gus", "web")))
	r.waitState(t, client.Ready, 1)
	if len(clientGoroutines()) <= len(before) {
		t.Fatal("no client goroutine seen while connected: the count is not measuring the client")
	}
	_ = rn.Close()
	if err := rn.wait(t); err != nil {
		t.Fatalf("Run after Close: %v", err)
	}
	if ch := r.changes(); ch[len(ch)-1].State != client.Closed {
		t.Fatal("last change is not Closed")
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if g := clientGoroutines(); len(g) > len(before) {
			return fmt.Errorf("%d client goroutines, %d before:\n%s", len(g), len(before), strings.Join(g, "\n\n"))
		}
		return nil
	})
	if err := rn.Run(context.Background()); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("second Run: %v, want ErrClosed", err)
	}
}

// clientGoroutines are the stacks of the goroutines of gRPC client
// connections and of package client.
func clientGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "gomsg/gomsg/client.") || strings.Contains(g, "transport.(*http2Client)") ||
			strings.Contains(g, "grpc.(*ccBalancerWrapper)") || strings.Contains(g, "grpc.(*addrConn)") {
			out = append(out, g)
		}
	}
	return out
}
