package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/client"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// pullPlatforms keep up to 1,000 offline messages on ios and web (the
// default keeps 100).
const pullPlatforms = "ios:offline=168h/1000,android,web:offline=72h/1000"

// pushBacklog stores n NEED_OFFLINE messages "<prefix><i>" for uid on
// platform, 100 bodies a push, and returns their seqs in order.
func (e *env) pushBacklog(uid, platform, prefix string, n int) []int64 {
	e.t.Helper()
	var seqs []int64
	for start := 0; start < n; start += 100 {
		var bodies []*anypb.Any
		for i := start; i < min(start+100, n); i++ {
			bodies = append(bodies, text(fmt.Sprint(prefix, i)))
		}
		resp, err := e.push.Push(context.Background(), &pushpb.PushRequest{Uids: []string{uid}, MsgOptions: optOffline,
			PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{platform}}, MsgBodies: bodies})
		if err != nil {
			e.t.Fatalf("push %d messages: %v", len(bodies), err)
		}
		seqs = append(seqs, resp.GetSeqs()...)
	}
	return seqs
}

// dialPull opens a session in pull mode (no replay), reading as dial's.
func (e *env) dialPull(uid, platform string) *device {
	e.t.Helper()
	token, err := auth.Mint(secret, uid, platform, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := client.ConnectPull(ctx, e.boatAddr, token, e.deviceDial...)
	if err != nil {
		e.t.Fatalf("connect %s/%s in pull mode: %v", uid, platform, err)
	}
	d := &device{Device: dc, autoAck: true}
	e.t.Cleanup(dc.Close)
	go d.read()
	return d
}

// pull sends a Pull and waits for its PullResult.
func (d *device) pull(t *testing.T, id int64, limit int32, ack ...int64) *msgpb.PullResult {
	t.Helper()
	if err := d.Pull(id, limit, ack...); err != nil {
		t.Fatalf("send Pull %d: %v", id, err)
	}
	var res *msgpb.PullResult
	testutil.WaitFor(t, 20*time.Second, func() error {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, r := range d.pulls {
			if r.GetId() == id {
				res = r
				return nil
			}
		}
		return fmt.Errorf("no PullResult %d yet", id)
	})
	if err := client.PullError(res); err != nil {
		t.Fatalf("Pull %d: %v", id, err)
	}
	return res
}

// A user offline gets 250 messages; its device connects in pull mode and is
// pushed none of them: it pulls pages of 100, ACKing the page before each
// time, and gets all 250 exactly once, in seq order, more false on the last
// page, the store empty after the last ACK. A message pushed while it pulls
// arrives live, once, and is not in any page.
func TestPullOfflineBacklog(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withPlatforms(pullPlatforms))
		stored := e.pushBacklog("paul", "ios", "old-", 250)
		e.waitZcard("paul", "ios", 250)

		d := e.dialPull("paul", "ios")
		d.waitReady(t)
		if got := d.received(); len(got) != 0 {
			t.Fatalf("pull-mode session was pushed %d messages at connect, want none", len(got))
		}

		var pulled []int64
		var ack []int64
		var live int64
		for id := int64(1); ; id++ {
			res := d.pull(t, id, 100, ack...)
			if len(res.GetMsgs()) > 100 {
				t.Fatalf("page %d holds %d messages, want at most 100", id, len(res.GetMsgs()))
			}
			ack = ack[:0]
			for _, m := range res.GetMsgs() {
				if want := fmt.Sprint("old-", len(pulled)); bodyText(t, m) != want {
					t.Fatalf("pulled message %d is %q, want %q", m.GetSeq(), bodyText(t, m), want)
				}
				pulled = append(pulled, m.GetSeq())
				ack = append(ack, m.GetSeq())
			}
			if id == 1 {
				// A push while the device pulls is delivered live.
				live = e.pushText(&pushpb.PushRequest{Uids: []string{"paul"}, MsgOptions: optAck | optOffline}, "live")
				if got := d.waitCount(t, 1); got[0].GetSeq() != live {
					t.Fatalf("live message %d, want %d", got[0].GetSeq(), live)
				}
			}
			if !res.GetMore() {
				if id != 3 {
					t.Fatalf("more false after page %d, want it on page 3", id)
				}
				break
			}
			if id == 3 {
				t.Fatal("more still set after page 3")
			}
		}
		if !slices.Equal(pulled, stored) {
			t.Fatalf("pulled %d messages %v, want the %d stored once each in order %v", len(pulled), pulled, len(stored), stored)
		}
		if n := e.zcard("paul", "ios"); n != int64(len(ack)) {
			t.Fatalf("%d messages stored before the last ACK, want %d (the last page's)", n, len(ack))
		}
		if res := d.pull(t, 9, 100, ack...); len(res.GetMsgs()) != 0 || res.GetMore() {
			t.Fatalf("pull after the last ACK: %d messages, more %v; want none", len(res.GetMsgs()), res.GetMore())
		}
		e.waitZcard("paul", "ios", 0)
		if got := seqsOf(d); !slices.Equal(got, []int64{live}) {
			t.Fatalf("pushed %v, want only the live %d", got, live)
		}
	})
}

