// Package client is a minimal gomsg device client: it opens the stream with a
// token, reads payloads and ACKs messages, no more (no reconnect, no
// de-duplication). The tests that need the raw stream use it; applications
// use the public SDK, github.com/gomsg/gomsg/client.
package client

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	sdk "github.com/gomsg/gomsg/client"
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
	return connect(ctx, addr, token, false, opts...)
}

// ConnectPull is Connect in pull mode: no replay of the offline messages;
// the device pulls them (Pull).
func ConnectPull(ctx context.Context, addr, token string, opts ...grpc.DialOption) (*Device, error) {
	return connect(ctx, addr, token, true, opts...)
}

func connect(ctx context.Context, addr, token string, pull bool, opts ...grpc.DialOption) (*Device, error) {
	conn, err := grpcx.Dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sctx = metadata.AppendToOutgoingContext(sctx, "authorization", "Bearer "+token)
	if pull {
		sctx = metadata.AppendToOutgoingContext(sctx, "x-gomsg-offline", "pull")
	}
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

// RegisterDevice asks for token to be recorded as this device's notification
// token (provider "": the platform's notifier), under the session's own uid
// and platform. The answer arrives on Recv as a DeviceRegistered payload;
// RegistrationError reads it.
func (d *Device) RegisterDevice(provider, token string) error {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	return d.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_RegisterDevice{
		RegisterDevice: &msgpb.RegisterDevice{Provider: provider, Token: token}}})
}

// RegistrationError is nil for a DeviceRegistered with status OK, and
// otherwise a gRPC status error with its code and message (and the field at
// fault, when there is one).
func RegistrationError(a *msgpb.DeviceRegistered) error { return sdk.RegistrationError(a) }

// JoinRoom asks to join room; the answer arrives on Recv as a RoomAnswer
// payload, which RoomError reads. The session gets the room's broadcasts
// (RoomMessages payloads) from then on.
func (d *Device) JoinRoom(room string) error {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	return d.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Room: room}}})
}

// LeaveRoom asks to leave room; answered like JoinRoom.
func (d *Device) LeaveRoom(room string) error {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	return d.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_LeaveRoom{LeaveRoom: &msgpb.LeaveRoom{Room: room}}})
}

// RoomError is nil for a RoomAnswer with status OK, and otherwise a gRPC
// status error as RegistrationError makes one.
func RoomError(a *msgpb.RoomAnswer) error { return sdk.RoomError(a) }

// Pull sends a Pull: ACK ack, then answer (a PullResult with id, on Recv)
// with up to limit offline messages.
func (d *Device) Pull(id int64, limit int32, ack ...int64) error {
	d.sendMu.Lock()
	defer d.sendMu.Unlock()
	return d.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Pull{Pull: &msgpb.Pull{Id: id, Limit: limit, Ack: ack}}})
}

// PullError is nil for a PullResult with status OK, and otherwise a gRPC
// status error as RegistrationError makes one.
func PullError(r *msgpb.PullResult) error { return sdk.PullError(r) }

// Close ends the session.
func (d *Device) Close() {
	d.sendMu.Lock()
	_ = d.stream.CloseSend()
	d.sendMu.Unlock()
	d.cancel()
	_ = d.conn.Close()
}
