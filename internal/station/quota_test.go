package station

import (
	"context"
	"errors"
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// The Push and BroadcastRoom calls of one station hold at most
// --max-push-bytes-in-flight bytes of fan-out at once: a call that does not
// fit beside those in flight is refused ResourceExhausted naming the flag,
// counted, and publishes nothing; once the others are done it passes, and a
// finished call gives its bytes back.
func TestPushBytesInFlight(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) {
		c.MaxBodyBytes, c.MaxRequestBytes, c.MaxPushBytes, c.MaxPushBytesInFlight = 1000, 1000, 1000, 1000
	})
	b := body(t, strings.Repeat("x", 100))
	req := &pushpb.PushRequest{Uids: []string{"a", "b", "c"}, MsgBodies: []*anypb.Any{b}}
	n := int64(pushBytes(req, 3))
	room := &pushpb.BroadcastRoomRequest{Rooms: []string{"r1", "r2", "r3"}, MsgBodies: []*anypb.Any{b}}

	// Another call holds all but n-1 bytes.
	release, err := r.s.acquirePushBytes(1000 - n + 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.s.Push(context.Background(), req)
	exhausted(t, "push beside another", err, "--max-push-bytes-in-flight")
	r.noTasks("refused push")
	_, err = r.s.BroadcastRoom(context.Background(), room)
	exhausted(t, "broadcast beside another", err, "--max-push-bytes-in-flight")
	r.noBroadcasts("refused broadcast")
	if got := promtest.ToFloat64(r.s.metrics.LimitRejections.WithLabelValues("max_push_bytes_in_flight")); got != 2 {
		t.Fatalf("%v refusals counted, want 2", got)
	}
	release()

	// Alone, calls pass one after the other: each gives its bytes back.
	for i := range 1000/int(n) + 2 {
		if _, err := r.s.Push(context.Background(), req); err != nil {
			t.Fatalf("push %d after the other call ended: %v", i, err)
		}
		if _, err := r.s.BroadcastRoom(context.Background(), room); err != nil {
			t.Fatalf("broadcast %d after the other call ended: %v", i, err)
		}
	}
	if !r.s.inFlight.sem.TryAcquire(1000) {
		t.Fatal("bytes still held after every call returned")
	}
}

// exhausted checks err is ResourceExhausted naming flag.
func exhausted(t testing.TB, name string, err error, flag string) {
	t.Helper()
	var ge *grpcerr.Error
	if !errors.As(err, &ge) || ge.Code != codes.ResourceExhausted || !strings.Contains(ge.Error(), flag) {
		t.Fatalf("%s: %v; want ResourceExhausted naming %s", name, err, flag)
	}
}
