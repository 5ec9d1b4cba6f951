package boat

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	protobuf "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/mqtt"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// The MQTT transport: a device's MQTT 5 (or 3.1.1) client library is a
// gomsg client. The password of the CONNECT is the device token; the device's
// own topic MQTTUserPrefix+uid carries its messages as QoS 1 PUBLISHes whose
// PUBACK is gomsg's ACK; rooms are QoS 0 topics MQTTRoomPrefix+room joined by
// SUBSCRIBE. Clean start false is a session with offline replay, clean start
// true a live-only one. The session is served by serveSession, as a gRPC
// stream or a WebSocket is.
const (
	MQTTUserPrefix = "u/"
	MQTTRoomPrefix = "r/"
	// MQTTBroadcastTopic carries broadcasts to every online session.
	MQTTBroadcastTopic = "all"
)

// User properties of a message's PUBLISH.
const (
	MQTTPropSeq       = "seq"
	MQTTPropOptions   = "options"
	MQTTPropTimestamp = "timestamp"
	MQTTPropType      = "type"
	// MQTTPropCloseCode, on a refusing CONNACK or a DISCONNECT, is the
	// gomsg close code (msgpb.CloseCodeOf…): its range says whether to
	// reconnect.
	MQTTPropCloseCode = "close-code"
)

// mqttMaxKeepAlive caps the keep alive the boat accepts (and is what a
// client that asks none gets): a dead connection is noticed within 1.5 times
// it.
const mqttMaxKeepAlive = 300

// mqttServer serves the MQTT transport.
type mqttServer struct {
	b        *Boat
	ln       net.Listener
	gate     handlerGate
	sessions context.Context
	cutAll   context.CancelFunc
	done     chan struct{}
}

func newMQTTServer(b *Boat) *mqttServer {
	m := &mqttServer{b: b, done: make(chan struct{})}
	m.sessions, m.cutAll = context.WithCancel(context.Background())
	return m
}

func (m *mqttServer) listen(addr string, cfg *tls.Config) error {
	ln, err := m.b.listenLimited("mqtt", addr, cfg)
	m.ln = ln
	return err
}

// run accepts until ctx ends, then stops taking connections and waits for
// the handlers; the boat's drain kicks every session (DISCONNECT 0x8B), and
// a connection still open grace later is cut.
func (m *mqttServer) run(ctx context.Context, grace time.Duration) error {
	defer func() {
		m.gate.wait()
		close(m.done)
	}()
	errc := make(chan error, 1)
	go func() {
		for {
			c, err := m.ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			if !m.gate.begin() {
				_ = c.Close()
				continue
			}
			go m.serve(c)
		}
	}()
	select {
	case err := <-errc:
		m.cutAll()
		return err
	case <-ctx.Done():
	}
	_ = m.ln.Close()
	<-errc
	cut := time.AfterFunc(grace, m.cutAll)
	defer cut.Stop()
	m.gate.stop()
	return nil
}

