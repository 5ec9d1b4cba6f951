package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/client"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// phone is a device that stays connected: when its stream ends it connects
// again, to the next boat in its list. It ACKs everything and counts what it
// received.
type phone struct {
	uid, platform string
	boats         func() []string

	mu  sync.Mutex
	got map[int64]int
	// arrivals are the times Messages payloads arrived, in order.
	arrivals []time.Time
}

func (p *phone) run(ctx context.Context, t *testing.T) {
	token, err := auth.Mint(secret, p.uid, p.platform, time.Hour)
	if err != nil {
		t.Error(err)
		return
	}
	for i := 0; ctx.Err() == nil; i++ {
		addrs := p.boats()
		d, err := client.Connect(ctx, addrs[i%len(addrs)], token)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		stop := context.AfterFunc(ctx, d.Close)
		for {
			pl, err := d.Recv()
			if err != nil {
				break
			}
			if ms := pl.GetMessages(); ms != nil {
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
		}
		stop()
		d.Close()
	}
}

// failure is a push the Push API refused.
type failure struct {
	at   time.Time
	code codes.Code
}

// load pushes to a mix of online and offline users and remembers every push
// the Push API acknowledged.
type load struct {
	c      *cluster
	phones map[string]*phone // uid → its web phone (online users)
	users  []string          // all users
	mu     sync.Mutex
	acked  map[int64][]string // seq → uids
	failed atomic.Int64
	// failures are the refused pushes: when, and their gRPC code.
	failures []failure
	// faultAt is when the scenario's fault began.
	faultAt time.Time
}

func newLoad(c *cluster, online, offline int) *load {
	l := &load{c: c, phones: map[string]*phone{}, acked: map[int64][]string{}}
	for i := range online {
		uid := "on" + strconv.Itoa(i)
		l.users = append(l.users, uid)
		l.phones[uid] = &phone{uid: uid, platform: "web", got: map[int64]int{}, boats: c.boatAddrs}
	}
	for i := range offline {
		l.users = append(l.users, "off"+strconv.Itoa(i))
	}
	return l
}

func (c *cluster) boatAddrs() []string {
	c.boatsMu.Lock()
	defer c.boatsMu.Unlock()
	var out []string
	for _, a := range c.boats {
		out = append(out, a)
	}
	return out
}

// connectPhones starts every phone and waits until each has a session.
func (l *load) connectPhones(ctx context.Context, t *testing.T) {
	var wg sync.WaitGroup
	for _, p := range l.phones {
		wg.Add(1)
		go func() { defer wg.Done(); p.run(ctx, t) }()
	}
	t.Cleanup(wg.Wait)
	rdb := l.c.redis.Client(t)
	testutil.WaitFor(t, 60*time.Second, func() error {
		for uid := range l.phones {
			if n, err := rdb.HLen(ctx, "msg/u:"+uid+"/ss").Result(); err != nil || n == 0 {
				return fmt.Errorf("%s has no session yet (%v)", uid, err)
			}
		}
		return nil
	})
}

// push sends n pushes from 8 goroutines; each goes to one online and one
// offline user with NEED_ACK | NEED_OFFLINE. at is called once, after n/3
// pushes, for the scenario's fault.
func (l *load) push(ctx context.Context, t *testing.T, n int, at func()) {
	conn, err := grpcx.Dial(l.c.push)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	api := pushpb.NewPushClient(auth.WithBearer(conn, apiKey))
	var next atomic.Int64
	var once sync.Once
	var wg sync.WaitGroup
	online, offline := 0, 0
	for _, u := range l.users {
		if _, ok := l.phones[u]; ok {
			online++
		} else {
			offline++
		}
	}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if i == int64(n/3) && at != nil {
					once.Do(func() {
						l.mu.Lock()
						l.faultAt = time.Now()
						l.mu.Unlock()
						at()
					})
				}
				uids := []string{"on" + strconv.Itoa(int(i)%online), "off" + strconv.Itoa(int(i)%offline)}
				body, _ := anypb.New(wrapperspb.String("m" + strconv.Itoa(int(i))))
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				resp, err := api.Push(cctx, &pushpb.PushRequest{Uids: uids, MsgBodies: []*anypb.Any{body},
					MsgOptions: uint32(msgpb.Option_NEED_ACK | msgpb.Option_NEED_OFFLINE)})
				cancel()
				if err != nil {
					l.failed.Add(1) // not acknowledged: not owed
					l.mu.Lock()
					l.failures = append(l.failures, failure{at: time.Now(), code: status.Code(err)})
					l.mu.Unlock()
					// A client backs off after a refusal, so that an
					// outage does not use up the scenario's pushes.
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				l.mu.Lock()
				l.acked[resp.GetSeqs()[0]] = uids
				l.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// verify waits until every acknowledged (seq, uid, platform) is delivered,
// stored or dead-lettered, then reports lost and duplicated counts and the
// longest pause in delivery after the fault; it fails the test on any loss
// and on a pause longer than maxPause.
func (l *load) verify(ctx context.Context, t *testing.T, maxPause time.Duration) {
	rdb := l.c.redis.Client(t)
	var lost, dup, delivered, stored, dead int
	var missing []string
	check := func() error {
		lost, dup, delivered, stored, dead = 0, 0, 0, 0, 0
		missing = missing[:0]
		deadSet, err := l.deadLetters(ctx)
		if err != nil {
			return err
		}
		storedSet := map[string]bool{}
		for _, uid := range l.users {
			for _, pl := range []string{"ios", "web"} {
				members, err := rdb.ZRange(ctx, rkeys.Standalone.Offline(uid, pl), 0, -1).Result()
				if err != nil {
					return err
				}
				for _, m := range members {
					storedSet[uid+"/"+pl+"/"+m] = true
				}
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for seq, uids := range l.acked {
			s := strconv.FormatInt(seq, 10)
			for _, uid := range uids {
				for _, pl := range []string{"ios", "web"} {
					key := uid + "/" + pl + "/" + s
					got := 0
					if p, ok := l.phones[uid]; ok && p.platform == pl {
						p.mu.Lock()
						got = p.got[seq]
						p.mu.Unlock()
					}
					switch {
					case got > 0:
						delivered++
						if got > 1 {
							dup++
						}
					case storedSet[key]:
						stored++
					case deadSet[key]:
						dead++
					default:
						lost++
						if len(missing) < 5 {
							missing = append(missing, key)
						}
					}
				}
			}
		}
		if lost > 0 {
			return fmt.Errorf("%d targets not delivered, stored or dead-lettered yet (e.g. %v)", lost, missing)
		}
		return nil
	}
	deadline := time.Now().Add(90 * time.Second)
	var err error
	for {
		if err = check(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("acknowledged pushes %d (failed, not acknowledged: %d); targets delivered %d, stored %d, dead-lettered %d; lost %d, duplicated %d",
		len(l.acked), l.failed.Load(), delivered, stored, dead, lost, dup)
	if err != nil {
		t.Fatalf("LOSS: %v", err)
	}
	pause, at := l.longestPause()
	t.Logf("longest pause in delivery after the fault: %s (from %s after it; bound %s)",
		pause.Round(time.Millisecond), at.Round(time.Millisecond), maxPause)
	if pause > maxPause {
		t.Errorf("delivery paused %s after the fault, more than %s", pause.Round(time.Millisecond), maxPause)
	}
	if len(l.acked) < 1000 {
		t.Fatalf("only %d pushes were acknowledged; the scenario did not put the system under load", len(l.acked))
	}
}

// longestPause is the longest time without any message arriving at any phone,
// from the fault to the last arrival: the fault itself counts as the start of
// the first gap. at is where the pause began, relative to the fault.
func (l *load) longestPause() (pause, at time.Duration) {
	l.mu.Lock()
	fault := l.faultAt
	l.mu.Unlock()
	return l.pauseSince(fault)
}

// pauseSince is longestPause from the time from on.
func (l *load) pauseSince(from time.Time) (pause, at time.Duration) {
	var all []time.Time
	for _, p := range l.phones {
		p.mu.Lock()
		all = append(all, p.arrivals...)
		p.mu.Unlock()
	}
	return testutil.LongestPause(all, from, time.Time{})
}

// deadLetters reads the dead-letter topic into uid/platform/seq keys.
func (l *load) deadLetters(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	add := func(value []byte) {
		var dl mqpb.DeadLetter
		if proto.Unmarshal(value, &dl) == nil {
			tu := dl.GetPayload().GetToUid()
			for _, pl := range tu.GetPlatforms() {
				for _, msg := range tu.GetMsgs() {
					out[tu.GetUid()+"/"+pl+"/"+strconv.FormatInt(msg.GetSeq(), 10)] = true
				}
			}
		}
	}
	if l.c.nats != nil {
		return out, testutil.NATSStreamRecords(ctx, l.c.nats.URL, queue.StreamName("gomsg.tasks.dlq"),
			func(m *jetstream.RawStreamMsg) { add(m.Data) })
	}
	conn, err := kafka.Dial("tcp", l.c.kafka)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions("gomsg.tasks.dlq")
	if err != nil {
		return out, nil //nolint:nilerr // no topic yet: nothing dead-lettered
	}
	for _, p := range parts {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{l.c.kafka}, Topic: "gomsg.tasks.dlq", Partition: p.ID, MaxWait: 50 * time.Millisecond})
		for {
			rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			m, err := r.ReadMessage(rctx)
			cancel()
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, io.EOF) {
					_ = r.Close()
					return nil, err
				}
				break
			}
			add(m.Value)
		}
		_ = r.Close()
	}
	return out, nil
}
