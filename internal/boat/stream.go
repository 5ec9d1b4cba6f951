package boat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/presencepb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// errDraining refuses a session while the boat shuts down.
var errDraining = status.Error(codes.Unavailable, "boat is shutting down; connect to another")

// kickNoticeWait bounds how long a kicked session's sender may take to send
// the kickout notice before the stream is ended without it.
const kickNoticeWait = time.Second

// clientServer adapts msgpb.Msg to the boat.
type clientServer struct {
	msgpb.UnimplementedMsgServer
	b *Boat
}

// senderWait bounds how long the handler waits, once the session ended, for
// its sender to stop (the sender may be blocked in Send on a client that
// stopped reading).
const senderWait = time.Second

// Loop serves one device session over gRPC: the token comes in the
// "authorization" metadata, pull mode in OfflineModeHeader.
func (c *clientServer) Loop(stream msgpb.Msg_LoopServer) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	pull, err := offlineMode(md.Get(OfflineModeHeader))
	if err != nil {
		c.b.metrics.Connects.WithLabelValues("invalid").Inc()
		return grpcerr.Status(grpcerr.Invalid(OfflineModeHeader, "%v", err))
	}
	_, err = c.b.serveSession(stream.Context(), bearerToken(stream.Context()), pull, grpcConn{stream})
	return err
}

// Pull mode: a device that asks for it at connect (gRPC metadata
// OfflineModeHeader, or the WebSocket query parameter WSOfflineParam, set to
// OfflinePull) gets no replay of its offline messages; it pages through them
// with Pull frames instead (a large backlog costs less pulled a page at a
// time than pushed). Its live messages flow from the start, so they may arrive before
// older stored ones: the device orders by seq. Pull works in both modes.
const (
	OfflineModeHeader = "x-gomsg-offline"
	WSOfflineParam    = "offline"
	// OfflinePull asks for pull mode; OfflinePush (or nothing) is the
	// default, the replay.
	OfflinePull = "pull"
	OfflinePush = "push"
)

// offlineMode reads the offline mode a device asked for: true for pull.
func offlineMode(values []string) (pull bool, err error) {
	switch {
	case len(values) == 0:
		return false, nil
	case len(values) > 1:
		return false, fmt.Errorf("given %d times, at most once", len(values))
	}
	switch values[0] {
	case OfflinePull:
		return true, nil
	case OfflinePush, "":
		return false, nil
	}
	return false, fmt.Errorf("%q: want %q or %q", values[0], OfflinePull, OfflinePush)
}

// sessionEnd tells a transport how a session that was held ended.
type sessionEnd struct {
	// kicked is the kickout reason of a session the boat ended; unset
	// otherwise.
	kicked msgpb.KickoutReason
	// recvErr is what ended the client's side: its close, a broken
	// connection, or a frame that could not be read.
	recvErr error
	// stuck: the sender is still blocked in Send (a client that stopped
	// reading); nothing more can be written to it.
	stuck bool
}

