package client

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// JoinRoom joins room on the current session and every later one, and
// returns the server's answer: nil, or a gRPC status error (InvalidArgument
// for a bad name, PermissionDenied when the token does not allow the room,
// ResourceExhausted past the boat's room limits), after which the room is
// forgotten. With no session up it waits for one (or ctx). Room broadcasts
// reach the RoomHandler.
func (c *Client) JoinRoom(ctx context.Context, room string) error {
	c.mu.Lock()
	c.rooms[room] = struct{}{}
	c.mu.Unlock()
	for {
		s, err := c.session(ctx)
		if err != nil {
			return err
		}
		ch := make(chan answer, 1)
		// A failed send means the stream ended: the wait sees the end,
		// and the next session joins the room.
		id, _ := s.roomRequest(true, waiter{room: room, ch: ch})
		a, ok := s.wait(ctx, ch)
		if !ok {
			continue
		}
		if ctx.Err() != nil {
			s.abandon(&s.rooms, id)
		}
		if a.err != nil && ctx.Err() == nil {
			c.mu.Lock()
			delete(c.rooms, room)
			c.mu.Unlock()
			return fmt.Errorf("gomsg client: join room %s: %w", room, a.err)
		}
		return a.err
	}
}

// LeaveRoom leaves room: later sessions do not join it, and the current
// one, if any, leaves it (the server's answer is returned).
func (c *Client) LeaveRoom(ctx context.Context, room string) error {
	c.mu.Lock()
	delete(c.rooms, room)
	s := c.cur
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	ch := make(chan answer, 1)
	id, _ := s.roomRequest(false, waiter{room: room, ch: ch})
	a, ok := s.wait(ctx, ch)
	if !ok {
		return nil // the session is over, and with it its rooms
	}
	if ctx.Err() != nil {
		s.abandon(&s.rooms, id)
	}
	err := a.err
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("gomsg client: leave room %s: %w", room, err)
	}
	return err
}

// RegisterDevice records token as this device's notification token
// (provider "apns", "fcm" or "log"; "" for the platform's notifier) under
// the session's own uid and platform, and returns the provider it was
// registered with, or a gRPC status error (InvalidArgument naming
// device.provider or device.token, PermissionDenied, Unavailable: retry
// later). The server keeps the registration, so a new session needs none.
// With no session up it waits for one (or ctx).
//
// Registrations reach the server one at a time: a call waits for the answer
// to the one before, even when that one's caller gave up (ctx) after
// sending it, since the server refuses a registration sent while another is
// in flight. A call whose ctx ends returns ctx's error; its registration
// may still be made.
func (c *Client) RegisterDevice(ctx context.Context, provider, token string) (string, error) {
	for {
		s, err := c.session(ctx)
		if err != nil {
			return "", err
		}
		if ok, err := s.acquire(ctx, s.regGate); err != nil {
			return "", err
		} else if !ok {
			continue // the session ended: the next one
		}
		ch := make(chan answer, 1)
		// A failed send: the wait sees the end.
		id, _ := s.request(&s.regs, waiter{ch: ch}, func(id int64) *msgpb.ClientPayload {
			return &msgpb.ClientPayload{Body: &msgpb.ClientPayload_RegisterDevice{
				RegisterDevice: &msgpb.RegisterDevice{Id: id, Provider: provider, Token: token}}}
		})
		a, ok := s.wait(ctx, ch)
		if !ok {
			continue
		}
		if ctx.Err() != nil {
			s.abandon(&s.regs, id)
			return "", ctx.Err()
		}
		if a.err != nil {
			return "", fmt.Errorf("gomsg client: register device: %w", a.err)
		}
		return a.provider, nil
	}
}

// roomAnswered hands a RoomAnswer to its request.
func (c *Client) roomAnswered(s *session, a *msgpb.RoomAnswer) {
	s.answered(&s.rooms, a.GetId(), answer{err: RoomError(a)})
}

// registered hands a DeviceRegistered to its request, and lets the next
// registration go.
func (c *Client) registered(s *session, d *msgpb.DeviceRegistered) {
	release(s.regGate)
	s.answered(&s.regs, d.GetId(), answer{err: RegistrationError(d), provider: d.GetProvider()})
}

// rejoinFailed is what happens when a new session may not join room again.
func (c *Client) rejoinFailed(room string) func(error) {
	return func(err error) {
		c.mu.Lock()
		delete(c.rooms, room)
		c.mu.Unlock()
		if c.cfg.errorHandler != nil {
			c.cfg.errorHandler(fmt.Errorf("gomsg client: join room %s again: %w", room, err))
		}
	}
}

// RoomError is nil for a RoomAnswer with status OK, and otherwise a gRPC
// status error naming the field at fault.
func RoomError(a *msgpb.RoomAnswer) error {
	return answerError(a.GetStatus(), a.GetMessage(), a.GetError())
}

// RegistrationError is nil for a DeviceRegistered with status OK, and
// otherwise a gRPC status error naming the field at fault.
func RegistrationError(d *msgpb.DeviceRegistered) error {
	return answerError(d.GetStatus(), d.GetMessage(), d.GetError())
}

// answerError turns an answer's status, message and detail into an error
// (nil for OK), naming the field at fault.
func answerError(code uint32, msg string, detail *errorpb.Error) error {
	if codes.Code(code) == codes.OK {
		return nil
	}
	if f := detail.GetField(); f != "" && !strings.HasPrefix(msg, f+":") {
		msg = f + ": " + msg
	}
	return status.Error(codes.Code(code), msg)
}
