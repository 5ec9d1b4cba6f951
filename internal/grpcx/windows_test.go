package grpcx

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/gomsg/gomsg/internal/testutil"
)

// Every gomsg hop has fixed flow-control windows: neither side sends the
// PING with which grpc-go samples a link's bandwidth for each data frame
// that arrives while no sample is out, two system calls on each side for
// nearly every small message.
func TestNoFlowControlPings(t *testing.T) {
	t.Parallel()
	addr := serveWithLimits(t, Limits{})
	dialer, conns := testutil.TapDialer()
	conn, err := Dial("passthrough:///"+addr, grpc.WithContextDialer(dialer))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	const calls = 50
	for range calls {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	read, wrote := (<-conns).Copies()
	if n := testutil.HTTP2Pings(t, read); n != 0 {
		t.Errorf("the server sent %d PINGs over %d calls, want none", n, calls)
	}
	if n := testutil.HTTP2Pings(t, wrote); n != 0 {
		t.Errorf("the client sent %d PINGs over %d calls, want none", n, calls)
	}
}
