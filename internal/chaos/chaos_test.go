package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/testutil"
)

const pushes = 2000

// Longest pauses in delivery after each fault: what one run measured (go
// test -race, a loaded 2-core machine), with margin. See README "Network
// partitions and delivery pauses".
const (
	// A killed carrier's partitions wait for its group session to time
	// out (--kafka-session-timeout, 6 s) before the restarted one gets
	// them: 6.1 s measured. The design promises a crash pause of about
	// 10 s; the margin is for -race on a loaded machine.
	carrierKillPause = 15 * time.Second
	// Phones reconnect to the other boat and their stored messages are
	// replayed: 0.2 s measured.
	boatKillPause = 10 * time.Second
	// The outage is 5 s; carrier retries without committing: 5.9 s
	// measured.
	redisStopPause = 15 * time.Second
)

// carrier killed with SIGKILL mid-load, then restarted: it resumes from the
// committed offsets and nothing acknowledged is lost.
func TestCarrierKilledMidLoad(t *testing.T) {
	t.Parallel()
	c := newCluster(t, testutil.StartRedis(t))
	c.startStation()
	carrier := c.startCarrier()
	c.startBoat("b1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.waitUp(ctx)
	l := newLoad(c, 40, 40)
	l.connectPhones(ctx, t)
	l.push(ctx, t, pushes, func() {
		carrier.kill(t)
		time.Sleep(500 * time.Millisecond) // the carrier stays dead while pushes go on
		c.restart(carrier)
	})
	l.verify(ctx, t, carrierKillPause)
}

// The boat holding the online sessions killed with SIGKILL: clients
// reconnect to another boat and get their messages.
func TestBoatKilledMidLoad(t *testing.T) {
	t.Parallel()
	c := newCluster(t, testutil.StartRedis(t))
	c.startStation()
	c.startCarrier()
	b1 := c.startBoat("b1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.waitUp(ctx)
	l := newLoad(c, 40, 40)
	l.connectPhones(ctx, t) // every phone is on b1: the only boat
	c.startBoat("b2")
	c.waitUp(ctx)
	l.push(ctx, t, pushes, func() {
		b1.kill(t)
		c.dropBoat("b1") // phones reconnect to b2
	})
	l.verify(ctx, t, boatKillPause)
}

// Redis stopped for 5 s under load, then started again (with its data: AOF
// on): carrier retries without committing, and nothing is lost.
func TestRedisStoppedUnderLoad(t *testing.T) {
	t.Parallel()
	r := testutil.StartRedisPersistent(t)
	c := newCluster(t, r)
	c.startStation()
	c.startCarrier()
	c.startBoat("b1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.waitUp(ctx)
	l := newLoad(c, 40, 40)
	l.connectPhones(ctx, t)
	l.push(ctx, t, pushes, func() {
		r.Stop()
		go func() {
			time.Sleep(5 * time.Second) // the outage itself, not a wait for a condition
			if err := r.Restart(); err != nil {
				t.Error(err)
			}
		}()
	})
	l.verify(ctx, t, redisStopPause)
}
