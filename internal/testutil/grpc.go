package testutil

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ServeGRPC serves srv (its services registered) on a free loopback port
// and returns a plaintext client connection to it, dialled with opts; both
// stop with the test.
func ServeGRPC(tb testing.TB, srv *grpc.Server, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	tb.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}