// serveSession serves one device session on conn, whichever transport
// carries it (gRPC stream or WebSocket): one code path for both. The session
// is held locally before station learns of it, so carrier can never reach
// station's record of a session the boat lacks. A session refused or ended by
// an error returns it as a gRPC status.
//
// The session has one receive goroutine (ACKs, pings) and, while there is
// something to send, one send goroutine draining its bounded queue; this
// goroutine only waits for the end.
// Like etcd's watch server (serverWatchStream.close waits for its send loop),
// it returns only after the sender stopped — within a bound: a sender still
// blocked in Send senderWait after the session ended (a client that stopped
// reading) is the one case where it returns first. Returning is what
// unblocks it: the transport ends the connection's context when serveSession
// returns (grpc-go cancels the stream's context when the handler returns, and
// Send waits for flow-control quota on that context; the WebSocket handler
// cancels its write context), so Send returns at once with an error; the
// sender starts no Send once the session has ended, so that blocked one is
// its last.
func (b *Boat) serveSession(ctx context.Context, token string, pull bool, conn clientConn) (end sessionEnd, _ error) {
	if token == "" {
		b.metrics.Connects.WithLabelValues("unauthenticated").Inc()
		b.tokenRefusals.Log(zap.String("reason", "missing token"), zap.String("peer", peerAddr(ctx)))
		return end, grpcerr.Status(grpcerr.New(codes.Unauthenticated, errorpb.Code_INVALID_TOKEN,
			`missing token: send "authorization: Bearer <token>" (gRPC metadata or HTTP header), or on a WebSocket the subprotocol "bearer.<token>"`))
	}
	if b.draining.Load() {
		return end, errDraining
	}
	if b.lapsed.Load() {
		b.metrics.Connects.WithLabelValues("unavailable").Inc()
		return end, errLapsed
	}
	if err := b.connects.allow(ctx); err != nil {
		b.metrics.Connects.WithLabelValues("limited").Inc()
		var e *grpcerr.Error
		if errors.As(err, &e) {
			b.countLimit(e.Field)
		}
		return end, grpcerr.Status(err)
	}
	sid, err := b.newSid()
	if err != nil {
		b.metrics.Connects.WithLabelValues(connectResult(err)).Inc()
		return end, err
	}
	s := newSession(sid, b.cfg.SendQueue)
	s.maxQueued = int64(b.cfg.SendQueueBytes)
	s.pullOffline = pull
	if b.holdHook != nil {
		b.holdHook(ctx)
	}
	b.sessions.put(s)
	if b.lapsed.Load() {
		// The registration lapsed after the check above and may have
		// kicked every session before this one was held.
		b.sessions.remove(s.sid)
		b.metrics.Connects.WithLabelValues("unavailable").Inc()
		return end, errLapsed
	}
	if b.draining.Load() {
		// The drain began after the check above and may have kicked
		// every session before this one was held.
		b.sessions.remove(s.sid)
		b.metrics.Connects.WithLabelValues("unavailable").Inc()
		return end, errDraining
	}
	// Station's answer is awaited even if the client goes away meanwhile:
	// station may have recorded the session, and only its answer says
	// whose it is, so that it can be undone.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.ConnectTimeout)
	resp, err := b.connectAtStation(cctx, &stationpb.ConnectRequest{Token: token, BoatId: b.cfg.ID, Sid: s.sid, PullOffline: pull})
	timedOut := cctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded && grpcerr.DetailCode(err) != errorpb.Code_LIMIT_EXCEEDED
	cancel()
	if err != nil {
		b.sessions.remove(s.sid)
		s.finish()
		if timedOut {
			b.countLimit("--connect-timeout")
			err = status.Errorf(codes.DeadlineExceeded, "--connect-timeout: connect (authentication and station) did not finish within %s", b.cfg.ConnectTimeout)
		}
		b.metrics.Connects.WithLabelValues(connectResult(err)).Inc()
		switch status.Code(err) {
		case codes.Unavailable:
			b.stationDown.Fail(fmt.Errorf("connect a session: %w", err))
		case codes.Unauthenticated, codes.PermissionDenied:
			// Station's message says why (expired, bad signature, …)
			// and never repeats the token.
			b.tokenRefusals.Log(zap.String("reason", status.Convert(err).Message()), zap.String("peer", peerAddr(ctx)))
		}
		return end, err
	}
	b.stationDown.OK()
	s.uid, s.platform, s.roomPatterns = resp.GetUid(), resp.GetPlatform(), resp.GetRooms()
	if ctx.Err() != nil {
		// The client went away while station recorded the session: undo it.
		b.sessions.remove(s.sid)
		s.finish()
		b.disconnects.add(&stationpb.SessionRef{Uid: s.uid, Sid: s.sid, Reason: presencepb.Reason_CLOSED})
		b.metrics.Connects.WithLabelValues("aborted").Inc()
		return end, status.FromContextError(ctx.Err()).Err()
	}
	b.metrics.Connects.WithLabelValues("ok").Inc()
	b.online.Inc()
	// No per-session logger is kept: zap's With copies an encoder (~1 KB)
	// that every idle session would hold.
	fields := func() []zap.Field {
		return []zap.Field{zap.String("sid", s.sid), zap.String("uid", s.uid), zap.String("platform", s.platform)}
	}
	if ce := b.log.Check(zap.DebugLevel, "session connected"); ce != nil {
		ce.Write(fields()...)
	}
	defer func() {
		reason := presencepb.Reason_CLOSED
		select {
		case <-s.kicked:
			b.metrics.Kickouts.WithLabelValues(s.kickReason.String()).Inc()
			reason = endReason(s.kickReason)
		default:
		}
		b.online.Dec()
		b.leaveRooms(s)
		b.sessions.remove(s.sid)
		s.finish()
		b.disconnects.add(&stationpb.SessionRef{Uid: s.uid, Sid: s.sid, Reason: reason})
		if ce := b.log.Check(zap.DebugLevel, "session ended"); ce != nil {
			ce.Write(fields()...)
		}
	}()

	s.mu.Lock()
	s.startSender = func() {
		b.streams.Add(1)
		go func() {
			defer b.streams.Done()
			b.send(conn, s)
		}()
	}
	if s.ending { // kicked while station answered: the notice needs a sender
		s.wakeSender()
	}
	// The session counts as connected (a broadcast to all includes it)
	// before its Connected payload can reach the device: a device that
	// reads Connected is in every broadcast sent after. Both happen under
	// s.mu, so whatever waits for connected and then queues (a delivery, a
	// broadcast frame, Ready) queues after Connected. Connected goes
	// first: the queue is empty, so this fails only for a session kicked
	// meanwhile, whose sender sends the kickout instead.
	close(s.connected)
	_ = s.enqueueLocked(outgoing{payload: &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Connected{
		Connected: &msgpb.Connected{Sid: s.sid, Uid: s.uid, Platform: s.platform}}}})
	s.mu.Unlock()
	if b.connectedHook != nil {
		b.connectedHook(s.sid)
	}

	recvDone := make(chan error, 1)
	b.streams.Add(1)
	go func() {
		defer b.streams.Done()
		recvDone <- b.receive(conn, s)
	}()
	// awaitSender ends the session and waits (bounded) for a sender still
	// running; false: it is still blocked in Send.
	awaitSender := func(wait time.Duration) bool {
		s.finish()
		if !s.senderRunning() {
			return true
		}
		select {
		case <-s.sendEnded:
			return true
		case <-time.After(wait):
			b.log.Info("sender still blocked after the session ended; ending the stream", fields()...)
			return false
		}
	}
	select {
	case err := <-recvDone: // the client went away
		return sessionEnd{recvErr: err, stuck: !awaitSender(senderWait)}, nil
	case <-s.sendEnded: // a Send failed, or the kickout notice was sent
		select {
		case <-s.kicked:
			return sessionEnd{kicked: s.kickReason}, nil
		default:
			return end, nil
		}
	case <-s.kicked:
		end.kicked = s.kickReason
		select {
		case <-s.sendEnded:
		case <-time.After(kickNoticeWait):
			b.log.Info("kickout notice not sent in time; ending the stream", fields()...)
			end.stuck = !awaitSender(senderWait)
		}
		return end, nil
	}
}

