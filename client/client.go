package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/pb/msgpb"
)

// Client is one device's connection to gomsg: it keeps a session open on a
// boat until it is closed. Its methods are safe for concurrent use.
type Client struct {
	addr   string
	tokens TokenSource
	cfg    config
	seen   *dedup
	// pullMu lets one Pull at a time use pullAcks.
	pullMu sync.Mutex
	// pullIDs numbers the Pull requests; pullAcks are seqs the next Pull
	// ACKs on the application's behalf (see Pull).
	pullIDs  int64
	pullAcks []int64

	mu sync.Mutex
	// cur is the session up now (nil: none).
	cur *session
	// up is closed when a session comes up, then replaced.
	up chan struct{}
	// rooms are the rooms every session joins.
	rooms   map[string]struct{}
	started bool
	closed  bool
	cancel  context.CancelFunc
	// stopped is closed once the client stopped for good.
	stopped  chan struct{}
	stopOnce sync.Once
}

// New returns a client of the boat at addr ("host:port"); Run connects it.
// tokens gives the device token before every connect.
func New(addr string, tokens TokenSource, opts ...Option) (*Client, error) {
	if addr == "" {
		return nil, errors.New("gomsg client: addr is empty")
	}
	if tokens == nil {
		return nil, errors.New("gomsg client: tokens (the TokenSource) is nil")
	}
	cfg := config{dedup: DefaultDedup, minWait: DefaultMinBackoff, maxWait: DefaultMaxBackoff,
		connectTimeout: DefaultConnectTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.dedup < 1:
		return nil, fmt.Errorf("gomsg client: WithDedup(%d): must be at least 1", cfg.dedup)
	case cfg.minWait <= 0 || cfg.maxWait < cfg.minWait:
		return nil, fmt.Errorf("gomsg client: WithBackoff(%s, %s): want 0 < min <= max", cfg.minWait, cfg.maxWait)
	case cfg.connectTimeout <= 0:
		return nil, fmt.Errorf("gomsg client: WithConnectTimeout(%s): must be positive", cfg.connectTimeout)
	}
	c := &Client{addr: addr, tokens: tokens, cfg: cfg, seen: newDedup(cfg.dedup),
		up: make(chan struct{}), rooms: map[string]struct{}{}, stopped: make(chan struct{})}
	for _, r := range cfg.rooms {
		c.rooms[r] = struct{}{}
	}
	return c, nil
}

// Run connects and keeps the client connected until ctx ends or Close is
// called (it then returns nil), or until the server ends or refuses the
// session with a close code in the protocol's stop range (CloseCode,
// msgpb.CloseStops): a *KickoutError that errors.Is ErrNewSession, or a gRPC
// status error (status.Code reads it) such as Unauthenticated (once a
// connect with a fresh token from the TokenSource was refused too),
// PermissionDenied or InvalidArgument (e.g. a token for an unknown
// platform). A
// client runs once: a second Run, or a Run after Close, returns ErrClosed.
// Every goroutine and connection of the client has ended when Run returns.
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.started || c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.started = true
	ctx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	c.mu.Unlock()
	defer cancel()

	err := c.run(ctx)
	c.stop()
	c.emit(StateChange{State: Closed, Err: err, CloseCode: CloseCode(err)})
	return err
}

func (c *Client) run(ctx context.Context) error {
	conn, err := grpc.NewClient(c.addr, c.dialOptions()...)
	if err != nil {
		return fmt.Errorf("gomsg client: %w", err)
	}
	defer conn.Close()
	mc := msgpb.NewMsgClient(conn)
	attempt := 0
	// refused: the last connect's token was refused, and the one before
	// it too unless a session came up in between.
	refused := false
	for {
		c.emit(StateChange{State: Connecting})
		start := time.Now()
		s, err := c.connect(ctx, mc)
		var info Session
		if err == nil {
			refused = false
			info = s.info
			err = c.serve(s)
		}
		if ctx.Err() != nil {
			return nil
		}
		code := CloseCode(err)
		var wait time.Duration
		switch {
		case code == msgpb.CloseUnauthenticated && !refused:
			// A refused token: once more at once, with a fresh one.
			refused = true
		case msgpb.CloseStops(code):
			return err // Closed tells
		case code == msgpb.CloseServerDraining:
			// Reconnect at once (to another boat).
		default:
			if s != nil && time.Since(start) >= c.cfg.maxWait {
				attempt = 0 // a session that stayed up: start the backoff again
			}
			attempt++
			wait = backoffWait(c.cfg.minWait, c.cfg.maxWait, attempt)
		}
		c.emit(StateChange{State: Disconnected, Session: info, Err: err, CloseCode: code, RetryIn: wait})
		if !sleep(ctx, wait) {
			return nil
		}
	}
}

