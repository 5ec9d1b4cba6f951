// Package grpcx holds gomsg's small gRPC helpers: dial, serve with a graceful
// stop, health. It imports no domain package, so a device client can use it
// without pulling in Kafka, Redis or etcd clients; the mapping of domain errors
// to statuses is in internal/grpcerr.
package grpcx

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Serve runs srv on l until ctx ends, then stops it gracefully, forcing a stop
// after grace.
func Serve(ctx context.Context, srv *grpc.Server, l net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	GracefulStop(srv, grace)
	<-errc
	return nil
}

// GracefulStop stops srv, waiting at most grace for running calls.
func GracefulStop(srv *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		srv.Stop()
		<-done
	}
}

// NewHealth registers grpc.health.v1 on srv, NOT_SERVING until the caller
// says otherwise.
func NewHealth(srv *grpc.Server) *health.Server {
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, h)
	return h
}

// SetServing flips the overall health status.
func SetServing(h *health.Server, serving bool) {
	s := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		s = healthpb.HealthCheckResponse_SERVING
	}
	h.SetServingStatus("", s)
}

// Reconnect is how often a connection that lost its server tries again:
// from 0.2 s, growing to at most 1 s. grpc-go's default grows to 120 s, so a
// boat cut off from station for a minute went on failing every Connect for
// up to two more minutes after station was back (a carrier likewise with a
// boat); an internal hop tries again at least once a second instead.
var Reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 20 * time.Second,
}

// Dial opens a client connection, plaintext unless opts carry transport
// credentials (WithTLS), that reconnects as Reconnect says. Every internal
// hop dials through it, with fixed flow-control windows (StaticWindows).
func Dial(addr string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	all := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithConnectParams(Reconnect)}, StaticWindows()...)
	all = append(all, opts...)
	return grpc.NewClient(addr, all...)
}

// WithTLS dials with c; a nil c dials in plaintext.
func WithTLS(c *tls.Config) grpc.DialOption {
	if c == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(c))
}

// ServerTLS serves with c; a nil c serves in plaintext.
func ServerTLS(c *tls.Config) grpc.ServerOption {
	if c == nil {
		return grpc.Creds(insecure.NewCredentials())
	}
	return grpc.Creds(credentials.NewTLS(c))
}