// connectAtStation makes the Connect call on a goroutine of its own and
// waits for its answer. The call's path through the gRPC client grows a
// stack by several KiB. Made by serveSession's goroutine, which then waits
// out the session, it would leave that goroutine's stack grown while the
// session lasts (a stack shrinks only at a GC, by half, and only while less
// than a quarter of it is in use). Over WebSocket that was 8 KiB of every
// idle session's memory.
func (b *Boat) connectAtStation(ctx context.Context, req *stationpb.ConnectRequest) (*stationpb.ConnectResponse, error) {
	type answer struct {
		resp *stationpb.ConnectResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := b.station.Connect(ctx, req)
		done <- answer{resp, err}
	}()
	a := <-done
	return a.resp, a.err
}

// senderLinger is how long a session's sender waits for the next payload
// before it stops.
const senderLinger = time.Second

// send is the session's only sender while it runs: enqueue starts it when
// none runs, and it stops once the queue has stayed empty for senderLinger
// (an idle session holds no sender). It stops for good when the session
// ends, after sending the kickout notice if it was kicked; once the session
// has ended or was kicked it starts no other Send. A Send that does not
// complete within the write timeout (a client that stopped reading) gets the
// session kicked out as a slow consumer.
func (b *Boat) send(conn clientConn, s *session) {
	// One timer for the sender's life, reset each time the queue runs dry
	// (since Go 1.23 a stopped or reset timer delivers no stale tick).
	linger := time.NewTimer(senderLinger)
	defer linger.Stop()
	for {
		// The end wins over a queued payload.
		select {
		case <-s.done:
			s.senderEnded()
			return
		case <-s.kicked:
			sendKickout(conn, s)
			s.senderEnded()
			return
		default:
		}
		var o outgoing
		select {
		case o = <-s.sendq:
		default:
			// Wait a moment for more before stopping: a session that gets a
			// message every few hundred milliseconds would otherwise start a
			// sender per message, whose stack grows (copied) while it
			// encodes the frame: a tenth of boat's CPU at saturation.
			linger.Reset(senderLinger)
			got := false
			select {
			case o = <-s.sendq:
				got = true
			case <-s.done:
			case <-s.kicked:
			case <-linger.C:
			}
			linger.Stop()
			if !got {
				if s.idleHook != nil {
					s.idleHook()
				}
				if s.stopIfIdle() {
					return
				}
				select {
				case <-s.done:
					continue
				case <-s.kicked:
					continue
				case o = <-s.sendq:
				}
			}
		}
		s.dequeued(o)
		watchdog := b.wheel.Add(b.cfg.WriteTimeout, func() { s.kick(msgpb.KickoutReason_SLOW_CONSUMER) })
		var err error
		if o.frame != nil {
			err = conn.SendFrame(o.frame)
		} else {
			err = conn.Send(o.payload)
		}
		watchdog.Stop()
		if err != nil {
			if o.sent != nil {
				o.sent.fail(ErrSessionGone)
			}
			s.senderEnded()
			return
		}
		if o.sent != nil {
			o.sent.wasSent()
		}
	}
}

