package grpcx

import (
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
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
	// HandshakeTimeout bounds a new connection's handshake (TLS and the
	// HTTP/2 preface) (--grpc-handshake-timeout): grpc-go's default
	// holds a socket that sends nothing for 120 s.
	HandshakeTimeout time.Duration
	// IdleTimeout is how long a connection may hold no stream before the
	// server closes it (--grpc-idle-timeout): a GOAWAY, then the close at
	// most 5 s later. grpc-go's default keeps such a connection for ever;
	// a client reconnects at its next call.
	IdleTimeout time.Duration
}

// Default limits.
const (
	DefaultMaxRecvBytes     = 4 << 20
	DefaultMaxHeaderBytes   = 16 << 10
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
)

// Defaults fills unset fields.
func (l *Limits) Defaults() {
	if l.MaxRecvBytes == 0 {
		l.MaxRecvBytes = DefaultMaxRecvBytes
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.HandshakeTimeout == 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
}

// Validate names the first bad setting.
func (l *Limits) Validate() error {
	switch {
	case l.MaxRecvBytes < 1:
		return fmt.Errorf("--grpc-max-recv-bytes: %d, must be positive", l.MaxRecvBytes)
	case l.MaxHeaderBytes < 1024:
		return fmt.Errorf("--grpc-max-header-bytes: %d, must be at least 1024", l.MaxHeaderBytes)
	case l.HandshakeTimeout < 100*time.Millisecond:
		return fmt.Errorf("--grpc-handshake-timeout: %s, must be at least 100ms", l.HandshakeTimeout)
	case l.IdleTimeout < 100*time.Millisecond:
		return fmt.Errorf("--grpc-idle-timeout: %s, must be at least 100ms", l.IdleTimeout)
	}
	return nil
}

// ServerOptions are the options every gomsg gRPC server gets (station's
// push and internal servers, boat's client and internal servers); the
// caller appends its own, which win over these (boat's client listener
// ties its handshake and idle bounds to --connect-timeout).
//
// A connection must finish its handshake within HandshakeTimeout and is
// closed after IdleTimeout without a stream, so that sockets that send
// nothing, or HTTP/2 connections that open no stream, are not held for
// ever. Clients may ping an idle connection (PermitWithoutStream) as
// often as every 10 s.
func ServerOptions(l Limits, more ...grpc.ServerOption) []grpc.ServerOption {
	l.Defaults()
	return append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxRecvBytes),
		grpc.MaxHeaderListSize(uint32(l.MaxHeaderBytes)),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: l.IdleTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.StaticStreamWindowSize(StreamWindow), grpc.StaticConnWindowSize(ConnWindow),
	}, more...)
}

// Flow-control windows of every gomsg gRPC connection, fixed. grpc-go's
// default sizes its windows by estimating the link's bandwidth-delay
// product, which it samples with a PING after each data frame that arrives
// while no sample is out: on gomsg's links, where each frame is one small
// message (a push, a delivery, an ACK), that is a PING and its answer, two
// system calls on each side, for nearly every message. Windows this large
// never hold a gomsg message back (a message is at most --grpc-max-recv-bytes
// and a stream carries a few at a time); the estimate only grows windows
// for bulk transfers over long links, which gomsg's hops are not.
const (
	StreamWindow = 1 << 20
	ConnWindow   = 4 << 20
)

// StaticWindows are the dial options fixing a client connection's windows
// as ServerOptions fixes a server's.
func StaticWindows() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow)}
}
