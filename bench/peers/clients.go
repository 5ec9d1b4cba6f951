package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/centrifugal/centrifuge-go"
	"github.com/eclipse/paho.golang/paho"
	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gomsg/gomsg/internal/bench"
)

// pool is the sessions the tool holds open, one per user, each subscribed
// to that user's own channel (Centrifugo) or topic (Mosquitto).
type pool struct {
	list []*conn

	mu  sync.Mutex
	lat []int64 // ns, of messages sent from the window's start on

	winStart, winEnd atomic.Int64 // unix ns
	received         atomic.Int64
	inWindow         atomic.Int64
	disconnects      atomic.Int64
	recoverable      atomic.Int64 // Centrifugo subscriptions the server made recoverable
}

// conn is one user's session.
type conn struct {
	idx   int
	uid   string
	topic string // what a publish for this user names

	close func()

	mu    sync.Mutex
	got   map[int64]int32 // seq → receipts
	wrong int             // receipts whose payload names another session or does not parse
}

// deliver records one received message.
func (p *pool) deliver(c *conn, data []byte) {
	now := time.Now().UnixNano()
	sent, target, seq, ok := decodePayload(data)
	c.mu.Lock()
	if !ok || target != c.idx {
		c.wrong++
	}
	if ok {
		c.got[seq]++
	}
	c.mu.Unlock()
	if ok && sent >= p.winStart.Load() {
		p.mu.Lock()
		p.lat = append(p.lat, now-sent)
		p.mu.Unlock()
	}
	p.received.Add(1)
	if now >= p.winStart.Load() && now <= p.winEnd.Load() {
		p.inWindow.Add(1)
	}
}

// reset forgets what an earlier run recorded.
func (p *pool) reset() {
	p.mu.Lock()
	p.lat = nil
	p.mu.Unlock()
	p.received.Store(0)
	p.inWindow.Store(0)
	p.disconnects.Store(0)
	for _, c := range p.list {
		c.mu.Lock()
		c.got, c.wrong = make(map[int64]int32), 0
		c.mu.Unlock()
	}
}

func (p *pool) closeAll() {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 128)
	for _, c := range p.list {
		if c == nil || c.close == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c.close()
		}()
	}
	wg.Wait()
}