// sendKickout sends the kickout notice. Messages queued before the kick are
// not sent: kick failed them, and carrier treats them as undelivered.
func sendKickout(conn clientConn, s *session) {
	select {
	case <-s.done:
		return
	default:
	}
	_ = conn.Send(&msgpb.ServerPayload{Body: &msgpb.ServerPayload_Kickout{Kickout: &msgpb.Kickout{
		Reason: s.kickReason, Message: kickMessage(s.kickReason)}}})
}

// receive handles the client's ACKs, pings, device registrations, room
// joins and leaves and pulls until the stream ends.
func (b *Boat) receive(conn clientConn, s *session) error {
	for {
		p, err := conn.Recv()
		if err != nil {
			return err // io.EOF when the client closed; anything else ends the session too
		}
		switch body := p.GetBody().(type) {
		case *msgpb.ClientPayload_Ack:
			s.ack(body.Ack.GetSeqs())
		case *msgpb.ClientPayload_Ping:
			pong := &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Pong{Pong: &msgpb.Pong{Id: body.Ping.GetId()}}}
			if err := s.enqueue(outgoing{payload: pong}); errors.Is(err, ErrSlowConsumer) {
				s.kick(msgpb.KickoutReason_SLOW_CONSUMER)
			}
		case *msgpb.ClientPayload_RegisterDevice:
			b.registerDevice(conn.Context(), s, body.RegisterDevice, b.allowRequest(s))
		case *msgpb.ClientPayload_JoinRoom:
			b.roomRequest(s, body.JoinRoom.GetRoom(), true, body.JoinRoom.GetId(), b.allowRequest(s))
		case *msgpb.ClientPayload_LeaveRoom:
			b.roomRequest(s, body.LeaveRoom.GetRoom(), false, body.LeaveRoom.GetId(), b.allowRequest(s))
		case *msgpb.ClientPayload_Pull:
			b.pull(conn.Context(), s, body.Pull, b.allowRequest(s))
		}
	}
}

