package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/client"
	tu "github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// partitionPlatforms store offline long enough for any outage of the tests.
const partitionPlatforms = "ios:offline=1h/100000,web:offline=1h/100000"

// outage is how long each partition lasts: longer than the 3 s lease TTL the
// boat↔etcd case sets, so that the boat's claim lapses.
const outage = 6 * time.Second

// Network partitions between two services under load: the connection from
// one to the other goes through a proxy that is cut for `outage` and then
// restored. Every acknowledged push must reach every target device (checked
// by seq; duplicates are counted and printed), and delivery must resume: the
// longest pause between deliveries after Restore is measured and bounded.
func TestPartition(t *testing.T) {
	t.Parallel()
	// carrier reaches Redis through the proxy; boat and station directly.
	t.Run("CarrierRedis", func(t *testing.T) {
		t.Parallel()
		e := start(t, withServices("boat", "station"), withPlatforms(partitionPlatforms))
		px := tu.StartProxy(t, e.redis.Addr)
		e.startExtraWith(func(c *app.ClusterConfig) { c.Backends.RedisAddrs = []string{px.Addr()} }, "carrier")
		// Carrier retries what it could not finish, without committing:
		// 0.7 s measured.
		e.underPartition(t, px, cut{maxPause: 10 * time.Second})
	})
	// boat reaches etcd through the proxy: its lease lapses during the cut
	// (carrier stops seeing it), and it registers again after Restore.
	t.Run("BoatEtcd", func(t *testing.T) {
		t.Parallel()
		e := start(t, withServices("station", "carrier"), withPlatforms(partitionPlatforms))
		px := tu.StartProxy(t, e.etcd)
		b := e.startExtraWith(func(c *app.ClusterConfig) {
			c.Backends.EtcdEndpoints = []string{px.Addr()}
			c.Boat.LeaseTTL = 3 * time.Second
		}, "boat")
		e.boatAddr = b.Boat.ClientAddr()
		e.waitBoat("boat-1")
		// boat registers again and its sessions are replayed: 4.3 s
		// measured.
		e.underPartition(t, px, cut{maxPause: 15 * time.Second})
	})
	// station and carrier reach Kafka through the proxy (the broker
	// advertises the proxy's address): pushes are refused during the cut,
	// and carrier's consumer joins its group again after Restore. The
	// blackhole variant holds the bytes instead of closing: connections stay
	// open until the partition ends, so every timeout on the path to Kafka
	// has to fire on its own.
	for _, blackhole := range []bool{false, true} {
		name := "StationCarrierKafka"
		if blackhole {
			name += "Blackhole"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var px *tu.Proxy
			e := start(t, withPlatforms(partitionPlatforms), func(c *app.ClusterConfig) {
				px = tu.StartKafkaBehindProxy(t, c.Backends.TaskPartitions, c.Backends.TaskTopic)
				c.Backends.KafkaBrokers = []string{px.Addr()}
			})
			// 0.2 s measured (6 s group session): the bound is the
			// design's crash pause, about 10 s. Tasks done but not
			// committed when the cut came are consumed again: 44 of 142
			// targets duplicated.
			e.underPartition(t, px, cut{maxPause: 10 * time.Second, blackhole: blackhole})
		})
	}
	// The same on NATS JetStream: station and carrier reach the nats-server
	// through the proxy. Pushes are refused during the cut; carrier's
	// consumers keep their partitions while the cut is shorter than the
	// session timeout, or take them again after it, from the committed
	// positions.
	for _, blackhole := range []bool{false, true} {
		name := "StationCarrierNATS"
		if blackhole {
			name += "Blackhole"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var px *tu.Proxy
			e := start(t, withPlatforms(partitionPlatforms), func(c *app.ClusterConfig) {
				n := tu.StartNATS(t)
				px = tu.StartProxy(t, strings.TrimPrefix(n.URL, "nats://"))
				c.Backends.Queue, c.Backends.NATSURLs = app.QueueNATS, []string{"nats://" + px.Addr()}
			})
			e.underPartition(t, px, cut{maxPause: 10 * time.Second, blackhole: blackhole})
		})
	}
	// boat reaches station's internal API (Connect, Disconnect reports)
	// through the proxy, and every device's stream ends as the cut begins:
	// the devices cannot connect again until Restore (boat answers
	// Unavailable), pushes meanwhile are stored, and the disconnect reports
	// wait in boat's backlog.
	t.Run("BoatStation", func(t *testing.T) {
		t.Parallel()
		e := start(t, withServices("station", "carrier"), withPlatforms(partitionPlatforms))
		px := tu.StartProxy(t, e.gomsg.Station.InternalAddr())
		b := e.startExtraWith(func(c *app.ClusterConfig) { c.StationAddr = px.Addr() }, "boat")
		e.boatAddr = b.Boat.ClientAddr()
		e.waitBoat("boat-1")
		e.underPartition(t, px, cut{maxPause: 5 * time.Second, dropDevices: true})
	})
	// carrier reaches boat's internal API through the proxy (boat
	// advertises it in etcd); devices stay connected to the boat.
	t.Run("CarrierBoat", func(t *testing.T) {
		t.Parallel()
		var px *tu.Proxy
		e := start(t, withPlatforms(partitionPlatforms), func(c *app.ClusterConfig) {
			c.Boat.InternalAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tu.FreePort(t)))
			px = tu.StartProxy(t, c.Boat.InternalAddr)
			c.Boat.AdvertiseAddr = px.Addr()
		})
		// Without the fix, 272 of 392 targets were lost: the messages
		// stored when delivery failed during the cut wait for a reconnect
		// that never comes. Delivery of new pushes resumed in 0.4 s.
		// Duplicates are bounded: what was in flight at the cut, at most
		// one push per phone (0-2 measured; up to 974 of 1,798 when two
		// replays of one store ran at once).
		e.underPartition(t, px, cut{maxPause: 10 * time.Second, dups: inFlightDups})
	})
}