// serve reads one connection's CONNECT and serves its session.
func (m *mqttServer) serve(nc net.Conn) {
	defer m.gate.done()
	b := m.b
	b.conns.n.Add(1)
	defer b.conns.n.Add(-1)
	defer nc.Close()
	ctx, cancel := context.WithCancel(m.sessions)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer stop()
	if addr, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: addr})
	}
	maxSize := b.cfg.GRPC.MaxRecvBytes
	c := &mqttConn{nc: nc, r: bufio.NewReaderSize(nc, 512), ctx: ctx, maxSize: maxSize, writeTimeout: b.cfg.WriteTimeout,
		inflight: make(map[uint16]int64), subs: make(map[int64]mqttRoomReq), connected: make(chan struct{})}
	// The CONNECT must come within the connect timeout.
	_ = nc.SetReadDeadline(time.Now().Add(b.cfg.ConnectTimeout))
	p, err := mqtt.ReadPacket(c.r, 0, maxSize)
	if err != nil {
		b.metrics.Connects.WithLabelValues("invalid").Inc()
		var e *mqtt.Error
		if errors.As(err, &e) {
			c.level = mqtt.V5
			if e.Code == mqtt.UnsupportedProtocolVersion {
				c.level = mqtt.V311 // a 3.1.1 CONNACK is what older clients read
			}
			c.refuse(e.Code, e.Msg, msgpb.CloseInvalidArgument)
		}
		return
	}
	cp := p.(*mqtt.Connect)
	c.level, c.cleanStart, c.username = cp.ProtocolLevel, cp.CleanStart, cp.Username
	c.assignID = cp.ClientID == ""
	c.keepAlive = cp.KeepAlive
	if c.keepAlive == 0 || c.keepAlive > mqttMaxKeepAlive {
		c.keepAlive = mqttMaxKeepAlive
	}
	c.sendMax = 65535
	if cp.Props.ReceiveMaximum > 0 {
		c.sendMax = int(cp.Props.ReceiveMaximum)
	}
	c.window = make(chan struct{}, c.sendMax)
	c.clientMaxSize = int(cp.Props.MaxPacketSize)
	if !cp.HasPassword || len(cp.Password) == 0 {
		b.metrics.Connects.WithLabelValues("unauthenticated").Inc()
		c.refuse(mqtt.BadUserNameOrPassword, "INVALID_TOKEN: missing token: send the device token as the CONNECT password", msgpb.CloseUnauthenticated)
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	end, err := b.serveSession(ctx, string(cp.Password), cp.CleanStart, c)
	if err != nil {
		code, reason := mqttRefusal(err)
		c.refuse(code, reason, msgpb.CloseCodeOfStatus(status.Code(err)))
		return
	}
	var bad *mqtt.Error
	switch {
	case c.ended.Load() || end.stuck || ctx.Err() != nil:
	case end.kicked != msgpb.KickoutReason_KICKOUT_REASON_UNSPECIFIED:
		// The sender had no time to send the kick's DISCONNECT.
		c.disconnect(mqttKickCode(end.kicked), end.kicked.String()+": "+kickMessage(end.kicked), msgpb.CloseCodeOfKickout(end.kicked))
	case errors.As(end.recvErr, &bad):
		b.metrics.Connects.WithLabelValues("invalid").Inc()
		c.disconnect(bad.Code, bad.Msg, msgpb.CloseInvalidArgument)
	}
}

// mqttRefusal is the CONNACK reason code and string of a session refused
// with err; the string starts with the errorpb code a client acts on, when
// the refusal has one.
func mqttRefusal(err error) (byte, string) {
	st := status.Convert(err)
	msg := st.Message()
	d := grpcerr.DetailCode(err)
	if d != errorpb.Code_CODE_UNSPECIFIED {
		msg = d.String() + ": " + msg
	}
	switch st.Code() {
	case codes.Unauthenticated:
		return mqtt.BadUserNameOrPassword, msg
	case codes.PermissionDenied:
		return mqtt.NotAuthorized, msg
	case codes.InvalidArgument:
		return mqtt.ClientIDNotValid, msg
	case codes.ResourceExhausted:
		if d == errorpb.Code_LIMIT_EXCEEDED && strings.Contains(msg, "connects per second") {
			return mqtt.ConnectionRateExceeded, msg
		}
		return mqtt.QuotaExceeded, msg
	case codes.Unavailable:
		return mqtt.ServerUnavailable, msg
	case codes.DeadlineExceeded:
		return mqtt.ServerBusy, msg
	}
	return mqtt.UnspecifiedError, msg
}

// mqttKickCodes are the DISCONNECT reason codes of the kickouts.
var mqttKickCodes = map[msgpb.KickoutReason]byte{
	msgpb.KickoutReason_NEW_SESSION:     mqtt.SessionTakenOver,
	msgpb.KickoutReason_SERVER_DRAINING: mqtt.ServerShuttingDown,
	msgpb.KickoutReason_SLOW_CONSUMER:   mqtt.QuotaExceeded,
	msgpb.KickoutReason_BY_REQUEST:      mqtt.AdministrativeAction,
	msgpb.KickoutReason_ACK_TIMEOUT:     mqtt.ImplementationSpecificError,
}

// mqttKickCode is the DISCONNECT reason code of a kickout.
func mqttKickCode(r msgpb.KickoutReason) byte {
	if c, ok := mqttKickCodes[r]; ok {
		return c
	}
	return mqtt.UnspecifiedError
}

// MQTTKickReason is the kickout a DISCONNECT's reason code from boat
// stands for; KICKOUT_REASON_UNSPECIFIED for another code.
func MQTTKickReason(code byte) msgpb.KickoutReason {
	for r, c := range mqttKickCodes {
		if c == code {
			return r
		}
	}
	return msgpb.KickoutReason_KICKOUT_REASON_UNSPECIFIED
}

