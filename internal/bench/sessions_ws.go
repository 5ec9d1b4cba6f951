package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// Device sessions over WebSocket: one connection per session at boat's
// /v1/connect, binary protobuf frames (gomsg.v1.proto), the token in the
// bearer.<token> subprotocol as a browser sends it.

// wsHandshakeTimeout bounds one WebSocket handshake.
const wsHandshakeTimeout = 30 * time.Second

// wsMaxFrame is the largest frame a session reads: gRPC's default receive
// limit, which the gRPC sessions have.
const wsMaxFrame = 4 << 20

// wsDialer opens WebSocket sessions to one boat, spreading them over source
// addresses as dialFrom does for gRPC.
type wsDialer struct {
	url     string
	clients []*http.Client // one per source address
}

func newWSDialer(addr string, spread int, tc *tls.Config) *wsDialer {
	scheme := "ws"
	if tc != nil {
		scheme = "wss"
	}
	d := &wsDialer{url: scheme + "://" + addr + boat.WSPath}
	for i := range spread {
		from := dialFrom(i, spread)
		d.clients = append(d.clients, &http.Client{Transport: &http.Transport{
			DialContext:     func(ctx context.Context, _, addr string) (net.Conn, error) { return from(ctx, addr) },
			TLSClientConfig: tc,
			// Upgraded connections leave the transport; nothing to pool.
			DisableKeepAlives: true,
		}})
	}
	return d
}

// dial opens session i's WebSocket; the session lives until ctx ends (a
// read or write whose ctx ends closes the connection).
func (d *wsDialer) dial(ctx context.Context, i int, token string) (clientStream, error) {
	hctx, cancel := context.WithTimeout(ctx, wsHandshakeTimeout)
	defer cancel()
	c, resp, err := websocket.Dial(hctx, d.url, &websocket.DialOptions{
		HTTPClient:      d.clients[i%len(d.clients)],
		Subprotocols:    []string{boat.WSProto, boat.WSBearerPrefix + token},
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("websocket handshake: HTTP %d: %w", resp.StatusCode, err)
		}
		return nil, fmt.Errorf("websocket handshake: %w", err)
	}
	if c.Subprotocol() != boat.WSProto {
		_ = c.CloseNow()
		return nil, fmt.Errorf("websocket handshake: subprotocol %q, want %s", c.Subprotocol(), boat.WSProto)
	}
	c.SetReadLimit(wsMaxFrame)
	return &wsStream{c: c, ctx: ctx}, nil
}

// wsStream is a session's WebSocket as a clientStream. The coder/websocket
// Conn answers boat's pings while a Read is waiting, which the session's
// receive loop always is.
type wsStream struct {
	c   *websocket.Conn
	ctx context.Context
}

func (w *wsStream) Send(p *msgpb.ClientPayload) error {
	b, err := proto.Marshal(p)
	if err != nil {
		return err
	}
	return w.c.Write(w.ctx, websocket.MessageBinary, b)
}

// Recv returns the next ServerPayload. A close from boat is returned as an
// error carrying its close code (websocket.CloseStatus reads it); any error
// leaves the connection closed.
func (w *wsStream) Recv() (*msgpb.ServerPayload, error) {
	typ, b, err := w.c.Read(w.ctx)
	if err != nil {
		_ = w.c.CloseNow()
		return nil, err
	}
	if typ != websocket.MessageBinary {
		_ = w.c.Close(websocket.StatusUnsupportedData, "text frame on "+boat.WSProto)
		return nil, errors.New("websocket: text frame on " + boat.WSProto)
	}
	p := &msgpb.ServerPayload{}
	if err := proto.Unmarshal(b, p); err != nil {
		_ = w.c.Close(websocket.StatusInvalidFramePayloadData, "not a ServerPayload")
		return nil, fmt.Errorf("websocket: frame is not a ServerPayload: %w", err)
	}
	return p, nil
}