// CloseCode is the close code of the protocol (see msgpb.CloseStops) that
// err, a session's end or a refused connect, carries: the one of its
// Kickout reason or of its gRPC status code. It is 0 for an end that
// carries none — a handler's error, a token source's, a stream that ended
// without a status — after which the client reconnects.
func CloseCode(err error) int {
	var he *HandlerError
	var te *tokenSourceError
	var ke *KickoutError
	switch {
	case err == nil, errors.As(err, &he), errors.As(err, &te):
		return 0
	case errors.As(err, &ke):
		return msgpb.CloseCodeOfKickout(ke.Reason)
	}
	if st, ok := status.FromError(err); ok {
		return msgpb.CloseCodeOfStatus(st.Code())
	}
	return 0
}

// tokenSourceError is the TokenSource's error: the client retries after a
// backoff whatever it is.
type tokenSourceError struct{ err error }

func (e *tokenSourceError) Error() string { return "gomsg client: token source: " + e.err.Error() }
func (e *tokenSourceError) Unwrap() error { return e.err }

// Close stops the client: Run returns soon after (Close does not wait for
// it). Close may be called more than once, and from a handler. The
// handlers' context ends at once, and no message is handed over after;
// the ACKs of the messages handled before (and of Ack calls made before)
// still reach the server: the client half-closes the stream after them and
// waits for the server to end it, at most 2 s. The same holds when Run's
// ctx ends.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	cancel, started := c.cancel, c.started
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if !started {
		c.stop()
	}
	return nil
}

func (c *Client) stop() {
	c.mu.Lock()
	c.cur = nil
	c.mu.Unlock()
	c.stopOnce.Do(func() { close(c.stopped) })
}

func (c *Client) emit(sc StateChange) {
	if c.cfg.stateHandler != nil {
		c.cfg.stateHandler(sc)
	}
}

func (c *Client) dialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if !c.cfg.insecure {
		conf := c.cfg.tls
		if conf == nil {
			conf = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(conf)
	}
	return append([]grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(connectParams),
		grpc.WithStaticStreamWindowSize(receiveWindow), grpc.WithStaticConnWindowSize(receiveWindow)}, c.cfg.dialOpts...)
}

// receiveWindow is how much boat may send the client before the client has
// read it, fixed. grpc-go's default sizes the window by sampling the link
// with a PING after each data frame that arrives while no sample is out:
// with one small message per frame that is a PING and its answer, on the
// device and on boat, for nearly every message. 1 MiB holds any message
// boat sends and many small ones.
const receiveWindow = 1 << 20

// connect fetches a token, opens a session and waits for the server's
// Connected answer; then it joins the client's rooms and makes the session
// the current one.
func (c *Client) connect(ctx context.Context, mc msgpb.MsgClient) (*session, error) {
	tctx, cancel := context.WithTimeout(ctx, c.cfg.connectTimeout)
	token, err := c.tokens(tctx)
	cancel()
	if err != nil {
		return nil, &tokenSourceError{err}
	}
	// The stream outlives ctx by a little: a client being closed sends the
	// ACKs of what it handled before the stream ends (closeGracefully).
	// Until the session is accepted there is nothing to send, and the end
	// of ctx ends the stream at once.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopEarly := context.AfterFunc(ctx, cancel)
	timer := time.AfterFunc(c.cfg.connectTimeout, cancel)
	md := []string{"authorization", "Bearer " + token}
	if c.cfg.pullOffline {
		md = append(md, offlineModeHeader, "pull")
	}
	stream, err := mc.Loop(metadata.AppendToOutgoingContext(sctx, md...))
	var first *msgpb.ServerPayload
	if err == nil {
		first, err = stream.Recv()
	}
	if !timer.Stop() && ctx.Err() == nil {
		cancel()
		return nil, status.Errorf(codes.DeadlineExceeded, "gomsg client: connect: no answer within %s", c.cfg.connectTimeout)
	}
	if !stopEarly() && err == nil {
		err = ctx.Err() // closed while connecting
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("gomsg client: connect: %w", err)
	}
	if k := first.GetKickout(); k != nil {
		cancel()
		return nil, &KickoutError{Reason: k.GetReason(), Message: k.GetMessage()}
	}
	cp := first.GetConnected()
	if cp == nil {
		cancel()
		return nil, fmt.Errorf("gomsg client: connect: first payload is %T, want Connected", first.GetBody())
	}
	hctx, hcancel := context.WithCancel(ctx)
	s := &session{info: Session{Sid: cp.GetSid(), UID: cp.GetUid(), Platform: cp.GetPlatform()},
		stream: stream, ctx: hctx, hcancel: hcancel, cancel: cancel, delivering: make(chan struct{}, 1),
		done: make(chan struct{}), pulls: map[int64]chan answer{},
		regGate: make(chan struct{}, 1), pullGate: make(chan struct{}, 1)}
	s.stopClose = context.AfterFunc(ctx, s.closeGracefully)
	c.mu.Lock()
	rooms := make([]string, 0, len(c.rooms))
	for r := range c.rooms {
		rooms = append(rooms, r)
	}
	c.mu.Unlock()
	slices.Sort(rooms)
	for _, r := range rooms {
		// A failed send means the stream ended, which serve finds out.
		_, _ = s.roomRequest(true, waiter{room: r, onErr: c.rejoinFailed(r)})
	}
	c.mu.Lock()
	c.cur = s
	close(c.up)
	c.up = make(chan struct{})
	c.mu.Unlock()
	c.emit(StateChange{State: Connected, Session: s.info})
	return s, nil
}

