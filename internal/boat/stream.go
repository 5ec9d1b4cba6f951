package boat

import (
	"context"
	"errors"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// clientServer adapts msgpb.Msg to the boat.
type clientServer struct {
	msgpb.UnimplementedMsgServer
	b *Boat
}

// Loop serves one device session: the token comes in the "authorization"
// metadata; the session is held locally before station learns of it, so
// carrier can never reach station's record of a session the boat lacks.
func (c *clientServer) Loop(stream msgpb.Msg_LoopServer) error {
	b := c.b
	ctx := stream.Context()
	token := bearerToken(ctx)
	if token == "" {
		return grpcx.Status(grpcx.New(codes.Unauthenticated, errorpb.Code_INVALID_TOKEN,
			`missing token: send "authorization: Bearer <token>" metadata`))
	}
	s := newSession(b.newSid(), b.cfg.SendQueue)
	b.sessions.put(s)
	resp, err := b.station.Connect(ctx, &stationpb.ConnectRequest{Token: token, BoatId: b.cfg.ID, Sid: s.sid})
	if err != nil {
		b.sessions.remove(s.sid)
		s.finish()
		b.metrics.Connects.WithLabelValues(connectResult(err)).Inc()
		if status.Code(err) == codes.Unavailable {
			b.log.Warn("station connect failed", zap.Error(err))
		}
		return err
	}
	s.uid, s.platform = resp.GetUid(), resp.GetPlatform()
	b.metrics.Connects.WithLabelValues("ok").Inc()
	b.online.Inc()
	log := b.log.With(zap.String("sid", s.sid), zap.String("uid", s.uid), zap.String("platform", s.platform))
	log.Debug("session connected")
	defer func() {
		b.online.Dec()
		b.sessions.remove(s.sid)
		s.finish()
		b.disconnects.add(&stationpb.SessionRef{Uid: s.uid, Sid: s.sid})
		log.Debug("session ended")
	}()

	// Connected goes first: the queue is empty, so this cannot fail.
	_ = s.enqueue(outgoing{payload: &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Connected{
		Connected: &msgpb.Connected{Sid: s.sid, Uid: s.uid, Platform: s.platform}}}})
	close(s.connected)

	recvCtx, cancelRecv := context.WithCancel(ctx)
	defer cancelRecv()
	recvDone := make(chan error, 1)
	b.streams.Add(1)
	go func() {
		defer b.streams.Done()
		recvDone <- c.receive(recvCtx, stream, s)
	}()
	return c.send(stream, s, recvDone)
}

// send is the session's only sender. It returns when the client goes away,
// the receive loop fails, or the session is kicked (after the notice).
func (c *clientServer) send(stream msgpb.Msg_LoopServer, s *session, recvDone <-chan error) error {
	for {
		select {
		case err := <-recvDone:
			if err == nil || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		case <-s.kicked:
			// Messages queued before the kick are not sent; their deliveries
			// fail and carrier treats them as undelivered.
			c.b.metrics.Kickouts.WithLabelValues(s.kickReason.String()).Inc()
			_ = stream.Send(&msgpb.ServerPayload{Body: &msgpb.ServerPayload_Kickout{Kickout: &msgpb.Kickout{
				Reason: s.kickReason, Message: kickMessage(s.kickReason)}}})
			return nil
		case o := <-s.sendq:
			if err := stream.Send(o.payload); err != nil {
				if o.sent != nil {
					o.sent.fail(ErrSessionGone)
				}
				return err
			}
			if o.sent != nil {
				o.sent.wasSent()
			}
		}
	}
}

// receive handles the client's ACKs and pings until the stream ends.
func (c *clientServer) receive(ctx context.Context, stream msgpb.Msg_LoopServer, s *session) error {
	for {
		p, err := stream.Recv()
		if err != nil {
			if ctx.Err() != nil || status.Code(err) == codes.Canceled {
				return nil
			}
			return nil // client closed (io.EOF) or transport gone: the session simply ends
		}
		switch body := p.GetBody().(type) {
		case *msgpb.ClientPayload_Ack:
			s.ack(body.Ack.GetSeqs())
		case *msgpb.ClientPayload_Ping:
			pong := &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Pong{Pong: &msgpb.Pong{Id: body.Ping.GetId()}}}
			if err := s.enqueue(outgoing{payload: pong}); errors.Is(err, ErrSlowConsumer) {
				s.kick(msgpb.KickoutReason_SLOW_CONSUMER)
			}
		}
	}
}

func connectResult(err error) string {
	switch status.Code(err) {
	case codes.Unauthenticated:
		return "unauthenticated"
	case codes.InvalidArgument:
		return "invalid"
	case codes.Unavailable:
		return "unavailable"
	}
	return "error"
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

func kickMessage(r msgpb.KickoutReason) string {
	switch r {
	case msgpb.KickoutReason_NEW_SESSION:
		return "signed in again on the same platform; do not reconnect"
	case msgpb.KickoutReason_ACK_TIMEOUT:
		return "messages were not acknowledged in time; reconnect"
	case msgpb.KickoutReason_SLOW_CONSUMER:
		return "messages were not read fast enough; reconnect"
	case msgpb.KickoutReason_SERVER_DRAINING:
		return "server shutting down; reconnect"
	case msgpb.KickoutReason_BY_REQUEST:
		return "session ended by the service"
	}
	return "session ended"
}