// phone is a device that stays connected: when its stream ends it connects
// again. It ACKs everything and records what arrived and when.
type phone struct {
	uid, platform string

	mu       sync.Mutex
	got      map[int64]int
	arrivals []time.Time
	ready    bool           // the current session's replay is done
	dev      *client.Device // the current stream, nil between streams
}

// drop ends the phone's current stream; it connects again.
func (p *phone) drop() {
	p.mu.Lock()
	d := p.dev
	p.mu.Unlock()
	if d != nil {
		d.Close()
	}
}

func (p *phone) run(ctx context.Context, e *env) {
	token, err := auth.Mint(secret, p.uid, p.platform, time.Hour)
	if err != nil {
		e.t.Error(err)
		return
	}
	for ctx.Err() == nil {
		d, err := client.Connect(ctx, e.boatAddr, token, e.deviceDial...)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond): // reconnect backoff
			}
			continue
		}
		stop := context.AfterFunc(ctx, d.Close)
		p.mu.Lock()
		p.dev = d
		p.mu.Unlock()
		for {
			pl, err := d.Recv()
			if err != nil {
				break
			}
			if pl.GetReady() != nil {
				p.mu.Lock()
				p.ready = true
				p.mu.Unlock()
			}
			ms := pl.GetMessages()
			if ms == nil {
				continue
			}
			seqs := make([]int64, 0, len(ms.GetMsgs()))
			p.mu.Lock()
			p.arrivals = append(p.arrivals, time.Now())
			for _, m := range ms.GetMsgs() {
				p.got[m.GetSeq()]++
				seqs = append(seqs, m.GetSeq())
			}
			p.mu.Unlock()
			if d.Ack(seqs...) != nil {
				break
			}
		}
		p.mu.Lock()
		p.ready, p.dev = false, nil
		p.mu.Unlock()
		stop()
		d.Close()
	}
}

func (p *phone) count(seq int64) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.got[seq]
}

