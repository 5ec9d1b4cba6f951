package boat

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// wsBoat runs a boat with its WebSocket transport on.
func wsBoat(t *testing.T, edit func(*Config)) *testBoat {
	t.Helper()
	return startBoat(t, nil, func(c *Config) {
		c.WSAddr = "127.0.0.1:0"
		if edit != nil {
			edit(c)
		}
	})
}

// wsClient is one device session over a WebSocket.
type wsClient struct {
	t    *testing.T
	c    *websocket.Conn
	json bool
	sid  string
}

// wsDial opens a WebSocket to tb with the subprotocols offered (the token
// rides in one of them) and headers.
func wsDial(t *testing.T, tb *testBoat, protocols []string, h http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws://"+tb.WSAddr()+WSPath, &websocket.DialOptions{Subprotocols: protocols, HTTPHeader: h})
	if err == nil {
		t.Cleanup(func() { _ = c.CloseNow() })
	}
	return c, resp, err
}

// wsConnect connects with token over format (WSProto or WSJSON) and reads
// Connected.
func wsConnect(t *testing.T, tb *testBoat, format, token string) *wsClient {
	t.Helper()
	c, _, err := wsDial(t, tb, []string{format, WSBearerPrefix + token}, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	if c.Subprotocol() != format {
		t.Fatalf("subprotocol %q, want %q", c.Subprotocol(), format)
	}
	w := &wsClient{t: t, c: c, json: format == WSJSON}
	p, err := w.recv()
	if err != nil {
		t.Fatalf("first frame: %v", err)
	}
	if p.GetConnected() == nil {
		t.Fatalf("first frame %v, want Connected", p)
	}
	w.sid = p.GetConnected().GetSid()
	return w
}

func (w *wsClient) recv() (*msgpb.ServerPayload, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	typ, data, err := w.c.Read(ctx)
	if err != nil {
		return nil, err
	}
	p := &msgpb.ServerPayload{}
	if w.json {
		if typ != websocket.MessageText {
			w.t.Fatalf("frame type %v on %s", typ, WSJSON)
		}
		return p, protojson.Unmarshal(data, p)
	}
	if typ != websocket.MessageBinary {
		w.t.Fatalf("frame type %v on %s", typ, WSProto)
	}
	return p, proto.Unmarshal(data, p)
}

func (w *wsClient) send(p *msgpb.ClientPayload) {
	w.t.Helper()
	var b []byte
	var err error
	typ := websocket.MessageBinary
	if w.json {
		b, err = protojson.Marshal(p)
		typ = websocket.MessageText
	} else {
		b, err = proto.Marshal(p)
	}
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.c.Write(context.Background(), typ, b); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

// closeCode reads until the server closes and returns its close status.
func (w *wsClient) closeCode() (websocket.StatusCode, string) {
	w.t.Helper()
	return readClose(w.t, w.c)
}

func readClose(t *testing.T, c *websocket.Conn) (websocket.StatusCode, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("read ended with %v, want a close frame", err)
		}
		return ce.Code, ce.Reason
	}
}

