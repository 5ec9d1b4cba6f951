package boat

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// The WebSocket transport: browsers (the web platform) cannot open a gRPC
// stream, so boat serves the same sessions over WebSocket at WSPath. Each
// frame is one ClientPayload or ServerPayload, encoded as the subprotocol the
// client chose says; the session behind it is serveSession's, the gRPC
// stream's own.
const (
	// WSPath is where sessions connect.
	WSPath = "/v1/connect"
	// WSProto frames are binary protobuf (the default).
	WSProto = "gomsg.v1.proto"
	// WSJSON frames are protojson text, for debugging.
	WSJSON = "gomsg.v1.json"
	// WSBearerPrefix starts the subprotocol that carries the token
	// ("bearer.<token>"): browsers cannot set an Authorization header.
	WSBearerPrefix = "bearer."
)

// Close codes of the WebSocket transport are the protocol's
// (msgpb.CloseCodeOfStatus, msgpb.CloseCodeOfKickout), sent after the
// upgrade so that a browser can read them (a refused handshake shows only
// as 1006 there): 4000–4499 reconnect (4008 resource exhausted, 4014
// unavailable, 4004 connect timeout, 4102–4105 kickouts), 4500–4999 stop
// (4516 unauthenticated, 4503 invalid argument, 4507 permission denied,
// 4601 NEW_SESSION).

// wsPing is how often an open WebSocket is pinged, and wsPingTimeout how long
// its pong may take before the connection is closed (as gRPC keepalive does
// for the stream: 30 s, 10 s).
const (
	wsPing        = 30 * time.Second
	wsPingTimeout = 10 * time.Second
)

// wsServer serves the WebSocket transport.
type wsServer struct {
	b    *Boat
	srv  *http.Server
	ln   net.Listener
	gate handlerGate
	// sessions is the parent of every session's context; cutAll ends them
	// all.
	sessions context.Context
	cutAll   context.CancelFunc
	// done is closed once run has returned and every handler with it: no
	// WebSocket session starts a goroutine counted in the boat's streams
	// after it (see serveClients).
	done chan struct{}
}

func newWSServer(b *Boat) *wsServer {
	w := &wsServer{b: b, done: make(chan struct{})}
	w.sessions, w.cutAll = context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc(WSPath, w.serve)
	if b.cfg.WSHandler != nil {
		mux.Handle("/", b.cfg.WSHandler)
	}
	w.srv = &http.Server{
		Handler: mux,
		// A request's header, and its body (none is expected here), must
		// arrive within the connect timeout: a client that announces a
		// body and never sends it would otherwise hold its connection
		// (and a place under --max-connections) for ever. The upgrade
		// clears the deadline for the session (serve).
		ReadHeaderTimeout: b.cfg.ConnectTimeout,
		ReadTimeout:       b.cfg.ConnectTimeout,
		IdleTimeout:       2 * b.cfg.ConnectTimeout,
		MaxHeaderBytes:    b.cfg.GRPC.MaxHeaderBytes,
		ErrorLog:          zap.NewStdLog(b.log.Named("websocket")),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, netConnKey{}, c)
		},
		// A connection counts towards --max-connections from its accept
		// until it closes; an upgraded one (hijacked) is counted by its
		// handler instead.
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				b.conns.n.Add(1)
			case http.StateHijacked, http.StateClosed:
				b.conns.n.Add(-1)
			}
		},
	}
	return w
}

// netConnKey holds a request's connection in its context.
type netConnKey struct{}

func (w *wsServer) listen(addr string, cfg *tls.Config) error {
	ln, err := w.b.listenLimited("websocket", addr, cfg)
	w.ln = ln
	return err
}

// listenLimited listens on addr for the named device transport, each
// connection under the boat's connection limits, with TLS when cfg is set.
// The limits wrap the TCP connection, under TLS: a server above must see
// the *tls.Conn itself.
func (b *Boat) listenLimited(what, addr string, cfg *tls.Config) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("boat %s listener: %w", what, err)
	}
	ln = &limitListener{Listener: ln, b: b, wrap: true}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	return ln, nil
}

