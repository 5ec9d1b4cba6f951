package boat

import (
	"context"

	"github.com/gomsg/gomsg/pb/msgpb"
)

// clientConn is one device session's transport: a gRPC stream
// (gomsg.msg.Msg/Loop) or a WebSocket. Both carry the same payloads, and the
// boat serves them with one code path (serveSession). Recv is called by one
// goroutine, Send and SendFrame by one other.
type clientConn interface {
	// Context ends when the connection does.
	Context() context.Context
	Recv() (*msgpb.ClientPayload, error)
	Send(*msgpb.ServerPayload) error
	// SendFrame sends a payload marshalled once for many sessions.
	SendFrame(*encodedFrame) error
}

// grpcConn is the gRPC stream as a clientConn.
type grpcConn struct{ msgpb.Msg_LoopServer }

// SendFrame sends the frame's bytes as they are (frameCodec passes them
// through).
func (c grpcConn) SendFrame(f *encodedFrame) error { return c.SendMsg(f) }