// TestWebSocketSession: a session over a WebSocket is a session like the
// gRPC stream's: Connected first, messages delivered and ACKed (the ACK is
// what PushMessages answers), pings answered, a kickout sent as the last
// frame before its close code; both frame formats.
func TestWebSocketSession(t *testing.T) {
	t.Parallel()
	tb := wsBoat(t, nil)
	for _, format := range []string{WSProto, WSJSON} {
		t.Run(format, func(t *testing.T) {
			w := wsConnect(t, tb, format, "u-"+format+"/web")
			if s := tb.sessions.get(w.sid); s == nil || s.uid != "u-"+format || s.platform != "web" {
				t.Fatalf("session %s not held as u-%s on web", w.sid, format)
			}
			body, _ := structpb.NewStruct(map[string]any{"text": "hi"})
			anyBody, _ := anypb.New(body)
			msgs := []*msgpb.Message{
				{Seq: 11, Options: uint32(msgpb.Option_NEED_ACK), Body: textBody("one")},
				{Seq: 12, Options: uint32(msgpb.Option_NEED_ACK), Body: anyBody},
			}
			acked := make(chan []int64, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				resp, err := tb.unary.PushMessages(ctx, &boatpb.PushMessagesRequest{Sid: w.sid, Replay: true,
					AckWait: durationpb.New(5 * time.Second), Msgs: msgs})
				if err != nil {
					t.Errorf("push: %v", err)
				}
				acked <- resp.GetAckedSeqs()
			}()
			p, err := w.recv()
			if err != nil {
				t.Fatal(err)
			}
			got := p.GetMessages().GetMsgs()
			if len(got) != 2 || !proto.Equal(got[0], msgs[0]) || !proto.Equal(got[1], msgs[1]) {
				t.Fatalf("messages %v, want %v", got, msgs)
			}
			w.send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ack{Ack: &msgpb.Ack{Seqs: []int64{11, 12}}}})
			if a := <-acked; len(a) != 2 || a[0] != 11 || a[1] != 12 {
				t.Fatalf("acked %v, want [11 12]", a)
			}
			w.send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ping{Ping: &msgpb.Ping{Id: 7}}})
			if p, err := w.recv(); err != nil || p.GetPong().GetId() != 7 {
				t.Fatalf("after ping: %v %v, want Pong 7", p, err)
			}
			if _, err := tb.unary.Kickout(context.Background(), &boatpb.KickoutRequest{Sid: w.sid,
				Reason: msgpb.KickoutReason_NEW_SESSION}); err != nil {
				t.Fatal(err)
			}
			if p, err := w.recv(); err != nil || p.GetKickout().GetReason() != msgpb.KickoutReason_NEW_SESSION {
				t.Fatalf("after kick: %v %v, want Kickout NEW_SESSION", p, err)
			}
			if code, reason := w.closeCode(); code != 4601 || !strings.HasPrefix(reason, "NEW_SESSION") {
				t.Fatalf("close %d %q, want 4601 NEW_SESSION", code, reason)
			}
			testutil.WaitFor(t, 5*time.Second, func() error {
				if tb.sessions.get(w.sid) != nil {
					return testutil.Errorf("session %s still held", w.sid)
				}
				return nil
			})
		})
	}
}