// mqttConn is an MQTT connection as a clientConn. Recv runs on the
// session's receive goroutine, Send on its sender; writes of either go
// under wmu.
type mqttConn struct {
	nc           net.Conn
	r            *bufio.Reader
	ctx          context.Context
	maxSize      int
	writeTimeout time.Duration

	level         byte
	cleanStart    bool
	username      string
	assignID      bool
	keepAlive     uint16
	clientMaxSize int

	// connected is closed once CONNACK is sent: uid is set.
	connected chan struct{}
	uid       string

	// window holds a place per QoS 1 PUBLISH not yet PUBACKed: at most
	// the client's Receive Maximum are in flight.
	window  chan struct{}
	sendMax int

	mu       sync.Mutex
	nextID   uint16
	inflight map[uint16]int64 // packet id → seq
	// subs are the SUBSCRIBEs and UNSUBSCRIBEs waiting for room answers,
	// by request id.
	subs map[int64]mqttRoomReq

	// pending are the payloads a SUBSCRIBE or UNSUBSCRIBE asked for and
	// Recv has not returned yet (receive goroutine only).
	pending []*msgpb.ClientPayload
	reqID   int64

	wmu   sync.Mutex
	wbuf  []byte
	ended atomic.Bool // a CONNACK refusal or DISCONNECT was sent
}

// mqttRoomReq is a room join or leave of a SUBSCRIBE or UNSUBSCRIBE: its
// answer is the reason code of filter idx.
type mqttRoomReq struct {
	id  int64
	ack *mqttPendingAck
	idx int
}

// mqttPendingAck is a SUBACK or UNSUBACK waiting for its room answers.
type mqttPendingAck struct {
	sub      bool
	packetID uint16
	codes    []byte
	waiting  int
	reasons  []string
}

func (c *mqttConn) Context() context.Context { return c.ctx }

// write sends one packet; deadline bounds it when set.
func (c *mqttConn) write(p mqtt.Packet, deadline time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.ended.Load() {
		return errors.New("mqtt connection ended")
	}
	var err error
	if c.wbuf, err = mqtt.Encode(c.wbuf[:0], p, c.level); err != nil {
		return err
	}
	if deadline > 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(deadline))
		defer c.nc.SetWriteDeadline(time.Time{})
	}
	_, err = c.nc.Write(c.wbuf)
	if cap(c.wbuf) > 4<<10 {
		c.wbuf = nil // an idle session holds no large buffer
	}
	return err
}

// closeProps are a refusal's or DISCONNECT's properties: the reason string
// and gomsg's close code.
func closeProps(reason string, closeCode int) mqtt.Props {
	if len(reason) > 1024 {
		reason = reason[:1024]
	}
	return mqtt.Props{ReasonString: reason, User: []mqtt.UserProperty{{Key: MQTTPropCloseCode, Value: strconv.Itoa(closeCode)}}}
}

// refuse answers the CONNECT with a refusal (MQTT 3.1.1: the nearest
// return code) and ends the connection.
func (c *mqttConn) refuse(code byte, reason string, closeCode int) {
	if c.level == mqtt.V311 {
		code = v311ConnackCode(code)
	}
	_ = c.write(&mqtt.Connack{ReasonCode: code, Props: closeProps(reason, closeCode)}, time.Second)
	c.ended.Store(true)
}

func v311ConnackCode(code byte) byte {
	switch code {
	case mqtt.UnsupportedProtocolVersion:
		return 1
	case mqtt.ClientIDNotValid:
		return 2
	case mqtt.ServerUnavailable, mqtt.ServerBusy, mqtt.ConnectionRateExceeded, mqtt.QuotaExceeded:
		return 3
	case mqtt.BadUserNameOrPassword:
		return 4
	}
	return 5
}

// disconnect sends a DISCONNECT (MQTT 3.1.1 has none from a server: the
// connection just closes) and ends the connection.
func (c *mqttConn) disconnect(code byte, reason string, closeCode int) {
	if c.level == mqtt.V5 {
		_ = c.write(&mqtt.Disconnect{ReasonCode: code, Props: closeProps(reason, closeCode)}, time.Second)
	}
	c.ended.Store(true)
}

// errMQTTClosed is a DISCONNECT the client sent, or its connection closing.
var errMQTTClosed = errors.New("mqtt connection closed by the client")