// fill opens n sessions, 128 at a time; open must set p.list[i] before it
// returns. The first error, or a five-minute deadline, closes them all.
func fill(ctx context.Context, n int, open func(ctx context.Context, p *pool, i int, uid string) error) (*pool, error) {
	p := &pool{list: make([]*conn, n)}
	run := strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var once sync.Once
	var first error
	sem := make(chan struct{}, 128)
	var wg sync.WaitGroup
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := open(ctx, p, i, "peers-"+run+"-"+strconv.Itoa(i)); err != nil {
				once.Do(func() { first = fmt.Errorf("session %d: %w", i, err); cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		p.closeAll()
		return nil, fmt.Errorf("open %d sessions: %w", n, first)
	}
	return p, nil
}

// dialer binds a session's connection to one of the loopback source
// addresses, as gomsg-bench's sessions do.
func dialer(i, spread int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := bench.DialFrom(i, spread)
	return func(ctx context.Context, _, addr string) (net.Conn, error) { return d(ctx, addr) }
}

// openPool opens n Centrifugo sessions: a centrifuge-go client over
// WebSocket with the Protobuf protocol and a connection JWT (HS256, sub =
// the user), subscribed to its personal channel; with recovery on, the
// subscription is recoverable and positioned.
func (c *centrifugo) openPool(ctx context.Context, n, spread int) (*pool, error) {
	p, err := fill(ctx, n, func(ctx context.Context, p *pool, i int, uid string) error {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": uid, "exp": time.Now().Add(24 * time.Hour).Unix()}).
			SignedString([]byte(c.secret))
		if err != nil {
			return err
		}
		cl := centrifuge.NewProtobufClient(c.wsURL, centrifuge.Config{Token: tok, NetDialContext: dialer(i, spread), Name: "gomsg-peers"})
		s := &conn{idx: i, uid: uid, topic: channelOf(uid), got: make(map[int64]int32), close: cl.Close}
		p.list[i] = s
		sub, err := cl.NewSubscription(s.topic, centrifuge.SubscriptionConfig{Recoverable: c.recovery, Positioned: c.recovery})
		if err != nil {
			return err
		}
		subscribed := make(chan struct{})
		var once sync.Once
		var lastErr atomic.Value
		sub.OnPublication(func(e centrifuge.PublicationEvent) { p.deliver(s, e.Data) })
		sub.OnSubscribed(func(e centrifuge.SubscribedEvent) {
			once.Do(func() {
				if e.Recoverable {
					p.recoverable.Add(1)
				}
				close(subscribed)
			})
		})
		sub.OnError(func(e centrifuge.SubscriptionErrorEvent) { lastErr.Store(e.Error.Error()) })
		cl.OnError(func(e centrifuge.ErrorEvent) { lastErr.Store(e.Error.Error()) })
		cl.OnDisconnected(func(centrifuge.DisconnectedEvent) { p.disconnects.Add(1) })
		if err := sub.Subscribe(); err != nil {
			return err
		}
		if err := cl.Connect(); err != nil {
			return err
		}
		select {
		case <-subscribed:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("not subscribed: %w (last error: %v)", ctx.Err(), lastErr.Load())
		}
	})
	if err == nil && c.recovery && p.recoverable.Load() != int64(n) {
		p.closeAll()
		return nil, fmt.Errorf("recovery: %d of %d subscriptions recoverable", p.recoverable.Load(), n)
	}
	return p, err
}

// MQTT sessions: MQTT 5 with eclipse/paho.golang, client id = the user,
// clean start false with a one-hour session expiry (a persistent session,
// which keeps its subscription and queued messages while the device is
// away), Receive Maximum 1,000, subscribed at QoS 1 to u/<uid>. The
// handler counts a message; the library PUBACKs it when the handler
// returns.
const (
	mqttReceiveMaximum = 1000
	mqttSessionExpiry  = 3600 // seconds
)

func topicOf(uid string) string { return "u/" + uid }

// bufConn reads through a buffer: paho reads each packet's header byte by
// byte from its connection. Writes stay on the TCP connection itself.
type bufConn struct {
	*net.TCPConn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func buffered(c net.Conn) net.Conn {
	if tc, ok := c.(*net.TCPConn); ok {
		return &bufConn{TCPConn: tc, r: bufio.NewReaderSize(tc, 4096)}
	}
	return c
}

func mqttConnect(ctx context.Context, cl *paho.Client, id string, persistent bool) error {
	rm := uint16(mqttReceiveMaximum)
	props := &paho.ConnectProperties{ReceiveMaximum: &rm}
	if persistent {
		exp := uint32(mqttSessionExpiry)
		props.SessionExpiryInterval = &exp
	}
	ca, err := cl.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: !persistent, KeepAlive: 60, Properties: props})
	if err != nil {
		if ca != nil {
			return fmt.Errorf("connect %s: reason %#x: %w", id, ca.ReasonCode, err)
		}
		return fmt.Errorf("connect %s: %w", id, err)
	}
	return nil
}

func (m *mosquitto) openPool(ctx context.Context, n, spread int) (*pool, error) {
	return fill(ctx, n, func(ctx context.Context, p *pool, i int, uid string) error {
		raw, err := dialer(i, spread)(ctx, "tcp", m.addr)
		if err != nil {
			return err
		}
		s := &conn{idx: i, uid: uid, topic: topicOf(uid), got: make(map[int64]int32)}
		var lost atomic.Bool
		drop := func() {
			if !lost.Swap(true) {
				p.disconnects.Add(1)
			}
		}
		cl := paho.NewClient(paho.ClientConfig{
			Conn: buffered(raw),
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(r paho.PublishReceived) (bool, error) {
				p.deliver(s, r.Packet.Payload)
				return true, nil
			}},
			OnClientError:      func(error) { drop() },
			OnServerDisconnect: func(*paho.Disconnect) { drop() },
			PacketTimeout:      30 * time.Second,
		})
		// A normal DISCONNECT: the broker keeps the session, as it would a
		// device's that went away.
		s.close = func() { _ = cl.Disconnect(&paho.Disconnect{ReasonCode: 0}) }
		p.list[i] = s
		if err := mqttConnect(ctx, cl, uid, true); err != nil {
			return err
		}
		sa, err := cl.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: s.topic, QoS: 1}}})
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", s.topic, err)
		}
		if len(sa.Reasons) != 1 || sa.Reasons[0] != 1 {
			return fmt.Errorf("subscribe %s: granted %v, want QoS 1", s.topic, sa.Reasons)
		}
		return nil
	})
}

// publisher sends one message to one user's channel or topic and returns
// once the system accepted it.
type publisher interface {
	publish(ctx context.Context, topic string, data []byte) error
	close()
}

// mqttPublisher publishes at QoS 1 over a few connections (no session
// needed); a publish is done at the broker's PUBACK.
type mqttPublisher struct {
	clients []*paho.Client
	next    atomic.Uint64
}

// errNoSubscribers: PUBACK reason 0x10 — the topic had no subscription,
// which a persistent session keeps even while away; a failed publish.
var errNoSubscribers = errors.New("publish: PUBACK 0x10, no matching subscribers")