// allowRequest takes a token from the session's bucket of requests that
// cost the boat or station work beyond the frame (Pull, RegisterDevice,
// JoinRoom, LeaveRoom): --session-request-rate a second, a burst of
// --session-request-burst. It returns the refusal (ResourceExhausted
// naming the flag, counted), which the request is answered with; the
// session goes on. The bucket is made on the first such request (called
// by the receive goroutine only), so an idle session holds none.
func (b *Boat) allowRequest(s *session) error {
	if s.requests == nil {
		s.requests = rate.NewLimiter(rate.Limit(b.cfg.SessionRequestRate), b.cfg.SessionRequestBurst)
	}
	if s.requests.Allow() {
		return nil
	}
	b.countLimit("--session-request-rate")
	return grpcerr.Limited("--session-request-rate", "more than %g Pull, RegisterDevice, JoinRoom and LeaveRoom requests per second on this session (bursts of %d); retry later",
		b.cfg.SessionRequestRate, b.cfg.SessionRequestBurst)
}

// What a device may send in a RegisterDevice: station refuses longer
// tokens too; the boat refuses them (InvalidArgument naming the field)
// before anything is done, so that it never queues back what a device
// sent beyond these sizes.
const (
	maxTokenBytes    = 1024
	maxProviderBytes = 32
)

// checkRegisterDevice refuses fields longer than a device may send.
func checkRegisterDevice(r *msgpb.RegisterDevice) error {
	switch {
	case len(r.GetToken()) > maxTokenBytes:
		return grpcerr.Invalid("device.token", "%d bytes, at most %d", len(r.GetToken()), maxTokenBytes)
	case len(r.GetProvider()) > maxProviderBytes:
		return grpcerr.Invalid("device.provider", "%d bytes, at most %d", len(r.GetProvider()), maxProviderBytes)
	}
	return nil
}

// registerTimeout bounds station's answer to a device registration.
const registerTimeout = 5 * time.Second

