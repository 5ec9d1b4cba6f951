package sdktest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomsg/gomsg/client"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// A handler that closes the client and returns nil only once the close is
// well under way (the handlers' context ended, and the boat had half a
// second to see the stream end): the ACK still reaches the boat, which
// deletes the stored message, and Run returns nil. Five rounds, each with a
// message stored while offline.
func TestCloseFromHandlerSendsItsAck(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	for round := range 5 {
		seq := c.mustPush("cal", "ios", fmt.Sprint("stored-", round), ackOffline)
		testutil.WaitFor(t, 10*time.Second, func() error {
			if n := c.stored("cal", "ios"); n != 1 {
				return fmt.Errorf("round %d: %d stored, want 1", round, n)
			}
			return nil
		})
		var r recorder
		var cur atomic.Pointer[runner]
		handled := make(chan int64, 1)
		r.handler = func(ctx context.Context, m *msgpb.Message) error {
			for cur.Load() == nil { // set as soon as run returns
				time.Sleep(time.Millisecond)
			}
			_ = cur.Load().Close()
			<-ctx.Done()
			// Give the boat the time to see the stream end, as it does
			// when the close cuts the stream before the ACK is sent.
			deadline := time.Now().Add(500 * time.Millisecond)
			for c.boat.Boat.Sessions() > 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			handled <- m.GetSeq()
			return nil
		}
		cl := c.run(&r, client.StaticToken(c.token("cal", "ios")))
		cur.Store(cl)
		if err := cl.wait(t); err != nil {
			t.Fatalf("round %d: Run: %v", round, err)
		}
		if got := <-handled; got != seq {
			t.Fatalf("round %d: handled %d, want %d", round, got, seq)
		}
		testutil.WaitFor(t, 10*time.Second, func() error {
			if n := c.stored("cal", "ios"); n != 0 {
				return fmt.Errorf("round %d: %d still stored: the ACK sent while closing was lost", round, n)
			}
			return nil
		})
	}
}