// run serves until ctx ends, then stops taking connections and waits for
// the sessions' handlers. The boat's drain kicks every session
// (SERVER_DRAINING); a session that slipped past it, or a client that holds
// its connection open after, is cut grace later: http.Server's Shutdown does
// not reach a connection a WebSocket has taken over.
func (w *wsServer) run(ctx context.Context, grace time.Duration) error {
	defer func() {
		w.gate.wait()
		close(w.done)
	}()
	errc := make(chan error, 1)
	go func() { errc <- w.srv.Serve(w.ln) }()
	select {
	case err := <-errc:
		w.cutAll()
		return err
	case <-ctx.Done():
	}
	cut := time.AfterFunc(grace, w.cutAll)
	defer cut.Stop()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := w.srv.Shutdown(sctx); err != nil {
		_ = w.srv.Close() // requests of the demo page still running
	}
	w.gate.stop()
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serve upgrades one request and serves its session.
func (w *wsServer) serve(rw http.ResponseWriter, r *http.Request) {
	b := w.b
	token := wsToken(r)
	if offered := r.Header.Values("Sec-WebSocket-Protocol"); len(offered) > 0 && !offersFormat(offered) {
		// A browser that offered subprotocols fails a handshake that picks
		// none of them, after station had taken the session (and kicked
		// the user's other one): refuse before.
		b.metrics.Connects.WithLabelValues("refused").Inc()
		http.Error(rw, "offer the subprotocol "+WSProto+" (or "+WSJSON+") with "+WSBearerPrefix+"<token>", http.StatusBadRequest)
		return
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		// A handshake has no body; one announced would be read as frames.
		b.metrics.Connects.WithLabelValues("refused").Inc()
		rw.Header().Set("Connection", "close")
		http.Error(rw, "a WebSocket handshake carries no request body", http.StatusBadRequest)
		return
	}
	pull, err := offlineMode(r.URL.Query()[WSOfflineParam])
	if err != nil {
		b.metrics.Connects.WithLabelValues("refused").Inc()
		http.Error(rw, "query parameter "+WSOfflineParam+": "+err.Error(), http.StatusBadRequest)
		return
	}
	c, err := websocket.Accept(rw, r, &websocket.AcceptOptions{
		Subprotocols:    []string{WSProto, WSJSON},
		OriginPatterns:  b.cfg.WSOrigins,
		CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		// Accept answered the request itself: 403 for an Origin not
		// allowed, 426 for a request that is no WebSocket handshake.
		b.metrics.Connects.WithLabelValues("refused").Inc()
		return
	}
	if !w.gate.begin() {
		_ = c.Close(websocket.StatusCode(msgpb.CloseCodeOfStatus(codes.Unavailable)), "boat is shutting down; connect to another")
		return
	}
	defer w.gate.done()
	// The request's read deadline (ReadTimeout) must not end the session.
	if nc, ok := r.Context().Value(netConnKey{}).(net.Conn); ok {
		_ = nc.SetReadDeadline(time.Time{})
	}
	b.conns.n.Add(1)
	defer b.conns.n.Add(-1)
	c.SetReadLimit(int64(b.cfg.GRPC.MaxRecvBytes))

	ctx, cancel := context.WithCancel(w.sessions)
	defer cancel()
	if addr, err := net.ResolveTCPAddr("tcp", r.RemoteAddr); err == nil {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
	}
	conn := &wsConn{c: c, ctx: ctx, json: strings.EqualFold(c.Subprotocol(), WSJSON)}
	defer conn.keepAlive(cancel)()
	end, err := b.serveSession(ctx, token, pull, conn)
	code, reason := wsCloseOf(end, err)
	b.metrics.WSCloses.WithLabelValues(fmt.Sprint(int(code))).Inc()
	var bad *wsFrameError
	if end.stuck || ctx.Err() != nil || errors.Is(end.recvErr, errClientClosed) || errors.As(end.recvErr, &bad) && bad.sent {
		// No close frame can or need be sent: cancel the blocked write,
		// drop the connection.
		cancel()
		_ = c.CloseNow()
		return
	}
	_ = c.Close(code, reason)
}

// errClientClosed is a close the client sent (or a broken connection): no
// close frame is owed to it.
var errClientClosed = errors.New("websocket closed by the client")

// wsToken takes the token from the Authorization header, or from the
// "bearer.<token>" subprotocol a browser offers.
func wsToken(r *http.Request) string {
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(h, ",") {
			if t, ok := strings.CutPrefix(strings.TrimSpace(p), WSBearerPrefix); ok {
				return t
			}
		}
	}
	return ""
}

// offersFormat reports whether the offered subprotocols include a frame
// format.
func offersFormat(headers []string) bool {
	for _, h := range headers {
		for p := range strings.SplitSeq(h, ",") {
			p = strings.TrimSpace(p)
			if strings.EqualFold(p, WSProto) || strings.EqualFold(p, WSJSON) {
				return true
			}
		}
	}
	return false
}

// wsCloseOf is the close code and reason of a session's end.
func wsCloseOf(end sessionEnd, err error) (websocket.StatusCode, string) {
	var bad *wsFrameError
	switch {
	case err != nil:
		// The reason starts with the errorpb code a client acts on
		// (INVALID_TOKEN, LIMIT_EXCEEDED …), when the refusal has one.
		st, msg := status.Convert(err), status.Convert(err).Message()
		if d := grpcerr.DetailCode(err); d != errorpb.Code_CODE_UNSPECIFIED {
			msg = d.String() + ": " + msg
		}
		return websocket.StatusCode(msgpb.CloseCodeOfStatus(st.Code())), closeReason(msg)
	case end.kicked != msgpb.KickoutReason_KICKOUT_REASON_UNSPECIFIED:
		return websocket.StatusCode(msgpb.CloseCodeOfKickout(end.kicked)), closeReason(end.kicked.String() + ": " + kickMessage(end.kicked))
	case errors.As(end.recvErr, &bad):
		return bad.code, closeReason(bad.msg)
	}
	return websocket.StatusNormalClosure, ""
}

// closeReason fits a reason into a close frame (123 bytes).
func closeReason(s string) string {
	const maxReason = 123
	if len(s) <= maxReason {
		return s
	}
	s = s[:maxReason]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// wsFrameError is a client frame the session cannot take: it ends the
// session with code.
type wsFrameError struct {
	code websocket.StatusCode
	msg  string
	// sent: the library closed the connection with code already.
	sent bool
}

func (e *wsFrameError) Error() string { return e.msg }

// wsConn is a WebSocket as a clientConn.
type wsConn struct {
	c    *websocket.Conn
	ctx  context.Context
	json bool
}

func (w *wsConn) Context() context.Context { return w.ctx }

func (w *wsConn) Recv() (*msgpb.ClientPayload, error) {
	typ, data, err := w.c.Read(w.ctx)
	if err != nil {
		if errors.Is(err, websocket.ErrMessageTooBig) {
			// The library has closed the connection with 1009 already.
			return nil, &wsFrameError{code: websocket.StatusMessageTooBig, msg: "frame larger than --grpc-max-recv-bytes", sent: true}
		}
		return nil, fmt.Errorf("%w: %w", errClientClosed, err)
	}
	p := &msgpb.ClientPayload{}
	if w.json {
		if typ != websocket.MessageText {
			return nil, &wsFrameError{code: websocket.StatusUnsupportedData, msg: "binary frame on " + WSJSON + ": send text frames of protojson"}
		}
		if err := protojson.Unmarshal(data, p); err != nil {
			return nil, &wsFrameError{code: websocket.StatusInvalidFramePayloadData, msg: "frame is not a gomsg.msg.ClientPayload in protojson: " + err.Error()}
		}
		return emptyIsBad(p)
	}
	if typ != websocket.MessageBinary {
		return nil, &wsFrameError{code: websocket.StatusUnsupportedData, msg: "text frame on " + WSProto + ": send binary protobuf frames (or offer " + WSJSON + ")"}
	}
	if err := proto.Unmarshal(data, p); err != nil {
		return nil, &wsFrameError{code: websocket.StatusInvalidFramePayloadData, msg: "frame is not a gomsg.msg.ClientPayload: " + err.Error()}
	}
	return emptyIsBad(p)
}

// emptyIsBad refuses a payload with no body: bytes that happen to parse as
// unknown fields only, not a ClientPayload any client sends.
func emptyIsBad(p *msgpb.ClientPayload) (*msgpb.ClientPayload, error) {
	if p.GetBody() == nil {
		return nil, &wsFrameError{code: websocket.StatusInvalidFramePayloadData, msg: "frame is not a gomsg.msg.ClientPayload: no ack, ping, register_device, join_room, leave_room or pull in it"}
	}
	return p, nil
}

func (w *wsConn) Send(p *msgpb.ServerPayload) error {
	if w.json {
		b, err := jsonPayload(p)
		if err != nil {
			return err
		}
		return w.c.Write(w.ctx, websocket.MessageText, b)
	}
	b, err := proto.Marshal(p)
	if err != nil {
		return err
	}
	return w.c.Write(w.ctx, websocket.MessageBinary, b)
}

func (w *wsConn) SendFrame(f *encodedFrame) error {
	if !w.json {
		return w.c.Write(w.ctx, websocket.MessageBinary, f.b)
	}
	p := &msgpb.ServerPayload{}
	if err := proto.Unmarshal(f.b, p); err != nil {
		return err
	}
	return w.Send(p)
}

// keepAlive pings the client every wsPing; a pong not back within
// wsPingTimeout ends the connection (stop). An idle session holds a timer,
// not a goroutine. The returned func ends the pings.
func (w *wsConn) keepAlive(stop func()) func() {
	var mu sync.Mutex
	var t *time.Timer
	ended := false
	ping := func() {
		ctx, cancel := context.WithTimeout(w.ctx, wsPingTimeout)
		defer cancel()
		if err := w.c.Ping(ctx); err != nil {
			stop()
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !ended {
			t.Reset(wsPing)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(wsPing, ping)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		ended = true
		t.Stop()
	}
}

// jsonPayload is p in protojson. A message body of a type this boat does not
// know cannot be rendered field by field: it goes as a
// google.protobuf.BytesValue holding the serialized google.protobuf.Any.
func jsonPayload(p *msgpb.ServerPayload) ([]byte, error) {
	b, err := protojson.Marshal(p)
	if err == nil {
		return b, nil
	}
	p = proto.CloneOf(p)
	var msgs []*msgpb.Message
	switch body := p.GetBody().(type) {
	case *msgpb.ServerPayload_Messages:
		msgs = body.Messages.GetMsgs()
	case *msgpb.ServerPayload_RoomMessages:
		msgs = body.RoomMessages.GetMsgs()
	default:
		return nil, err
	}
	for _, m := range msgs {
		if m.GetBody() == nil {
			continue
		}
		if _, rerr := m.GetBody().UnmarshalNew(); rerr == nil {
			continue
		}
		raw, merr := proto.Marshal(m.GetBody())
		if merr != nil {
			return nil, merr
		}
		if m.Body, merr = anypb.New(wrapperspb.Bytes(raw)); merr != nil {
			return nil, merr
		}
	}
	return protojson.Marshal(p)
}
