package chaos

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/gomsg/gomsg/internal/testutil"
)

const pushes = 2000

// Longest pauses in delivery after each fault: what one run measured (go
// test -race, a loaded 2-core machine), with margin. See README "Network
// partitions and delivery pauses".
const (
	// A killed carrier's partitions wait for its group session to time
	// out (--queue-session-timeout, 6 s) before the restarted one gets
	// them: 6.1 s measured. The design promises a crash pause of about
	// 10 s; the margin is for -race on a loaded machine.
	carrierKillPause = 15 * time.Second
	// Phones reconnect to the other boat and their stored messages are
	// replayed: 0.2 s measured.
	boatKillPause = 10 * time.Second
	// The outage is 5 s; carrier retries without committing: 5.9 s
	// measured.
	redisStopPause = 15 * time.Second
	// After a killed nats-server is started again: the bound of the
	// Kafka rows for a broker cut off from station and carrier.
	natsRestartPause = 10 * time.Second
	// natsDown is how long the nats-server stays killed.
	natsDown = 5 * time.Second
)

// The nats-server (a process of its own, Debian's) killed with SIGKILL
// under load and started again on its store 5 s later: pushes are refused
// Unavailable while it is down, never acknowledged and lost; every
// acknowledged push is delivered, stored or dead-lettered, and delivery
// resumes within the bound after the restart.
func TestNATSServerKilledUnderLoad(t *testing.T) {
	t.Parallel()
	c := newCluster(t, testutil.StartRedis(t), onNATS)
	c.startStation()
	c.startCarrier()
	c.startBoat("b1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.waitUp(ctx)
	l := newLoad(c, 40, 40)
	l.connectPhones(ctx, t)
	var killedAt, restartedAt time.Time
	restarted := make(chan struct{})
	l.push(ctx, t, pushes, func() {
		c.nats.Kill()
		killedAt = time.Now()
		go func() {
			defer close(restarted)
			time.Sleep(natsDown) // the outage itself, not a wait for a condition
			restartedAt = time.Now()
			if err := c.nats.Restart(); err != nil {
				t.Error(err)
			}
		}()
	})
	<-restarted
	l.verify(ctx, t, natsDown+natsRestartPause)

	l.mu.Lock()
	failures := l.failures
	l.mu.Unlock()
	unavailable := 0
	for _, f := range failures {
		switch {
		case f.code != codes.Unavailable:
			t.Errorf("a push was refused %s at %s after the kill; want Unavailable", f.code, f.at.Sub(killedAt).Round(time.Millisecond))
		case f.at.After(killedAt) && f.at.Before(restartedAt):
			unavailable++
		}
	}
	if unavailable == 0 {
		t.Errorf("no push was refused while nats-server was down (%d refusals in all)", len(failures))
	}
	pause, at := l.pauseSince(restartedAt)
	t.Logf("pushes refused Unavailable while nats-server was down: %d; longest pause in delivery after its restart: %s (from %s after it; bound %s)",
		unavailable, pause.Round(time.Millisecond), at.Round(time.Millisecond), natsRestartPause)
	if pause > natsRestartPause {
		t.Errorf("delivery paused %s after nats-server restarted, more than %s", pause.Round(time.Millisecond), natsRestartPause)
	}
}

// carrier killed with SIGKILL mid-load, then restarted: it resumes from the
// committed offsets and nothing acknowledged is lost.
func TestCarrierKilledMidLoad(t *testing.T) {
	t.Parallel()
	eachQueue(t, testCarrierKilledMidLoad)
}

func testCarrierKilledMidLoad(t *testing.T, q queueKind) {
	c := newCluster(t, testutil.StartRedis(t), q)
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
	eachQueue(t, testBoatKilledMidLoad)
}

func testBoatKilledMidLoad(t *testing.T, q queueKind) {
	c := newCluster(t, testutil.StartRedis(t), q)
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
	eachQueue(t, testRedisStoppedUnderLoad)
}

func testRedisStoppedUnderLoad(t *testing.T, q queueKind) {
	r := testutil.StartRedisPersistent(t)
	c := newCluster(t, r, q)
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