// registerDevice forwards a device's token to station with the uid and sid
// this boat holds for the session (station takes the platform from the
// session record) and queues the answer. It runs apart from the receive
// loop, so ACKs are not held up; one registration per session is in flight
// at a time, and a second one meanwhile is answered RESOURCE_EXHAUSTED.
func (b *Boat) registerDevice(ctx context.Context, s *session, r *msgpb.RegisterDevice, refused error) {
	checkErr := refused
	if checkErr == nil {
		if checkErr = checkRegisterDevice(r); checkErr != nil {
			b.countLimit("device_field_bytes")
		}
	}
	if checkErr != nil {
		// Nothing the device sent but the id is echoed.
		r = &msgpb.RegisterDevice{Id: r.GetId()}
	}
	answer := func(provider string, err error) {
		a := &msgpb.DeviceRegistered{Id: r.GetId(), Token: r.GetToken(), Provider: provider}
		if err != nil {
			st := status.Convert(err)
			a.Status, a.Message = uint32(st.Code()), st.Message()
			switch st.Code() {
			case codes.InvalidArgument, codes.PermissionDenied, codes.ResourceExhausted:
				for _, d := range st.Details() {
					if e, ok := d.(*errorpb.Error); ok {
						a.Error = e
					}
				}
			default:
				// Backend failures stay in the logs, not on the device.
				a.Status, a.Message = uint32(codes.Unavailable), "device registration failed; retry later"
			}
		}
		if err := s.enqueue(outgoing{payload: &msgpb.ServerPayload{Body: &msgpb.ServerPayload_DeviceRegistered{
			DeviceRegistered: a}}}); errors.Is(err, ErrSlowConsumer) {
			s.kick(msgpb.KickoutReason_SLOW_CONSUMER)
		}
	}
	if checkErr != nil {
		answer("", grpcerr.Status(checkErr))
		return
	}
	if !s.registering.CompareAndSwap(false, true) {
		answer(r.GetProvider(), status.Error(codes.ResourceExhausted, "a device registration is already in flight on this session"))
		return
	}
	b.streams.Add(1)
	go func() {
		defer b.streams.Done()
		// The flag is cleared before the answer is queued: a device that
		// registers again as soon as it reads the answer is never refused.
		answer := func(provider string, err error) {
			s.registering.Store(false)
			answer(provider, err)
		}
		ctx, cancel := context.WithTimeout(ctx, registerTimeout)
		defer cancel()
		resp, err := b.station.RegisterSessionDevice(ctx, &stationpb.RegisterSessionDeviceRequest{
			BoatId: b.cfg.ID, Uid: s.uid, Sid: s.sid, Provider: r.GetProvider(), Token: r.GetToken()})
		if err != nil {
			switch status.Code(err) {
			case codes.InvalidArgument, codes.PermissionDenied:
			case codes.Unavailable:
				b.stationDown.Fail(fmt.Errorf("register a device: %w", err))
			default:
				b.log.Warn("device registration failed", zap.String("sid", s.sid), zap.String("uid", s.uid), zap.Error(err))
			}
			answer(r.GetProvider(), err)
			return
		}
		b.stationDown.OK()
		answer(resp.GetProvider(), nil)
	}()
}

func connectResult(err error) string {
	switch status.Code(err) {
	case codes.Unauthenticated:
		return "unauthenticated"
	case codes.InvalidArgument:
		return "invalid"
	case codes.Unavailable:
		return "unavailable"
	case codes.ResourceExhausted:
		return "limited"
	}
	return "error"
}

// peerAddr is the address of the connection ctx belongs to, for a log line.
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}

func bearerToken(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
	}
	return ""
}

// endReason is the reason a Disconnect report gives for a session kicked
// for r (station publishes it as a presence event).
func endReason(r msgpb.KickoutReason) presencepb.Reason {
	switch r {
	case msgpb.KickoutReason_NEW_SESSION:
		return presencepb.Reason_NEW_SESSION
	case msgpb.KickoutReason_BY_REQUEST:
		return presencepb.Reason_BY_REQUEST
	case msgpb.KickoutReason_ACK_TIMEOUT:
		return presencepb.Reason_ACK_TIMEOUT
	case msgpb.KickoutReason_SLOW_CONSUMER:
		return presencepb.Reason_SLOW_CONSUMER
	case msgpb.KickoutReason_SERVER_DRAINING:
		return presencepb.Reason_SERVER_DRAINING
	}
	return presencepb.Reason_REASON_UNSPECIFIED
}

func kickMessage(r msgpb.KickoutReason) string {
	switch r {
	case msgpb.KickoutReason_NEW_SESSION:
		return "signed in again on the same platform; do not reconnect"
	case msgpb.KickoutReason_ACK_TIMEOUT:
		return "messages were not acknowledged in time; reconnect"
	case msgpb.KickoutReason_SLOW_CONSUMER:
		return "messages were not read fast enough; reconnect"
	case msgpb.KickoutReason_SERVER_DRAINING:
		return "server shutting down; reconnect to another server"
	case msgpb.KickoutReason_BY_REQUEST:
		return "session ended by the service"
	}
	return "session ended"
}