func (c *mqttConn) Recv() (*msgpb.ClientPayload, error) {
	for {
		if len(c.pending) > 0 {
			p := c.pending[0]
			c.pending = c.pending[1:]
			return p, nil
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(time.Duration(c.keepAlive) * 1500 * time.Millisecond))
		p, err := mqtt.ReadPacket(c.r, c.level, c.maxSize)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && c.ctx.Err() == nil {
				return nil, &mqtt.Error{Code: mqtt.KeepAliveTimeout, Msg: fmt.Sprintf("nothing received for 1.5 times the keep alive (%d s)", c.keepAlive)}
			}
			var e *mqtt.Error
			if errors.As(err, &e) {
				return nil, e
			}
			return nil, fmt.Errorf("%w: %w", errMQTTClosed, err)
		}
		switch p := p.(type) {
		case *mqtt.Ack:
			if p.Type != mqtt.TypePuback {
				return nil, &mqtt.Error{Code: mqtt.ProtocolError, Msg: "QoS 2 packet: this server sends QoS 0 and 1 only"}
			}
			c.mu.Lock()
			seq, ok := c.inflight[p.PacketID]
			delete(c.inflight, p.PacketID)
			c.mu.Unlock()
			if !ok {
				continue // a PUBACK repeated; nothing to ACK
			}
			<-c.window
			return &msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ack{Ack: &msgpb.Ack{Seqs: []int64{seq}}}}, nil
		case *mqtt.Pingreq:
			return &msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ping{Ping: &msgpb.Ping{}}}, nil
		case *mqtt.Subscribe:
			if err := c.subscribe(p.PacketID, true, p.Subs); err != nil {
				return nil, err
			}
		case *mqtt.Unsubscribe:
			subs := make([]mqtt.Subscription, len(p.Filters))
			for i, f := range p.Filters {
				subs[i].Filter = f
			}
			if err := c.subscribe(p.PacketID, false, subs); err != nil {
				return nil, err
			}
		case *mqtt.Publish:
			// Push only: nothing a device publishes goes anywhere.
			const why = "devices do not publish: gomsg pushes to devices only"
			if p.QoS == 0 {
				return nil, &mqtt.Error{Code: mqtt.NotAuthorized, Msg: why}
			}
			typ := byte(mqtt.TypePuback)
			if p.QoS == 2 {
				typ = mqtt.TypePubrec
			}
			if err := c.write(&mqtt.Ack{Type: typ, PacketID: p.PacketID, ReasonCode: mqtt.NotAuthorized,
				Props: mqtt.Props{ReasonString: why}}, c.writeTimeout); err != nil {
				return nil, fmt.Errorf("%w: %w", errMQTTClosed, err)
			}
		case *mqtt.Disconnect:
			return nil, errMQTTClosed
		default:
			return nil, &mqtt.Error{Code: mqtt.ProtocolError, Msg: fmt.Sprintf("a client does not send %T", p)}
		}
	}
}

// subscribe answers a SUBSCRIBE (sub) or UNSUBSCRIBE: the own topic at once,
// rooms once the boat answers the joins or leaves it queues in pending.
func (c *mqttConn) subscribe(packetID uint16, sub bool, subs []mqtt.Subscription) error {
	select {
	case <-c.connected:
	case <-c.ctx.Done(): // the CONNECT was refused after all
		return fmt.Errorf("%w: %w", errMQTTClosed, c.ctx.Err())
	}
	a := &mqttPendingAck{sub: sub, packetID: packetID, codes: make([]byte, len(subs)), reasons: make([]string, len(subs))}
	var reqs []mqttRoomReq
	for i, s := range subs {
		f := s.Filter
		switch {
		case f == MQTTUserPrefix+c.uid:
			// Always subscribed, at QoS 1 (gomsg's ACK is the PUBACK).
			if sub {
				a.codes[i] = mqtt.GrantedQoS1
			} else {
				a.codes[i], a.reasons[i] = mqtt.ImplementationSpecificError, f+": the own topic stays subscribed while connected"
			}
		case f == MQTTBroadcastTopic:
			a.codes[i] = mqtt.Success // always subscribed, QoS 0
		case strings.ContainsAny(f, "#+"):
			a.codes[i], a.reasons[i] = mqtt.WildcardSubsNotSupported, f+": wildcards are not supported"
			if !sub {
				a.codes[i] = mqtt.NoSubscriptionExisted
			}
		case strings.HasPrefix(f, MQTTRoomPrefix):
			c.reqID++
			reqs = append(reqs, mqttRoomReq{id: c.reqID, ack: a, idx: i})
			room := strings.TrimPrefix(f, MQTTRoomPrefix)
			if sub {
				c.pending = append(c.pending, &msgpb.ClientPayload{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Room: room, Id: c.reqID}}})
			} else {
				c.pending = append(c.pending, &msgpb.ClientPayload{Body: &msgpb.ClientPayload_LeaveRoom{LeaveRoom: &msgpb.LeaveRoom{Room: room, Id: c.reqID}}})
			}
		default:
			a.codes[i], a.reasons[i] = mqtt.NotAuthorized, f+": a device subscribes to its own topic "+MQTTUserPrefix+c.uid+" and to rooms "+MQTTRoomPrefix+"<room> only"
			if !sub {
				a.codes[i] = mqtt.NoSubscriptionExisted
			}
		}
	}
	if len(reqs) == 0 {
		return c.writeSubAck(a)
	}
	a.waiting = len(reqs)
	c.mu.Lock()
	for _, r := range reqs {
		c.subs[r.id] = r
	}
	c.mu.Unlock()
	return nil
}