// serve reads the session's payloads until it ends and returns why.
func (c *Client) serve(s *session) error {
	defer func() {
		c.mu.Lock()
		if c.cur == s {
			c.cur = nil
		}
		c.mu.Unlock()
		s.end()
	}()
	for {
		p, err := s.stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("gomsg client: the server ended the stream")
			}
			return fmt.Errorf("gomsg client: %w", err)
		}
		switch b := p.GetBody().(type) {
		case *msgpb.ServerPayload_Messages:
			if err := c.deliver(s, b.Messages.GetMsgs()); err != nil {
				return err
			}
		case *msgpb.ServerPayload_Ready:
			c.emit(StateChange{State: Ready, Session: s.info})
		case *msgpb.ServerPayload_Kickout:
			return &KickoutError{Reason: b.Kickout.GetReason(), Message: b.Kickout.GetMessage()}
		case *msgpb.ServerPayload_RoomMessages:
			if h := c.cfg.roomHandler; h != nil {
				for _, m := range b.RoomMessages.GetMsgs() {
					h(s.ctx, b.RoomMessages.GetRoom(), m)
				}
			}
		case *msgpb.ServerPayload_RoomAnswer:
			c.roomAnswered(s, b.RoomAnswer)
		case *msgpb.ServerPayload_PullResult:
			s.pullAnswered(b.PullResult)
		case *msgpb.ServerPayload_DeviceRegistered:
			c.registered(s, b.DeviceRegistered)
		}
	}
}

// deliver hands the messages to the handler in order, drops the ones seen
// before, and ACKs what asks for an ACK and was processed (automatic mode)
// or was ACKed before (a duplicate). A handler error ends the session.
func (c *Client) deliver(s *session, msgs []*msgpb.Message) error {
	select {
	case s.delivering <- struct{}{}:
		defer func() { <-s.delivering }()
	default:
		return nil // the client is closing: what is not ACKed comes again
	}
	var acks []int64
	var herr error
	for _, m := range msgs {
		if s.ctx.Err() != nil {
			break // closing: hand nothing more over
		}
		seq := m.GetSeq()
		if seen, acked := c.seen.seen(seq); seen {
			if c.cfg.duplicate != nil {
				c.cfg.duplicate(seq)
			}
			if acked && needsAck(m) {
				acks = append(acks, seq)
			}
			continue
		}
		if h := c.cfg.handler; h != nil {
			if err := h(s.ctx, m); err != nil {
				herr = &HandlerError{Seq: seq, Err: err}
				break
			}
		}
		c.seen.add(seq, !c.cfg.manualAck)
		if !c.cfg.manualAck && needsAck(m) {
			acks = append(acks, seq)
		}
	}
	if len(acks) > 0 {
		// A failed send means the stream ended: the next Recv says why
		// (a kickout notice may come first). What was not ACKed comes
		// again and is ACKed then.
		_ = s.send(ackPayload(acks))
	}
	return herr
}

func needsAck(m *msgpb.Message) bool {
	return m.GetOptions()&uint32(msgpb.Option_NEED_ACK) != 0
}

func ackPayload(seqs []int64) *msgpb.ClientPayload {
	return &msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ack{Ack: &msgpb.Ack{Seqs: seqs}}}
}

// Ack acknowledges processed messages (WithManualAck; in the automatic mode
// the client ACKs by itself). It is remembered: when the session ended
// before the ACK reached the server, the message comes again on the next
// session and the client ACKs it then, without passing it to the handler.
// The error is the current session's failure to send, which needs no action.
func (c *Client) Ack(seqs ...int64) error {
	if len(seqs) == 0 {
		return nil
	}
	c.seen.ack(seqs)
	c.mu.Lock()
	s := c.cur
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.send(ackPayload(seqs))
}

// Session returns the session up now, and false when there is none.
func (c *Client) Session() (Session, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return Session{}, false
	}
	return c.cur.info, true
}

// session waits until a session is up and returns it.
func (c *Client) session(ctx context.Context) (*session, error) {
	for {
		c.mu.Lock()
		s, up := c.cur, c.up
		c.mu.Unlock()
		if s != nil {
			return s, nil
		}
		select {
		case <-up:
		case <-c.stopped:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
