package bench

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/pb/msgpb"
)

// dialFrom returns a dialer bound to source address 127.0.0.<2+i%spread>, so
// that many connections to one loopback port do not run out of one source
// address's ephemeral ports (32768–60999 on this machine). Only loopback
// targets are dialled.
func dialFrom(i, spread int) func(context.Context, string) (net.Conn, error) {
	ip := net.IPv4(127, 0, 0, byte(2+i%spread))
	return func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
		return d.DialContext(ctx, "tcp", addr)
	}
}

// dial opens one client connection from the i-th source address. Small
// buffers keep the tool's own memory low at 50,000 sessions; they do not
// change what the server allocates per connection.
func dial(addr string, i, spread int, tc *tls.Config) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(transport(tc)),
		grpc.WithContextDialer(dialFrom(i, spread)),
		grpc.WithReadBufferSize(4<<10), grpc.WithWriteBufferSize(4<<10),
		// Fixed windows, as the Go client's: no flow-control PING per message.
		grpc.WithStaticStreamWindowSize(1<<20), grpc.WithStaticConnWindowSize(1<<20),
	)
}

// transport is TLS with tc, plaintext when tc is nil.
func transport(tc *tls.Config) credentials.TransportCredentials {
	if tc == nil {
		return insecure.NewCredentials()
	}
	return credentials.NewTLS(tc)
}

// Transports the tool opens device sessions over.
const (
	TransportGRPC = "grpc" // the gomsg.msg.Msg/Loop stream
	TransportWS   = "ws"   // WebSocket at boat's /v1/connect
	TransportMQTT = "mqtt" // MQTT 5 at boat's --mqtt-addr
)

// clientStream is one device session's stream: a gRPC Msg/Loop stream or a
// WebSocket (wsStream). Recv is called by one goroutine; Send by one at a
// time.
type clientStream interface {
	Send(*msgpb.ClientPayload) error
	Recv() (*msgpb.ServerPayload, error)
}

var _ clientStream = msgpb.Msg_LoopClient(nil)

// sessions is the pool of device sessions the tool holds open.
type sessions struct {
	conns []*grpc.ClientConn // gRPC: the client connections the streams share
	ws    *wsDialer          // WebSocket: one connection per session
	mqtt  *mqttDialer        // MQTT: one connection per session
	list  []*session
	lat   *latencies

	// stuck is how many sessions (the first ones) never ACK; stuckLat
	// holds their latencies, lat everyone else's.
	stuck    int
	stuckLat *latencies

	// wantOptions are the options every pushed message asks for.
	wantOptions uint32
	// timed, when set, also records each receipt's latency with its send
	// time, so that a run can compare windows by send time (disconnect).
	timed *timedLatencies
	// window bounds (unix ns) in which deliveries count for throughput.
	winStart, winEnd atomic.Int64
	received         atomic.Int64 // messages received and ACKed, all time
	inWindow         atomic.Int64 // of those, received inside the window
	kickouts         atomic.Int64
	ended            atomic.Int64 // streams that ended while the pool was open
	// The same for the stuck sessions, which receive without ACKing.
	stuckReceived, stuckInWindow, stuckNeedAck atomic.Int64
	stuckKickouts, stuckEnded, stuckReconnects atomic.Int64
}

// session is one device stream: one uid on one platform. A stuck session
// reads its stream but never ACKs; with reconnect it opens a new stream for
// the same uid when boat ends the old one (as it does after ack_wait).
type session struct {
	idx       int
	uid       string
	sid       string
	stream    clientStream
	cancel    context.CancelFunc
	stuck     bool
	reconnect bool
	ctx       context.Context // the stream's context, for reconnects
	// dial opens a new stream for the session (ends with ctx).
	dial func(ctx context.Context) (clientStream, error)

	connected, ready, done chan struct{}

	// member, in a fanout run, is the session's room and what it received
	// there; nil otherwise.
	member *member
	// sendMu makes ACKs (sent by the receive loop) and JoinRoom (sent by
	// the joiner) one sender at a time.
	sendMu sync.Mutex

	mu           sync.Mutex
	got          map[int64]int32 // seq → times received
	wrong        int             // messages whose body names another session
	wrongOptions int             // messages with options other than the pushed ones
	err          error
}

