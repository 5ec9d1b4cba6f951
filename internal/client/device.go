// Package client is a minimal gomsg device client: it opens the stream with a
// token, reads payloads and ACKs messages. gomsgctl and the tests use it.
package client

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// Device is one open session.
type Device struct {
	Sid      string
	UID      string
	Platform string

	conn   *grpc.ClientConn
	stream msgpb.Msg_LoopClient
	cancel context.CancelFunc
	sendMu sync.Mutex
}

// Connect opens a session on the boat at addr and waits for its Connected
// payload. opts are extra dial options, e.g. grpcx.WithTLS.
func Connect(ctx context.Context, addr, token string, opts ...grpc.DialOption) (*Device, error) {
	conn, err := grpcx.Dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sctx = metadata.AppendToOutgoingContext(sctx, "authorization", "Bearer "+token)
	stream, err := msgpb.NewMsgClient(conn).Loop(sctx)
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, err
	}
	d := &Device{conn: conn, stream: stream, cancel: cancel}
	first, err := d.recvCtx(ctx)
	if err != nil {
		d.Close()
		return nil, err
	}
	c := first.GetConnected()
	if c == nil {
		d.Close()
		return nil, fmt.Errorf("first payload is %T, want Connected", first.GetBody())
	}
	d.Sid, d.UID, d.Platform = c.GetSid(), c.GetUid(), c.GetPlatform()
	return d, nil
}

// Recv returns the next payload.
func (d *Device) Recv() (*msgpb.ServerPayload, error) { return d.stream.Recv() }

func (d *Device) recvCtx(ctx context.Context) (*msgpb.ServerPayload, error) {
	type res struct {
		p   *msgpb.ServerPayload
		err error
	}
	ch := make(chan res, 1)
	go func() {
		p, err := d.stream.Recv()
		ch <- res{p, err}
	}()
	select {
	case r := <-ch:
		return r.p, r.err
	case <-ctx.Done():
		d.cancel()
		return nil, ctx.Err()
	}
}

// Ack acknowledges seqs.
func (d *Device) Ack(seqs ...int64) error {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	return d.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ack{Ack: &msgpb.Ack{Seqs: seqs}}})
}

// Ping sends a ping.
func (d *Device) Ping(id int64) error {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	return d.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ping{Ping: &msgpb.Ping{Id: id}}})
}

// Close ends the session.
func (d *Device) Close() {
	d.sendMu.Lock()
	_ = d.stream.CloseSend()
	d.sendMu.Unlock()
	d.cancel()
	_ = d.conn.Close()
}