// roomAnswered fills a pending SUBACK or UNSUBACK with one room's answer
// and sends it once every room has answered.
func (c *mqttConn) roomAnswered(r *msgpb.RoomAnswer) error {
	c.mu.Lock()
	req, ok := c.subs[r.GetId()]
	delete(c.subs, r.GetId())
	if !ok {
		c.mu.Unlock()
		return nil
	}
	a := req.ack
	switch codes.Code(r.GetStatus()) {
	case codes.OK:
		a.codes[req.idx] = mqtt.Success
	case codes.PermissionDenied:
		a.codes[req.idx] = mqtt.NotAuthorized
	case codes.ResourceExhausted:
		a.codes[req.idx] = mqtt.QuotaExceeded
	case codes.InvalidArgument:
		a.codes[req.idx] = mqtt.TopicFilterInvalid
	default:
		a.codes[req.idx] = mqtt.UnspecifiedError
	}
	if r.GetStatus() != 0 {
		a.reasons[req.idx] = MQTTRoomPrefix + r.GetRoom() + ": " + r.GetMessage()
	}
	a.waiting--
	done := a.waiting == 0
	c.mu.Unlock()
	if !done {
		return nil
	}
	return c.writeSubAck(a)
}

func (c *mqttConn) writeSubAck(a *mqttPendingAck) error {
	var reasons []string
	for i, r := range a.reasons {
		if r != "" {
			reasons = append(reasons, r)
		}
		if c.level == mqtt.V311 && a.codes[i] >= 0x80 {
			a.codes[i] = 0x80
		}
	}
	props := mqtt.Props{ReasonString: strings.Join(reasons, "; ")}
	if a.sub {
		return c.write(&mqtt.Suback{PacketID: a.packetID, ReasonCodes: a.codes, Props: props}, c.writeTimeout)
	}
	return c.write(&mqtt.Unsuback{PacketID: a.packetID, ReasonCodes: a.codes, Props: props}, c.writeTimeout)
}

func (c *mqttConn) Send(p *msgpb.ServerPayload) error {
	switch body := p.GetBody().(type) {
	case *msgpb.ServerPayload_Connected:
		return c.connack(body.Connected)
	case *msgpb.ServerPayload_Messages:
		for _, m := range body.Messages.GetMsgs() {
			if err := c.publish(MQTTUserPrefix+c.uid, m, m.GetOptions()&uint32(msgpb.Option_NEED_ACK) != 0); err != nil {
				return err
			}
		}
	case *msgpb.ServerPayload_RoomMessages:
		topic := MQTTBroadcastTopic
		if r := body.RoomMessages.GetRoom(); r != "" {
			topic = MQTTRoomPrefix + r
		}
		for _, m := range body.RoomMessages.GetMsgs() {
			if err := c.publish(topic, m, false); err != nil {
				return err
			}
		}
	case *msgpb.ServerPayload_Pong:
		return c.write(&mqtt.Pingresp{}, 0)
	case *msgpb.ServerPayload_Kickout:
		r := body.Kickout.GetReason()
		c.disconnect(mqttKickCode(r), r.String()+": "+body.Kickout.GetMessage(), msgpb.CloseCodeOfKickout(r))
	case *msgpb.ServerPayload_RoomAnswer:
		return c.roomAnswered(body.RoomAnswer)
	}
	// Ready has no MQTT form; DeviceRegistered and PullResult answer
	// requests an MQTT device cannot make.
	return nil
}

func (c *mqttConn) SendFrame(f *encodedFrame) error {
	p := &msgpb.ServerPayload{}
	if err := protobuf.Unmarshal(f.b, p); err != nil {
		return err
	}
	return c.Send(p)
}