// openConfig says how to open sessions.
type openConfig struct {
	// Transport is TransportGRPC (default) or TransportWS. ClientAddr is
	// boat's client stream address for gRPC, its WebSocket address for ws.
	Transport      string
	ClientAddr     string
	TLS            *tls.Config // nil: plaintext
	Secret         string
	Platform       string
	UIDPrefix      string
	N              int
	StreamsPerConn int
	SourceSpread   int
	Concurrency    int
	Timeout        time.Duration // for all sessions to be ready
	Progress       func(opened int)
	// WaitReady waits for the Ready payload (a gomsg boat); the floor
	// server sends only Connected.
	WaitReady bool
	// Stuck is how many sessions, the first ones, never ACK.
	// StuckReconnect has them open a new stream when theirs ends.
	Stuck          int
	StuckReconnect bool
	// Member, when set, gives session i its room: its token allows that
	// room, and the session records the room's messages (fanout).
	Member func(i int) *member
	// UIDs, when set, are the sessions' uids (N of them) instead of
	// UIDPrefix and the index: users connecting again.
	UIDs []string
	// WantOptions are the options the messages are pushed with, set before
	// the first stream opens: messages stored for the uids arrive at once.
	WantOptions uint32
	// Timed records each receipt's latency with its send time (sessions.timed).
	Timed bool
}