// TestWebSocketJSONUnknownBody: a body whose type the boat does not know goes
// in JSON frames as a BytesValue holding the serialized Any, nothing lost.
func TestWebSocketJSONUnknownBody(t *testing.T) {
	t.Parallel()
	tb := wsBoat(t, nil)
	w := wsConnect(t, tb, WSJSON, "j/web")
	unknown := &anypb.Any{TypeUrl: "type.googleapis.com/acme.Order", Value: []byte{0x0a, 0x03, 'a', 'b', 'c'}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tb.push(ctx, w.sid, &msgpb.Message{Seq: 5, Body: unknown}); err != nil {
		t.Fatal(err)
	}
	p, err := w.recv()
	if err != nil {
		t.Fatal(err)
	}
	m := p.GetMessages().GetMsgs()
	if len(m) != 1 || m[0].GetSeq() != 5 {
		t.Fatalf("messages %v", m)
	}
	var raw wrapperspb.BytesValue
	if err := m[0].GetBody().UnmarshalTo(&raw); err != nil {
		t.Fatalf("body %v: %v", m[0].GetBody(), err)
	}
	var back anypb.Any
	if err := proto.Unmarshal(raw.GetValue(), &back); err != nil || !proto.Equal(&back, unknown) {
		t.Fatalf("wrapped body %v (%v), want %v", &back, err, unknown)
	}
}

// TestWebSocketRefusals: bad input gets a clear close code (or HTTP status
// before the upgrade) and leaves no session behind.
func TestWebSocketRefusals(t *testing.T) {
	t.Parallel()
	tb := wsBoat(t, func(c *Config) {
		c.GRPC = grpcx.Limits{MaxRecvBytes: 1024}
		c.WSOrigins = []string{"app.example.com"}
	})
	closes := func(code string) float64 { return promtest.ToFloat64(tb.metrics.WSCloses.WithLabelValues(code)) }
	t.Run("no token", func(t *testing.T) {
		before := tb.station.connects.Load()
		c, _, err := wsDial(t, tb, []string{WSProto}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if code, reason := readClose(t, c); code != 4516 || !strings.HasPrefix(reason, "INVALID_TOKEN: missing token") {
			t.Fatalf("close %d %q, want 4516 INVALID_TOKEN: missing token", code, reason)
		}
		if n := tb.station.connects.Load(); n != before {
			t.Fatalf("station saw %d connects for a session without a token", n-before)
		}
	})
	t.Run("bad token", func(t *testing.T) {
		c, _, err := wsDial(t, tb, []string{WSProto, WSBearerPrefix + "no-slash"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := readClose(t, c); code != 4516 {
			t.Fatalf("close %d, want 4516", code)
		}
	})
	t.Run("authorization header", func(t *testing.T) {
		c, _, err := wsDial(t, tb, nil, http.Header{"Authorization": {"Bearer hdr/web"}})
		if err != nil {
			t.Fatal(err)
		}
		w := &wsClient{t: t, c: c}
		if p, err := w.recv(); err != nil || p.GetConnected().GetUid() != "hdr" {
			t.Fatalf("first frame %v %v, want Connected for hdr (binary frames by default)", p, err)
		}
	})
	cases := []struct {
		name  string
		frame func(w *wsClient) error
		code  websocket.StatusCode
	}{
		{"not protobuf", func(w *wsClient) error {
			return w.c.Write(context.Background(), websocket.MessageBinary, []byte{0xff, 0xff, 0xff})
		}, websocket.StatusInvalidFramePayloadData},
		{"text on proto", func(w *wsClient) error {
			return w.c.Write(context.Background(), websocket.MessageText, []byte(`{"ping":{"id":"1"}}`))
		}, websocket.StatusUnsupportedData},
		{"oversize", func(w *wsClient) error {
			b, _ := proto.Marshal(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_RegisterDevice{
				RegisterDevice: &msgpb.RegisterDevice{Token: strings.Repeat("x", 2000)}}})
			return w.c.Write(context.Background(), websocket.MessageBinary, b)
		}, websocket.StatusMessageTooBig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := wsConnect(t, tb, WSProto, "bad-"+strings.ReplaceAll(tc.name, " ", "-")+"/web")
			if err := tc.frame(w); err != nil {
				t.Fatal(err)
			}
			if code, reason := w.closeCode(); code != tc.code || reason == "" {
				t.Fatalf("close %d %q, want %d with a reason", code, reason, tc.code)
			}
			testutil.WaitFor(t, 5*time.Second, func() error {
				if tb.sessions.get(w.sid) != nil {
					return testutil.Errorf("session %s still held", w.sid)
				}
				return nil
			})
			// The boat knows why it ended the session: its close is
			// counted by the code the client saw.
			testutil.WaitFor(t, 5*time.Second, func() error {
				if n := promtest.ToFloat64(tb.metrics.WSCloses.WithLabelValues(fmt.Sprint(int(tc.code)))); n < 1 {
					return testutil.Errorf("websocket_closes{code=%d} = %g", tc.code, n)
				}
				return nil
			})
			// The boat knows why it ended the session: its close is
			// counted by the code the client saw.
			testutil.WaitFor(t, 5*time.Second, func() error {
				if n := promtest.ToFloat64(tb.metrics.WSCloses.WithLabelValues(fmt.Sprint(int(tc.code)))); n < 1 {
					return testutil.Errorf("websocket_closes{code=%d} = %g", tc.code, n)
				}
				return nil
			})
		})
	}
	t.Run("json frame not a payload", func(t *testing.T) {
		w := wsConnect(t, tb, WSJSON, "badjson/web")
		if err := w.c.Write(context.Background(), websocket.MessageText, []byte(`{"nope":1}`)); err != nil {
			t.Fatal(err)
		}
		if code, _ := w.closeCode(); code != websocket.StatusInvalidFramePayloadData {
			t.Fatalf("close %d, want 1007", code)
		}
	})
	t.Run("binary on json", func(t *testing.T) {
		w := wsConnect(t, tb, WSJSON, "binjson/web")
		if err := w.c.Write(context.Background(), websocket.MessageBinary, []byte{0x12, 0x00}); err != nil {
			t.Fatal(err)
		}
		if code, _ := w.closeCode(); code != websocket.StatusUnsupportedData {
			t.Fatalf("close %d, want 1003", code)
		}
	})
	t.Run("only fields no client sends", func(t *testing.T) {
		w := wsConnect(t, tb, WSProto, "empty/web")
		// Field 10, a varint: parses, as unknown fields, into an empty
		// ClientPayload.
		if err := w.c.Write(context.Background(), websocket.MessageBinary, []byte{0x50, 0x01}); err != nil {
			t.Fatal(err)
		}
		if code, reason := w.closeCode(); code != websocket.StatusInvalidFramePayloadData || !strings.Contains(reason, "no ack") {
			t.Fatalf("close %d %q, want 1007", code, reason)
		}
	})
	t.Run("no frame format offered", func(t *testing.T) {
		before := tb.station.connects.Load()
		_, resp, err := wsDial(t, tb, []string{WSBearerPrefix + "nofmt/web"}, nil)
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("only the bearer subprotocol: %v %v, want 400 before the upgrade", resp, err)
		}
		if n := tb.station.connects.Load(); n != before {
			t.Fatalf("station saw %d connects for a refused handshake", n-before)
		}
	})
	t.Run("origin", func(t *testing.T) {
		_, resp, err := wsDial(t, tb, []string{WSProto, WSBearerPrefix + "o/web"}, http.Header{"Origin": {"https://evil.example.com"}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("origin not allowed: %v %v, want 403 before the upgrade", resp, err)
		}
		c, _, err := wsDial(t, tb, []string{WSProto, WSBearerPrefix + "o/web"}, http.Header{"Origin": {"https://app.example.com"}})
		if err != nil {
			t.Fatalf("allowed origin: %v", err)
		}
		_ = c.CloseNow()
	})
	for code, want := range map[string]float64{"4516": 2, "1007": 3, "1003": 2, "1009": 1} {
		if got := closes(code); got != want {
			t.Errorf("closes{code=%s} = %g, want %g", code, got, want)
		}
	}
}

// TestWebSocketStationDownAndDrain: a connect the station cannot answer
// closes 4014 (Unavailable); a stopping boat kicks its WebSocket sessions
// SERVER_DRAINING and closes them 4105.
func TestWebSocketStationDownAndDrain(t *testing.T) {
	t.Parallel()
	tb := wsBoat(t, nil)
	w := wsConnect(t, tb, WSProto, "d/web")
	tb.station.down.Store(true)
	c, _, err := wsDial(t, tb, []string{WSProto, WSBearerPrefix + "e/web"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := readClose(t, c); code != 4014 {
		t.Fatalf("station down: close %d, want 4014", code)
	}
	tb.station.down.Store(false)
	tb.cancel()
	if p, err := w.recv(); err != nil || p.GetKickout().GetReason() != msgpb.KickoutReason_SERVER_DRAINING {
		t.Fatalf("on stop: %v %v, want Kickout SERVER_DRAINING", p, err)
	}
	if code, _ := w.closeCode(); code != 4105 {
		t.Fatalf("close %d, want 4105", code)
	}
	select {
	case err := <-tb.done:
		tb.done <- err // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("boat did not stop")
	}
	if c, _, err := wsDial(t, tb, []string{WSProto, WSBearerPrefix + "late/web"}, nil); err == nil {
		_ = c.CloseNow()
		t.Fatal("the WebSocket listener still accepts after Run returned")
	}
}

// TestWebSocketCountsTowardsMaxConnections: a WebSocket holds one of the
// boat's --max-connections; one more is closed when accepted.
func TestWebSocketCountsTowardsMaxConnections(t *testing.T) {
	t.Parallel()
	// The test's health client holds one connection (gRPC) already.
	tb := wsBoat(t, func(c *Config) { c.MaxConnections = 2 })
	wsConnect(t, tb, WSProto, "m1/web")
	if c, _, err := wsDial(t, tb, []string{WSProto, WSBearerPrefix + "m2/web"}, nil); err == nil {
		_ = c.CloseNow()
		t.Fatal("a second connection was accepted beyond --max-connections 2")
	}
	if got := promtest.ToFloat64(tb.metrics.LimitRejections.WithLabelValues("max_connections")); got < 1 {
		t.Fatalf("max_connections rejections %g, want at least 1", got)
	}
}

// TestWebSocketConnectRatePerIP: --connect-rate-per-ip applies to WebSocket
// sessions by their source address: past it a connect closes 4008.
func TestWebSocketConnectRatePerIP(t *testing.T) {
	t.Parallel()
	tb := wsBoat(t, func(c *Config) { c.ConnectRatePerIP = 1 })
	wsConnect(t, tb, WSProto, "r1/web")
	c, _, err := wsDial(t, tb, []string{WSProto, WSBearerPrefix + "r2/web"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, reason := readClose(t, c); code != 4008 || !strings.HasPrefix(reason, "LIMIT_EXCEEDED: ") || !strings.Contains(reason, "connect-rate-per-ip") {
		t.Fatalf("close %d %q, want 4008 naming --connect-rate-per-ip", code, reason)
	}
}

// TestWebSocketSlowConsumer: a WebSocket client that stops reading is kicked
// SLOW_CONSUMER once a write blocks past --write-timeout, as a gRPC client
// is; its session and connection are let go although it never reads again.
func TestWebSocketSlowConsumer(t *testing.T) {
	t.Parallel()
	tb := wsBoat(t, func(c *Config) { c.WriteTimeout = 500 * time.Millisecond })
	w := wsConnect(t, tb, WSProto, "slow-reader/web")
	conns := tb.conns.n.Load()
	body := textBody(strings.Repeat("x", 256<<10))
	for i := range 64 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = tb.push(ctx, w.sid, &msgpb.Message{Seq: int64(i + 1), Body: body})
		}()
	}
	testutil.WaitFor(t, 15*time.Second, func() error {
		if got := promtest.ToFloat64(tb.metrics.Kickouts.WithLabelValues("SLOW_CONSUMER")); got != 1 {
			return testutil.Errorf("SLOW_CONSUMER kickouts %g, want 1", got)
		}
		if tb.sessions.get(w.sid) != nil {
			return testutil.Errorf("session still held")
		}
		if n := tb.conns.n.Load(); n != conns-1 {
			return testutil.Errorf("%d connections held, want %d", n, conns-1)
		}
		return nil
	})
}

// TestWebSocketConnectRacingTheDrain: a connect that passed the drain check
// but is held only after the drain kicked every session is refused 4014
// (not left open, which would hold the boat's stop for as long as the client
// stays), and the boat stops.
func TestWebSocketConnectRacingTheDrain(t *testing.T) {
	t.Parallel()
	entered, gate := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	tb := startBoatWith(t, boatOpts{
		edit: func(c *Config) { c.WSAddr = "127.0.0.1:0"; c.ShutdownGrace = 2 * time.Second },
		hold: func(*Boat) {
			if held.CompareAndSwap(false, true) {
				return // the first session connects at once
			}
			close(entered)
			<-gate
		},
	})
	first := wsConnect(t, tb, WSProto, "first/web")
	late, _, err := wsDial(t, tb, []string{WSProto, WSBearerPrefix + "late/web"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	tb.cancel()
	// The drain has kicked every session it holds: the first got its notice.
	if p, err := first.recv(); err != nil || p.GetKickout().GetReason() != msgpb.KickoutReason_SERVER_DRAINING {
		t.Fatalf("first session: %v %v, want Kickout SERVER_DRAINING", p, err)
	}
	close(gate)
	select {
	case err := <-tb.done:
		tb.done <- err // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("boat did not stop with a session connected after the drain began")
	}
	if code, _ := readClose(t, late); code != 4014 {
		t.Fatalf("late session closed %d, want 4014 (unavailable: draining)", code)
	}
}
