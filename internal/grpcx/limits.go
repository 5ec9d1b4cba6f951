package grpcx

import (
	"fmt"

	"google.golang.org/grpc"
)

// Limits bound what one caller can send a gRPC server.
type Limits struct {
	// MaxRecvBytes is the largest message a server accepts
	// (--grpc-max-recv-bytes).
	MaxRecvBytes int
	// MaxHeaderBytes is the largest header list (metadata) a server accepts
	// (--grpc-max-header-bytes); bigger ones are refused by the transport
	// before any handler runs.
	MaxHeaderBytes int
}

// Default limits.
const (
	DefaultMaxRecvBytes   = 4 << 20
	DefaultMaxHeaderBytes = 16 << 10
)

// Defaults fills unset fields.
func (l *Limits) Defaults() {
	if l.MaxRecvBytes == 0 {
		l.MaxRecvBytes = DefaultMaxRecvBytes
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
}

// Validate names the first bad setting.
func (l *Limits) Validate() error {
	switch {
	case l.MaxRecvBytes < 1:
		return fmt.Errorf("--grpc-max-recv-bytes: %d, must be positive", l.MaxRecvBytes)
	case l.MaxHeaderBytes < 1024:
		return fmt.Errorf("--grpc-max-header-bytes: %d, must be at least 1024", l.MaxHeaderBytes)
	}
	return nil
}

// ServerOptions are the options every gomsg gRPC server gets (station's
// push and internal servers, boat's client and internal servers); the
// caller appends its own.
func ServerOptions(l Limits, more ...grpc.ServerOption) []grpc.ServerOption {
	l.Defaults()
	return append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxRecvBytes),
		grpc.MaxHeaderListSize(uint32(l.MaxHeaderBytes)),
	}, more...)
}