// openSessions connects cfg.N sessions and waits until each is connected
// (and ready, with WaitReady).
func openSessions(ctx context.Context, cfg openConfig) (*sessions, error) {
	if cfg.StreamsPerConn < 1 {
		cfg.StreamsPerConn = 1
	}
	if cfg.SourceSpread < 1 {
		cfg.SourceSpread = 16
	}
	if cfg.Concurrency < 1 {
		cfg.Concurrency = 128
	}
	if cfg.Stuck < 0 || cfg.Stuck > cfg.N {
		return nil, fmt.Errorf("stuck sessions: %d, want 0 to %d", cfg.Stuck, cfg.N)
	}
	if cfg.UIDs != nil && len(cfg.UIDs) != cfg.N {
		return nil, fmt.Errorf("uids: %d for %d sessions", len(cfg.UIDs), cfg.N)
	}
	p := &sessions{lat: newLatencies(), stuck: cfg.Stuck, stuckLat: newLatencies(), wantOptions: cfg.WantOptions}
	if cfg.Timed {
		p.timed = &timedLatencies{}
	}
	switch cfg.Transport {
	case TransportGRPC, "":
		nconns := (cfg.N + cfg.StreamsPerConn - 1) / cfg.StreamsPerConn
		for i := range nconns {
			c, err := dial(cfg.ClientAddr, i, cfg.SourceSpread, cfg.TLS)
			if err != nil {
				p.close()
				return nil, err
			}
			p.conns = append(p.conns, c)
		}
	case TransportWS:
		if cfg.StreamsPerConn != 1 {
			return nil, fmt.Errorf("streams per connection: %d, want 1 over WebSocket (one session per connection)", cfg.StreamsPerConn)
		}
		p.ws = newWSDialer(cfg.ClientAddr, cfg.SourceSpread, cfg.TLS)
	case TransportMQTT:
		if cfg.StreamsPerConn != 1 || cfg.Member != nil {
			return nil, errors.New("transport mqtt: one session per connection, no rooms")
		}
		p.mqtt = &mqttDialer{addr: cfg.ClientAddr, spread: cfg.SourceSpread, tls: cfg.TLS}
	default:
		return nil, fmt.Errorf("transport: %q, want %s, %s or %s", cfg.Transport, TransportGRPC, TransportWS, TransportMQTT)
	}
	p.list = make([]*session, cfg.N)
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var opened atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.Concurrency)
	for i := range cfg.N {
		g.Go(func() error {
			s, err := p.open(gctx, cfg, i)
			if err != nil {
				return fmt.Errorf("session %d: %w", i, err)
			}
			p.list[i] = s
			if n := opened.Add(1); cfg.Progress != nil && n%1000 == 0 {
				cfg.Progress(int(n))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		p.close()
		return nil, fmt.Errorf("open %d sessions (%d opened): %w", cfg.N, opened.Load(), err)
	}
	return p, nil
}

func (p *sessions) open(ctx context.Context, cfg openConfig, i int) (*session, error) {
	uid := fmt.Sprintf("%s%d", cfg.UIDPrefix, i)
	if cfg.UIDs != nil {
		uid = cfg.UIDs[i]
	}
	var m *member
	var rooms []string
	if cfg.Member != nil {
		m = cfg.Member(i)
		rooms = []string{m.room}
	}
	token, err := mintToken(cfg.Secret, uid, cfg.Platform, rooms)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	var dial func(context.Context) (clientStream, error)
	switch {
	case p.ws != nil:
		dial = func(ctx context.Context) (clientStream, error) { return p.ws.dial(ctx, i, token) }
	case p.mqtt != nil:
		dial = func(ctx context.Context) (clientStream, error) { return p.mqtt.dial(ctx, i, token) }
	default:
		sctx = metadata.AppendToOutgoingContext(sctx, "authorization", "Bearer "+token)
		client := msgpb.NewMsgClient(p.conns[i/cfg.StreamsPerConn])
		dial = func(ctx context.Context) (clientStream, error) { return client.Loop(ctx) }
	}
	stream, err := dial(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	stuck := i < cfg.Stuck
	s := &session{idx: i, uid: uid, stream: stream, cancel: cancel, ctx: sctx, dial: dial,
		stuck: stuck, reconnect: stuck && cfg.StuckReconnect, member: m,
		connected: make(chan struct{}), ready: make(chan struct{}), done: make(chan struct{}),
		got: make(map[int64]int32)}
	go s.loop(p)
	wait := s.connected
	if cfg.WaitReady {
		wait = s.ready
	}
	select {
	case <-wait:
		return s, nil
	case <-s.done:
		s.mu.Lock()
		err := s.err
		s.mu.Unlock()
		return nil, fmt.Errorf("stream ended before it was ready: %w", err)
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
}

// loop is the session's only receiver; it also sends the ACKs, so the
// stream has one sender. A stuck session with reconnect opens a new stream
// when its stream ends, until the pool closes.
func (s *session) loop(p *sessions) {
	defer close(s.done)
	for {
		connected, err := s.recv(p)
		if s.stuck {
			p.stuckEnded.Add(1)
		} else {
			p.ended.Add(1)
		}
		if s.reconnect && s.redial(p, !connected) {
			continue
		}
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		return
	}
}

// redial opens a new stream for a stuck session until it succeeds or the
// pool closes. After a stream that ended before Connected (boat refused it)
// and between failed attempts it waits 100 ms.
func (s *session) redial(p *sessions, pause bool) bool {
	for {
		if pause {
			select {
			case <-s.ctx.Done():
				return false
			case <-time.After(100 * time.Millisecond):
			}
		}
		if s.ctx.Err() != nil {
			return false
		}
		stream, err := s.dial(s.ctx)
		if err == nil {
			s.stream = stream
			p.stuckReconnects.Add(1)
			return true
		}
		pause = true
	}
}

// recv reads the stream until it ends and returns whether boat had
// accepted it (sent Connected) and why it ended.
func (s *session) recv(p *sessions) (connected bool, err error) {
	for {
		pl, err := s.stream.Recv()
		if err != nil {
			return connected, err
		}
		switch b := pl.GetBody().(type) {
		case *msgpb.ServerPayload_Connected:
			s.sid = b.Connected.GetSid()
			connected = true
			closeOnce(s.connected)
		case *msgpb.ServerPayload_Ready:
			closeOnce(s.ready)
		case *msgpb.ServerPayload_Kickout:
			if s.stuck {
				p.stuckKickouts.Add(1)
			} else {
				p.kickouts.Add(1)
			}
		case *msgpb.ServerPayload_Messages:
			s.deliver(p, b.Messages.GetMsgs())
		case *msgpb.ServerPayload_RoomAnswer:
			s.roomAnswer(b.RoomAnswer)
		case *msgpb.ServerPayload_RoomMessages:
			s.roomMessages(p, b.RoomMessages)
		}
	}
}

// closeOnce closes ch unless it is closed: a reconnected stream gets
// Connected and Ready again.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

func (s *session) deliver(p *sessions, msgs []*msgpb.Message) {
	now := time.Now().UnixNano()
	lat := p.lat
	if s.stuck {
		lat = p.stuckLat
	}
	var ack []int64
	s.mu.Lock()
	for _, m := range msgs {
		s.got[m.GetSeq()]++
		sent, target, ok := decodeBody(m.GetBody())
		if !ok || target != s.idx {
			s.wrong++
		}
		if ok && sent >= p.winStart.Load() {
			lat.add(s.idx, now-sent)
		}
		if ok && p.timed != nil {
			p.timed.add(s.idx, sent, now-sent, m.GetTimestamp())
		}
		if m.GetOptions() != p.wantOptions {
			s.wrongOptions++
		}
		if m.GetOptions()&uint32(msgpb.Option_NEED_ACK) != 0 {
			ack = append(ack, m.GetSeq())
		}
	}
	s.mu.Unlock()
	inWindow := now >= p.winStart.Load() && now <= p.winEnd.Load()
	if s.stuck {
		// Read, never ACKed.
		p.stuckNeedAck.Add(int64(len(ack)))
		p.stuckReceived.Add(int64(len(msgs)))
		if inWindow {
			p.stuckInWindow.Add(int64(len(msgs)))
		}
		return
	}
	if len(ack) > 0 {
		s.sendMu.Lock()
		err := s.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ack{Ack: &msgpb.Ack{Seqs: ack}}})
		s.sendMu.Unlock()
		if err != nil {
			return // the stream is ending; Recv reports why
		}
	}
	p.received.Add(int64(len(msgs)))
	if inWindow {
		p.inWindow.Add(int64(len(msgs)))
	}
}

// reset forgets what earlier load runs recorded, so that one pool serves
// several runs.
func (p *sessions) reset() {
	p.lat.reset()
	p.stuckLat.reset()
	for _, c := range []*atomic.Int64{&p.received, &p.inWindow, &p.kickouts, &p.ended,
		&p.stuckReceived, &p.stuckInWindow, &p.stuckNeedAck, &p.stuckKickouts, &p.stuckEnded, &p.stuckReconnects} {
		c.Store(0)
	}
	for _, s := range p.list {
		s.mu.Lock()
		s.got = make(map[int64]int32)
		s.wrong, s.wrongOptions = 0, 0
		s.mu.Unlock()
	}
}

// close ends every stream and connection.
func (p *sessions) close() {
	for _, s := range p.list {
		if s != nil {
			s.cancel()
		}
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	for _, s := range p.list {
		if s != nil {
			<-s.done
		}
	}
}

// bodyLen is the size of the bench payload: send time (unix ns) and the
// index of the target session.
const bodyLen = 12

const bytesValueURL = "type.googleapis.com/google.protobuf.BytesValue"

func encodeBody(sent int64, target int) *anypb.Any {
	b := make([]byte, bodyLen)
	binary.BigEndian.PutUint64(b, uint64(sent))
	binary.BigEndian.PutUint32(b[8:], uint32(target))
	a, _ := anypb.New(wrapperspb.Bytes(b)) // cannot fail for a known message
	return a
}

func decodeBody(a *anypb.Any) (sent int64, target int, ok bool) {
	// The encoding of a BytesValue of bodyLen bytes is its field 1 tag,
	// the length and the bytes: read them without unmarshalling (a fanout
	// run decodes a million a second on the machine it measures).
	if v := a.GetValue(); len(v) == 2+bodyLen && v[0] == 0x0a && v[1] == bodyLen && a.GetTypeUrl() == bytesValueURL {
		return int64(binary.BigEndian.Uint64(v[2:])), int(binary.BigEndian.Uint32(v[10:])), true
	}
	var v wrapperspb.BytesValue
	if a == nil || a.UnmarshalTo(&v) != nil || len(v.Value) != bodyLen {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(v.Value)), int(binary.BigEndian.Uint32(v.Value[8:])), true
}
