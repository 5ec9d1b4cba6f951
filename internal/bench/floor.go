package bench

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/ops"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// floorServer is the floor for boat's memory per session: a bare grpc-go
// server with boat's client-stream server options that answers each
// msgpb.Msg/Loop stream with a Connected payload and then only reads it.
type floorServer struct {
	msgpb.UnimplementedMsgServer
	next atomic.Int64
}

func (f *floorServer) Loop(stream msgpb.Msg_LoopServer) error {
	sid := strconv.FormatInt(f.next.Add(1), 10)
	if err := stream.Send(&msgpb.ServerPayload{Body: &msgpb.ServerPayload_Connected{Connected: &msgpb.Connected{Sid: sid}}}); err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}

// RunFloorServer serves the floor server on addr, and /metrics (with the Go
// and process collectors, as gomsg's services have) and /debug/pprof/ on
// opsAddr, until ctx ends.
func RunFloorServer(ctx context.Context, addr, opsAddr string, log *zap.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("floor addr: %w", err)
	}
	srv := grpc.NewServer(serverOptions()...)
	msgpb.RegisterMsgServer(srv, &floorServer{})
	o, err := ops.Listen(opsAddr, metrics.New().Registry, true)
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("floor ops-addr: %w", err)
	}
	go func() { _ = o.Run(ctx) }()
	log.Info("floor server serving", zap.String("addr", ln.Addr().String()), zap.String("ops_addr", o.Addr()))
	return grpcx.Serve(ctx, srv, ln, 0)
}