// fleet is users with a phone on each platform, and pushes to them.
type fleet struct {
	e      *env
	users  []string
	phones map[string]*phone // uid/platform → phone

	mu      sync.Mutex
	acked   map[int64]string    // seq → uid
	ackedAt map[int64]time.Time // seq → when the push was acknowledged
	refused atomic.Int64
}

func (f *fleet) phone(uid, platform string) *phone { return f.phones[uid+"/"+platform] }

// delivered reports whether seq reached both phones of its uid.
func (f *fleet) delivered(seq int64, uid string) bool {
	return f.phone(uid, "ios").count(seq) > 0 && f.phone(uid, "web").count(seq) > 0
}

// pushLoop pushes NEED_ACK | NEED_OFFLINE messages round-robin to the users,
// one every 20 ms, until ctx ends.
func (f *fleet) pushLoop(ctx context.Context, start int) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := start; ; i += 2 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		uid := f.users[i%len(f.users)]
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := f.e.push.Push(pctx, &pushpb.PushRequest{Uids: []string{uid}, MsgBodies: []*anypb.Any{text(fmt.Sprint("m", i))},
			MsgOptions: uint32(msgpb.Option_NEED_ACK | msgpb.Option_NEED_OFFLINE)})
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				f.refused.Add(1) // not acknowledged: not owed
			}
			continue
		}
		f.mu.Lock()
		f.acked[resp.GetSeqs()[0]] = uid
		f.ackedAt[resp.GetSeqs()[0]] = time.Now()
		f.mu.Unlock()
	}
}

// deliveredSince counts the pushes acknowledged after t that reached every
// target phone.
func (f *fleet) deliveredSince(t time.Time) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for seq, uid := range f.acked {
		if f.ackedAt[seq].After(t) && f.delivered(seq, uid) {
			n++
		}
	}
	return n
}

// dupBound says how many duplicated targets a partition may cause.
type dupBound int

const (
	// anyDups: counted and printed, not bounded.
	anyDups dupBound = iota
	// inFlightDups: a copy of what was in flight when the connection went
	// (a push the device got whose answer was lost is stored and
	// replayed); a user's tasks run one at a time, so at most one push
	// per phone.
	inFlightDups
)

// cut is one partition of TestPartition and what it may cost.
type cut struct {
	// maxPause bounds the longest pause in delivery after the partition.
	maxPause time.Duration
	dups     dupBound
	// blackhole holds the proxy's bytes (Hold/Release) instead of closing
	// its connections (Cut/Restore).
	blackhole bool
	// dropDevices ends every phone's stream as the partition begins.
	dropDevices bool
}

