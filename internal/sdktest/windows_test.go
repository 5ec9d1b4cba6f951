package sdktest_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"

	"github.com/gomsg/gomsg/client"
	"github.com/gomsg/gomsg/internal/testutil"
)

// Neither the Go client nor boat sends a flow-control PING per message:
// both fix their windows, so a delivery costs its message and its ACK only.
func TestNoFlowControlPingPerMessage(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	dialer, conns := testutil.TapDialer()
	var r recorder
	c.run(&r, client.StaticToken(c.token("pia", "ios")), client.WithDialOptions(grpc.WithContextDialer(dialer)))
	r.waitState(t, client.Ready, 1)
	const n = 30
	var want []int64
	for i := range n {
		want = append(want, c.mustPush("pia", "ios", fmt.Sprint(i), ackOffline))
		testutil.WaitFor(t, 10*time.Second, func() error {
			if got := len(r.handled()); got < len(want) {
				return fmt.Errorf("%d of %d messages handled", got, len(want))
			}
			return nil
		})
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if s := c.stored("pia", "ios"); s != 0 {
			return fmt.Errorf("%d messages not ACKed yet", s)
		}
		return nil
	})
	if got := r.handled(); !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
	read, wrote := (<-conns).Copies()
	if p := testutil.HTTP2Pings(t, read); p != 0 {
		t.Errorf("boat sent %d PINGs over %d messages and their ACKs, want none", p, n)
	}
	if p := testutil.HTTP2Pings(t, wrote); p != 0 {
		t.Errorf("the client sent %d PINGs over %d messages, want none", p, n)
	}
	// And a device may have no more than HTTP/2's initial 64 KiB unread
	// by boat: devices send ACKs and small requests only.
	testutil.HTTP2Frames(t, read, func(f http2.Frame) {
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok && v > 64<<10 {
				t.Errorf("boat let a stream send %d bytes unread, want at most 64 KiB", v)
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 && f.Increment > 64<<10 {
				t.Errorf("boat widened the connection's window by %d bytes, want it at 64 KiB", f.Increment)
			}
		}
	})
}