// connack accepts the CONNECT. A user name other than the token's uid is
// refused here, once station has said whose the token is.
func (c *mqttConn) connack(cd *msgpb.Connected) error {
	if c.username != "" && c.username != cd.GetUid() {
		c.refuse(mqtt.BadUserNameOrPassword, "INVALID_TOKEN: user name "+strconv.Quote(c.username)+" is not the token's uid; send the uid or no user name", msgpb.CloseUnauthenticated)
		return errors.New("mqtt user name is not the token's uid")
	}
	c.uid = cd.GetUid()
	props := mqtt.Props{
		MaximumQoS: 1, RetainAvailable: 0, WildcardAvailable: 0, SubIDAvailable: 0, SharedAvailable: 0,
		MaxPacketSize: uint32(c.maxSize),
		User:          []mqtt.UserProperty{{Key: "sid", Value: cd.GetSid()}, {Key: "uid", Value: cd.GetUid()}, {Key: "platform", Value: cd.GetPlatform()}},
	}
	props.Set(mqtt.PropMaximumQoS)
	props.Set(mqtt.PropRetainAvailable)
	props.Set(mqtt.PropWildcardAvailable)
	props.Set(mqtt.PropSubIDAvailable)
	props.Set(mqtt.PropSharedAvailable)
	props.ServerKeepAlive = c.keepAlive
	if c.assignID {
		props.AssignedClientID = cd.GetSid()
	}
	err := c.write(&mqtt.Connack{SessionPresent: !c.cleanStart, Props: props}, 0)
	close(c.connected)
	return err
}

// publish sends one message: QoS 1 when it needs an ACK (the PUBACK is the
// ACK), QoS 0 otherwise. The payload is a text or bytes body itself, or the
// body's protobuf encoding, its type in a user property.
func (c *mqttConn) publish(topic string, m *msgpb.Message, qos1 bool) error {
	pub := &mqtt.Publish{Topic: topic, Props: mqtt.Props{User: []mqtt.UserProperty{
		{Key: MQTTPropSeq, Value: strconv.FormatInt(m.GetSeq(), 10)},
		{Key: MQTTPropOptions, Value: strconv.FormatUint(uint64(m.GetOptions()), 10)},
		{Key: MQTTPropTimestamp, Value: strconv.FormatInt(m.GetTimestamp(), 10)},
		{Key: MQTTPropType, Value: m.GetBody().GetTypeUrl()},
	}}}
	pub.Payload, pub.Props.PayloadFormat, pub.Props.ContentType = mqttPayload(m)
	if c.clientMaxSize > 0 && mqttPublishSize(pub) > c.clientMaxSize {
		// The client takes no packet this large: it is dropped (an
		// unACKed message stays stored, if it was to be).
		return nil
	}
	if qos1 {
		select {
		case c.window <- struct{}{}:
		case <-c.ctx.Done():
			return c.ctx.Err()
		}
		pub.QoS = 1
		c.mu.Lock()
		if len(c.inflight) >= 65535 {
			c.mu.Unlock()
			return errors.New("mqtt: 65535 messages in flight")
		}
		for {
			c.nextID++
			if _, used := c.inflight[c.nextID]; c.nextID != 0 && !used {
				break
			}
		}
		pub.PacketID = c.nextID
		c.inflight[c.nextID] = m.GetSeq()
		c.mu.Unlock()
	}
	return c.write(pub, 0)
}

func mqttPublishSize(p *mqtt.Publish) int {
	n := 2 + len(p.Topic) + 2 + len(p.Payload) + 8 + len(p.Props.ContentType)
	for _, u := range p.Props.User {
		n += 5 + len(u.Key) + len(u.Value)
	}
	return mqtt.Size(n)
}

// mqttPayload is a message's PUBLISH payload, payload format indicator and
// content type: a StringValue's text, a BytesValue's bytes, or any other
// body's protobuf encoding.
func mqttPayload(m *msgpb.Message) ([]byte, byte, string) {
	body := m.GetBody()
	switch body.GetTypeUrl() {
	case "type.googleapis.com/google.protobuf.StringValue":
		var s wrapperspb.StringValue
		if protobuf.Unmarshal(body.GetValue(), &s) == nil {
			return []byte(s.GetValue()), 1, "text/plain; charset=utf-8"
		}
	case "type.googleapis.com/google.protobuf.BytesValue":
		var v wrapperspb.BytesValue
		if protobuf.Unmarshal(body.GetValue(), &v) == nil {
			return v.GetValue(), 0, "application/octet-stream"
		}
	}
	return body.GetValue(), 0, "application/x-protobuf"
}