// underPartition runs six users with an ios and a web phone each and pushes
// to them; once delivery flows it partitions px for `outage` as c says,
// ends the partition, and checks that nothing acknowledged is lost, that
// duplicates stay within c.dups and that the longest pause in delivery
// after the partition is at most c.maxPause.
func (e *env) underPartition(t *testing.T, px *tu.Proxy, c cut) {
	maxPause, dups := c.maxPause, c.dups
	f := &fleet{e: e, phones: map[string]*phone{}, acked: map[int64]string{}, ackedAt: map[int64]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(cancel)
	for i := range 6 {
		uid := "p" + strconv.Itoa(i)
		f.users = append(f.users, uid)
		for _, pl := range []string{"ios", "web"} {
			p := &phone{uid: uid, platform: pl, got: map[int64]int{}}
			f.phones[uid+"/"+pl] = p
			wg.Add(1)
			go func() { defer wg.Done(); p.run(ctx, e) }()
		}
	}
	tu.WaitFor(t, 30*time.Second, func() error {
		for k, p := range f.phones {
			p.mu.Lock()
			ready := p.ready
			p.mu.Unlock()
			if !ready {
				return fmt.Errorf("%s not ready", k)
			}
		}
		return nil
	})
	pctx, stopPush := context.WithCancel(ctx)
	var pushers sync.WaitGroup
	for i := range 2 {
		pushers.Add(1)
		go func() { defer pushers.Done(); f.pushLoop(pctx, i) }()
	}
	defer func() { stopPush(); pushers.Wait() }()
	begin := time.Now()
	tu.WaitFor(t, 30*time.Second, func() error {
		if n := f.deliveredSince(begin); n < 30 {
			return fmt.Errorf("%d pushes delivered before the cut, want 30", n)
		}
		return nil
	})

	if c.blackhole {
		px.Hold()
	} else {
		px.Cut()
	}
	cutAt := time.Now()
	if c.dropDevices {
		for _, p := range f.phones {
			p.drop()
		}
	}
	time.Sleep(outage) // the partition itself, not a wait for a condition
	if c.blackhole {
		px.Release()
	} else {
		px.Restore()
	}
	restoredAt := time.Now()
	// Pushes go on until delivery has resumed: 30 pushes acknowledged after
	// Restore reached both phones.
	tu.WaitFor(t, maxPause+30*time.Second, func() error {
		if n := f.deliveredSince(restoredAt); n < 30 {
			return fmt.Errorf("%d pushes since Restore delivered (%s ago), want 30", n, time.Since(restoredAt).Round(time.Second))
		}
		return nil
	})
	stopPush()
	pushers.Wait()
	stoppedAt := time.Now()

	var lost, dup, targets int
	var missing, dupSeqs []string
	check := func() error {
		lost, dup, targets = 0, 0, 0
		missing, dupSeqs = missing[:0], dupSeqs[:0]
		f.mu.Lock()
		defer f.mu.Unlock()
		for seq, uid := range f.acked {
			for _, pl := range []string{"ios", "web"} {
				targets++
				switch n := f.phone(uid, pl).count(seq); {
				case n == 0:
					lost++
					if len(missing) < 5 {
						missing = append(missing, fmt.Sprintf("%s/%s/%d", uid, pl, seq))
					}
				case n > 1:
					dup++
					if len(dupSeqs) < 5 {
						dupSeqs = append(dupSeqs, fmt.Sprintf("%s/%s/%d ×%d acked %s after the cut", uid, pl, seq, n,
							f.ackedAt[seq].Sub(cutAt).Round(time.Millisecond)))
					}
				}
			}
		}
		if lost > 0 {
			return fmt.Errorf("%d of %d targets not delivered (e.g. %v)", lost, targets, missing)
		}
		return nil
	}
	deadline := time.Now().Add(60 * time.Second)
	var err error
	for {
		if err = check(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond) // polling interval
	}
	pause, pauseAt := f.longestPause(restoredAt, stoppedAt)
	cutPause, _ := f.longestPause(cutAt, stoppedAt)
	t.Logf("acknowledged pushes %d (refused, not owed: %d); targets %d, lost %d, duplicated %d; longest pause after Restore %s (from %s after it; bound %s); longest since the cut %s",
		len(f.acked), f.refused.Load(), targets, lost, dup, pause.Round(time.Millisecond),
		pauseAt.Round(time.Millisecond), maxPause, cutPause.Round(time.Millisecond))
	if err != nil {
		t.Fatalf("LOSS: %v", err)
	}
	// Two replays of one store running at once (the task topic's and the
	// retry topic's) sent the device every stored message twice.
	if maxDup := len(f.phones); dups == inFlightDups && dup > maxDup {
		t.Fatalf("%d of %d targets duplicated, more than %d (one in-flight push per phone), e.g. %v", dup, targets, maxDup, dupSeqs)
	}
	if pause > maxPause {
		t.Fatalf("delivery paused %s after Restore, more than %s", pause.Round(time.Millisecond), maxPause)
	}
}

// longestPause is the longest time in [from, to] without a message arriving
// at any phone (from counts as the start of the first gap); at is where that
// pause began, relative to from.
func (f *fleet) longestPause(from, to time.Time) (pause, at time.Duration) {
	var all []time.Time
	for _, p := range f.phones {
		p.mu.Lock()
		all = append(all, p.arrivals...)
		p.mu.Unlock()
	}
	return tu.LongestPause(all, from, to)
}
