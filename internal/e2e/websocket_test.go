package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// withWebSocket turns boat's WebSocket transport on.
func withWebSocket() option {
	return func(c *app.ClusterConfig) { c.Boat.WSAddr = "127.0.0.1:0" }
}

// wsDevice is a device session over a WebSocket with binary frames.
type wsDevice struct {
	t *testing.T
	c *websocket.Conn
}

func (e *env) dialWS(uid, platform string) *wsDevice {
	e.t.Helper()
	token, err := auth.Mint(secret, uid, platform, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, e.gomsg.Boat.WSURL(), &websocket.DialOptions{
		Subprotocols: []string{boat.WSProto, boat.WSBearerPrefix + token}})
	if err != nil {
		e.t.Fatalf("websocket dial: %v", err)
	}
	e.t.Cleanup(func() { _ = c.CloseNow() })
	return &wsDevice{t: e.t, c: c}
}

func (d *wsDevice) recv() *msgpb.ServerPayload {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, data, err := d.c.Read(ctx)
	if err != nil {
		d.t.Fatalf("websocket read: %v", err)
	}
	p := &msgpb.ServerPayload{}
	if err := proto.Unmarshal(data, p); err != nil {
		d.t.Fatal(err)
	}
	return p
}

func (d *wsDevice) ack(seqs ...int64) {
	d.t.Helper()
	b, _ := proto.Marshal(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ack{Ack: &msgpb.Ack{Seqs: seqs}}})
	if err := d.c.Write(context.Background(), websocket.MessageBinary, b); err != nil {
		d.t.Fatalf("websocket write: %v", err)
	}
}

// TestWebSocketDevice: a browser's session over a WebSocket on a whole
// cluster gets its stored messages in order, then Ready, then live ones;
// its ACKs delete what was stored; a second session of the same user and
// platform (here over gRPC) kicks it NEW_SESSION, closed 4101.
func TestWebSocketDevice(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withWebSocket())
		stored := e.pushOffline("wsu", "web", "stored-", 3)
		e.waitZcard("wsu", "web", 3)

		d := e.dialWS("wsu", "web")
		if c := d.recv().GetConnected(); c.GetUid() != "wsu" || c.GetPlatform() != "web" {
			t.Fatalf("first frame %v, want Connected wsu/web", c)
		}
		var got []int64
		for len(got) < len(stored) {
			p := d.recv()
			msgs := p.GetMessages().GetMsgs()
			if msgs == nil {
				t.Fatalf("frame %v before the stored messages", p)
			}
			for _, m := range msgs {
				if want := fmt.Sprint("stored-", len(got)); bodyText(t, m) != want {
					t.Fatalf("message %d body %q, want %q", m.GetSeq(), bodyText(t, m), want)
				}
				got = append(got, m.GetSeq())
			}
			d.ack(seqsOfMsgs(msgs)...)
		}
		if fmt.Sprint(got) != fmt.Sprint(stored) {
			t.Fatalf("replayed %v, want %v", got, stored)
		}
		if p := d.recv(); p.GetReady() == nil {
			t.Fatalf("frame %v after the replay, want Ready", p)
		}
		e.waitZcard("wsu", "web", 0)

		live := e.pushText(&pushpb.PushRequest{Uids: []string{"wsu"}, MsgOptions: optAck | optOffline}, "live")
		p := d.recv()
		if m := p.GetMessages().GetMsgs(); len(m) != 1 || m[0].GetSeq() != live || bodyText(t, m[0]) != "live" {
			t.Fatalf("frame %v, want the live message %d", p, live)
		}
		d.ack(live)

		other := e.connect("wsu", "web", true)
		if k := d.recv().GetKickout(); k.GetReason() != msgpb.KickoutReason_NEW_SESSION {
			t.Fatalf("after a second session: %v, want Kickout NEW_SESSION", k)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, err := d.c.Read(ctx)
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.StatusCode(msgpb.CloseCodeOfKickout(msgpb.KickoutReason_NEW_SESSION)) {
			t.Fatalf("after the kickout: %v, want close 4601", err)
		}
		// The ACKed live message is not stored: nothing reaches the new session.
		if n := e.zcard("wsu", "web"); n != 0 {
			t.Fatalf("%d messages stored after every one was ACKed", n)
		}
		if msgs := other.received(); len(msgs) != 0 {
			t.Fatalf("the new session got %v, want nothing (all ACKed)", msgs)
		}
	})
}

func seqsOfMsgs(msgs []*msgpb.Message) []int64 {
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.GetSeq()
	}
	return out
}