// A pull-mode session takes live messages before its connect's
// SendOfflineToSession task was handled: pushes queued ahead of that task go
// live instead of being refused as not ready — which would store them and
// queue a replay of the whole store, pushing the backlog the device means
// to pull. The backlog stays stored until pulled.
func TestPullModeLiveBeforeReady(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e, px := startHeldCarrier(t, queueOpt, withPlatforms(pullPlatforms))
		stored := e.pushOffline("pia", "web", "stored", 20)
		e.waitZcard("pia", "web", 20)

		px.Hold()
		before := e.pushOffline("pia", "web", "before", 5)
		d := e.dialPull("pia", "web") // its SendOfflineToSession task queues behind `before`
		after := e.pushOffline("pia", "web", "after", 5)
		px.Release()
		d.waitReady(t)
		d.waitCount(t, 10)
		// Tasks of one uid run in order: once this one arrives, any replay
		// task queued by the ones before has run too.
		marker := e.pushText(&pushpb.PushRequest{Uids: []string{"pia"}, MsgOptions: optAck}, "marker")
		d.waitCount(t, 11)
		if got, want := seqsOf(d), slices.Concat(before, after, []int64{marker}); !slices.Equal(got, want) {
			t.Fatalf("pushed %v, want the live ones %v", got, want)
		}
		if n := e.zcard("pia", "web"); n != 20 {
			t.Fatalf("%d stored, want the 20 of the backlog", n)
		}
		res := d.pull(t, 1, 0)
		if got := seqsOfMsgs(res.GetMsgs()); !slices.Equal(got, stored) || res.GetMore() {
			t.Fatalf("pulled %v (more %v), want %v", got, res.GetMore(), stored)
		}
	})
}

// Over WebSocket (?offline=pull) the same, shorter: no replay, pages of 10
// with the previous page's ACK, all 25 once in order, the store empty.
func TestPullOfflineWebSocket(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withWebSocket(), withPlatforms(pullPlatforms))
		stored := e.pushBacklog("wpull", "web", "old-", 25)
		e.waitZcard("wpull", "web", 25)

		token, err := auth.Mint(secret, "wpull", "web", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, e.gomsg.Boat.WSURL()+"?"+boat.WSOfflineParam+"="+boat.OfflinePull, &websocket.DialOptions{
			Subprotocols: []string{boat.WSProto, boat.WSBearerPrefix + token}})
		if err != nil {
			t.Fatalf("websocket dial: %v", err)
		}
		t.Cleanup(func() { _ = c.CloseNow() })
		d := &wsDevice{t: t, c: c}
		if d.recv().GetConnected() == nil {
			t.Fatal("first frame is not Connected")
		}
		if p := d.recv(); p.GetReady() == nil {
			t.Fatalf("frame %v after Connected, want Ready (no replay in pull mode)", p)
		}
		send := func(p *msgpb.ClientPayload) {
			b, _ := proto.Marshal(p)
			if err := c.Write(context.Background(), websocket.MessageBinary, b); err != nil {
				t.Fatalf("websocket write: %v", err)
			}
		}
		var pulled, ack []int64
		for id := int64(1); ; id++ {
			send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Pull{Pull: &msgpb.Pull{Id: id, Limit: 10, Ack: ack}}})
			p := d.recv()
			res := p.GetPullResult()
			if res.GetId() != id || client.PullError(res) != nil {
				t.Fatalf("frame %v, want PullResult %d", p, id)
			}
			ack = seqsOfMsgs(res.GetMsgs())
			pulled = append(pulled, ack...)
			if !res.GetMore() {
				break
			}
			if id == 10 {
				t.Fatalf("more still set after 10 pages of 10, pulled %v", pulled)
			}
		}
		if !slices.Equal(pulled, stored) {
			t.Fatalf("pulled %v, want %v", pulled, stored)
		}
		send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Pull{Pull: &msgpb.Pull{Id: 99, Ack: ack}}})
		if res := d.recv().GetPullResult(); res.GetId() != 99 || len(res.GetMsgs()) != 0 {
			t.Fatalf("last pull: %v, want an empty page", res)
		}
		e.waitZcard("wpull", "web", 0)
	})
}

// A bad offline mode is refused before a session begins: InvalidArgument
// naming the metadata key on gRPC, HTTP 400 before the upgrade on WebSocket.
func TestPullModeBadValueRefused(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withWebSocket())
		token, err := auth.Mint(secret, "bad", "web", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, resp, err := websocket.Dial(ctx, e.gomsg.Boat.WSURL()+"?"+boat.WSOfflineParam+"=pul", &websocket.DialOptions{
			Subprotocols: []string{boat.WSProto, boat.WSBearerPrefix + token}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("websocket dial with offline=pul: %v %v, want HTTP 400", resp, err)
		}
		q := url.Values{boat.WSOfflineParam: {"push"}}
		if _, _, err := websocket.Dial(ctx, e.gomsg.Boat.WSURL()+"?"+q.Encode(), &websocket.DialOptions{
			Subprotocols: []string{boat.WSProto, boat.WSBearerPrefix + token}}); err != nil {
			t.Fatalf("websocket dial with offline=push: %v", err)
		}
		conn, err := grpcx.Dial(e.boatAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		stream, err := msgpb.NewMsgClient(conn).Loop(metadata.AppendToOutgoingContext(ctx,
			"authorization", "Bearer "+token, boat.OfflineModeHeader, "pul"))
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), boat.OfflineModeHeader) {
			t.Fatalf("gRPC connect with a bad mode: %v, want InvalidArgument naming %s", err, boat.OfflineModeHeader)
		}
	})
}