func (m *mosquitto) newPublisher(ctx context.Context, conns int) (publisher, error) {
	p := &mqttPublisher{}
	run := strconv.FormatInt(time.Now().UnixNano()%1e12, 36)
	var d net.Dialer
	for k := range conns {
		raw, err := d.DialContext(ctx, "tcp", m.addr)
		if err != nil {
			p.close()
			return nil, err
		}
		cl := paho.NewClient(paho.ClientConfig{Conn: buffered(raw), PacketTimeout: 30 * time.Second})
		p.clients = append(p.clients, cl)
		if err := mqttConnect(ctx, cl, fmt.Sprintf("peers-pub-%s-%d", run, k), false); err != nil {
			p.close()
			return nil, err
		}
	}
	return p, nil
}

func (p *mqttPublisher) publish(ctx context.Context, topic string, data []byte) error {
	c := p.clients[p.next.Add(1)%uint64(len(p.clients))]
	r, err := c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: data})
	if err != nil {
		return err
	}
	if r != nil && r.ReasonCode == 0x10 {
		return errNoSubscribers
	}
	return nil
}

func (p *mqttPublisher) close() {
	for _, c := range p.clients {
		_ = c.Disconnect(&paho.Disconnect{ReasonCode: 0})
	}
}

// grpcPublisher calls Centrifugo's gRPC server API,
// CentrifugoApi/Publish, with the API key, over a few connections. Its two
// messages are encoded by hand (PublishRequest: channel 1, data 2;
// PublishResponse: error 1 {code 1, message 2}), which keeps Centrifugo's
// own packages out of this module.
type grpcPublisher struct {
	conns []*grpc.ClientConn
	next  atomic.Uint64
	md    metadata.MD
}

const publishMethod = "/centrifugal.centrifugo.api.CentrifugoApi/Publish"

func (c *centrifugo) newPublisher(_ context.Context, conns int) (publisher, error) {
	p := &grpcPublisher{md: metadata.Pairs("authorization", "apikey "+c.apiKey)}
	for range conns {
		cc, err := grpc.NewClient("passthrough:///"+c.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
		if err != nil {
			p.close()
			return nil, err
		}
		p.conns = append(p.conns, cc)
	}
	return p, nil
}

func (p *grpcPublisher) publish(ctx context.Context, channel string, data []byte) error {
	req := protowire.AppendTag(nil, 1, protowire.BytesType)
	req = protowire.AppendString(req, channel)
	req = protowire.AppendTag(req, 2, protowire.BytesType)
	req = protowire.AppendBytes(req, data)
	var resp []byte
	c := p.conns[p.next.Add(1)%uint64(len(p.conns))]
	if err := c.Invoke(metadata.NewOutgoingContext(ctx, p.md), publishMethod, &req, &resp); err != nil {
		return err
	}
	return publishError(resp)
}

// publishError returns the error a PublishResponse carries, if any.
func publishError(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errors.New("publish: malformed response")
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errors.New("publish: malformed response")
			}
			b = b[n:]
			continue
		}
		e, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errors.New("publish: malformed error")
		}
		var code uint64
		var msg string
		for len(e) > 0 {
			num, typ, k := protowire.ConsumeTag(e)
			if k < 0 {
				break
			}
			e = e[k:]
			switch {
			case num == 1 && typ == protowire.VarintType:
				code, k = protowire.ConsumeVarint(e)
			case num == 2 && typ == protowire.BytesType:
				var s []byte
				s, k = protowire.ConsumeBytes(e)
				msg = string(s)
			default:
				k = protowire.ConsumeFieldValue(num, typ, e)
			}
			if k < 0 {
				break
			}
			e = e[k:]
		}
		if code != 0 {
			return fmt.Errorf("publish: centrifugo error %d: %s", code, msg)
		}
		return nil
	}
	return nil
}

func (p *grpcPublisher) close() {
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// rawCodec passes hand-encoded protobuf through gRPC under the name proto.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*b = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// The payload is the JSON array [sent, target, seq] — the publish call's
// start (unix ns), the target session's index, a seq unique in the run —
// valid JSON, as Centrifugo's API wants.
func encodePayload(dst []byte, sent int64, target int, seq int64) []byte {
	dst = append(dst, '[')
	dst = strconv.AppendInt(dst, sent, 10)
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, int64(target), 10)
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, seq, 10)
	return append(dst, ']')
}

func decodePayload(b []byte) (sent int64, target int, seq int64, ok bool) {
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return 0, 0, 0, false
	}
	var v [3]int64
	rest := b[1 : len(b)-1]
	for k := range 3 {
		end := len(rest)
		for i, ch := range rest {
			if ch == ',' {
				end = i
				break
			}
		}
		if (k < 2) != (end < len(rest)) {
			return 0, 0, 0, false
		}
		n, err := strconv.ParseInt(string(rest[:end]), 10, 64)
		if err != nil {
			return 0, 0, 0, false
		}
		v[k] = n
		if end < len(rest) {
			rest = rest[end+1:]
		}
	}
	return v[0], int(v[1]), v[2], true
}
