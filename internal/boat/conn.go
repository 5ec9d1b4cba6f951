package boat

import (
	"context"
	"sync"

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

// handlerGate counts the session handlers of a listener boat serves apart
// from gRPC (WebSocket, MQTT), so that its run waits for the last one once
// it stops taking new ones.
type handlerGate struct {
	mu       sync.Mutex
	stopping bool           // run is waiting for the handlers: no new one
	handlers sync.WaitGroup // sessions being served
}

// begin counts a session in, unless run is already waiting for the last;
// a session counted in calls done when its handler returns.
func (g *handlerGate) begin() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopping {
		return false
	}
	g.handlers.Add(1)
	return true
}

func (g *handlerGate) done() { g.handlers.Done() }

// wait waits for the handlers counted in.
func (g *handlerGate) wait() { g.handlers.Wait() }

// stop takes no new handler and waits for the ones counted in.
func (g *handlerGate) stop() {
	g.mu.Lock()
	g.stopping = true
	g.mu.Unlock()
	g.handlers.Wait()
}
