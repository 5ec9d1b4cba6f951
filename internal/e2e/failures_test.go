package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	tu "github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

func withRetries(n int) option {
	return func(c *app.ClusterConfig) {
		c.Carrier.MaxRetries = n
		c.Carrier.RetryBackoffMin = 20 * time.Millisecond
		c.Carrier.RetryBackoffMax = 100 * time.Millisecond
		c.Carrier.CallTimeout = time.Second
	}
}

// readTopic returns the values of every record on topic, polling until want
// records are there.
func (e *env) readTopic(topic string, want int) [][]byte {
	e.t.Helper()
	var out [][]byte
	tu.WaitFor(e.t, 30*time.Second, func() error {
		out = nil
		if e.nats != nil {
			out = e.natsRecords(topic)
			if len(out) < want {
				return fmt.Errorf("%s holds %d records, want %d", topic, len(out), want)
			}
			return nil
		}
		conn, err := kafka.Dial("tcp", e.kafka)
		if err != nil {
			return err
		}
		defer conn.Close()
		parts, err := conn.ReadPartitions(topic)
		if err != nil {
			return err
		}
		for _, p := range parts {
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{e.kafka}, Topic: topic, Partition: p.ID, MaxWait: 100 * time.Millisecond})
			pc, err := kafka.DialLeader(context.Background(), "tcp", e.kafka, topic, p.ID)
			if err != nil {
				_ = r.Close()
				return err
			}
			last, _ := pc.ReadLastOffset()
			_ = pc.Close()
			for off := int64(0); off < last; off++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				m, err := r.ReadMessage(ctx)
				cancel()
				if err != nil {
					_ = r.Close()
					return err
				}
				out = append(out, m.Value)
			}
			_ = r.Close()
		}
		if len(out) < want {
			return fmt.Errorf("%s holds %d records, want %d", topic, len(out), want)
		}
		return nil
	})
	return out
}

// A platform whose delivery always fails (its boat is registered but never
// answers) is retried exactly MaxRetries times, alone, then dead-lettered
// with the reason and the attempt history; the platform that worked got the
// message once.
func TestAlwaysFailingPlatformDeadLettered(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		const maxRetries = 3
		e := start(t, withRetries(maxRetries), queueOpt)
		web := e.connect("alice", "web", true)
		ctx := context.Background()
		// An ios session on a boat that is registered but unreachable.
		if _, err := tu.EtcdClient(t, e.etcd).Put(ctx, "/gomsg/boats/dead-boat", fmt.Sprintf("127.0.0.1:%d", tu.FreePort(t))); err != nil {
			t.Fatal(err)
		}
		e.rdb.HSet(ctx, e.keys.Sessions("alice"), "1", "ios-dead-boat")

		seq := e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}}, "hello") // online only: nothing to store
		recs := e.readTopic(taskTopic+".dlq", 1)
		if len(recs) != 1 {
			t.Fatalf("dead-letter topic holds %d records, want 1", len(recs))
		}
		var dl mqpb.DeadLetter
		if err := proto.Unmarshal(recs[0], &dl); err != nil {
			t.Fatal(err)
		}
		p := dl.GetPayload()
		if got := p.GetToUid().GetPlatforms(); !slices.Equal(got, []string{"ios"}) {
			t.Fatalf("dead letter platforms = %v, want only the failing [ios]", got)
		}
		if p.GetRetryCount() != maxRetries || len(p.GetAttempts()) != maxRetries+1 {
			t.Fatalf("retry_count %d with %d attempts, want %d retries and %d attempts",
				p.GetRetryCount(), len(p.GetAttempts()), maxRetries, maxRetries+1)
		}
		if m := p.GetToUid().GetMsgs(); len(m) != 1 || m[0].GetSeq() != seq {
			t.Fatalf("dead letter holds %v, want seq %d", m, seq)
		}
		if dl.GetReason() == "" || p.GetAttempts()[0].GetError() == "" {
			t.Fatalf("dead letter without a reason: %v", &dl)
		}
		retries := e.readTopic(taskTopic+".retry", maxRetries)
		if len(retries) != maxRetries {
			t.Fatalf("retry topic holds %d records, want exactly %d", len(retries), maxRetries)
		}
		// The web platform got it exactly once: the retries held only ios.
		if got := seqsOf(web); !slices.Equal(got, []int64{seq}) {
			t.Fatalf("web received %v, want [%d] once", got, seq)
		}

		// A kickout of the session on the unreachable boat fails the same way.
		if _, err := e.push.Kickout(ctx, &pushpb.KickoutRequest{Uid: "alice", Sid: "1"}); err != nil {
			t.Fatal(err)
		}
		recs = e.readTopic(taskTopic+".dlq", 2)
		var kicks int
		for _, r := range recs {
			var dl mqpb.DeadLetter
			if err := proto.Unmarshal(r, &dl); err != nil {
				t.Fatal(err)
			}
			if k := dl.GetPayload().GetKickoutSession(); k != nil {
				kicks++
				if k.GetSid() != "1" || len(dl.GetPayload().GetAttempts()) != maxRetries+1 {
					t.Fatalf("kickout dead letter %v, want sid 1 after %d attempts", &dl, maxRetries+1)
				}
			}
		}
		if kicks != 1 {
			t.Fatalf("%d kickout dead letters, want 1", kicks)
		}
	})
}

// A boat starting under the id of a previous run clears the sessions that
// run left in Redis.
func TestBoatRestartClearsOldSessions(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, queueOpt)
		ctx := context.Background()
		// What a crashed run of boat-z left: sessions of 3 users.
		for i, uid := range []string{"p", "q", "r"} {
			sid := fmt.Sprint(100 + i)
			e.rdb.HSet(ctx, e.keys.Sessions(uid), sid, "web-boat-z")
			e.rdb.SAdd(ctx, e.keys.BoatSessions("boat-z"), uid+" "+sid)
		}
		e.rdb.HSet(ctx, e.keys.Sessions("p"), "999", "ios-boat-1") // another boat's session stays
		e.startExtraWith(func(c *app.ClusterConfig) { c.Boat.ID = "boat-z" }, "boat")
		e.waitBoat("boat-z")
		tu.WaitFor(t, 10*time.Second, func() error {
			for _, uid := range []string{"q", "r"} {
				if n := e.rdb.Exists(ctx, e.keys.Sessions(uid)).Val(); n != 0 {
					return fmt.Errorf("%s's old session still recorded", uid)
				}
			}
			return nil
		})
		if m := e.rdb.HGetAll(ctx, e.keys.Sessions("p")).Val(); len(m) != 1 || m["999"] != "ios-boat-1" {
			t.Fatalf("p's sessions = %v, want only boat-1's", m)
		}
		if n := e.rdb.Exists(ctx, e.keys.BoatSessions("boat-z")).Val(); n != 0 {
			t.Fatal("boat-z's index still exists")
		}
	})
}

// A client that stops reading is kicked out as a slow consumer; what it could
// not take is stored offline (every message is either written to its stream or
// stored, none dropped), and other sessions keep receiving meanwhile.
func TestSlowConsumerKickedAndStored(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, func(c *app.ClusterConfig) {
			c.Boat.SendQueue = 4
			c.Boat.WriteTimeout = 500 * time.Millisecond
		})
		other := e.connect("bob", "web", true)

		// A raw stream that never reads after Ready, with a fixed 64 KB window
		// (no BDP growth), as on a device that stopped reading: the boat's sends
		// block once it is full.
		token, _ := auth.Mint(secret, "slow", "ios", time.Hour)
		conn, err := grpc.NewClient(e.boatAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		sctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
		stream, err := msgpb.NewMsgClient(conn).Loop(sctx)
		if err != nil {
			t.Fatal(err)
		}
		for {
			p, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if p.GetReady() != nil {
				break
			}
		}
		m := e.gomsg.Metrics
		const n = 40
		big := &anypb.Any{TypeUrl: "type.googleapis.com/google.protobuf.BytesValue", Value: make([]byte, 60<<10)}
		for i := 0; i < n; i++ {
			if _, err := e.push.Push(context.Background(), &pushpb.PushRequest{Uids: []string{"slow"},
				MsgBodies: []*anypb.Any{big}, MsgOptions: optOffline,
				PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}}}); err != nil {
				t.Fatal(err)
			}
			// bob is not held up by the slow session.
			e.pushText(&pushpb.PushRequest{Uids: []string{"bob"}, PlatformConfig: &pushpb.PlatformConfig{
				Platforms: []string{"web"}}}, fmt.Sprint("b", i))
		}
		other.waitCount(t, n)
		delivered := func() float64 { return testutil.ToFloat64(m.Deliveries.WithLabelValues("delivered")) - n } // minus bob's
		stored := func() float64 { return testutil.ToFloat64(m.Deliveries.WithLabelValues("stored_offline")) }
		tu.WaitFor(t, 30*time.Second, func() error {
			if got := delivered() + stored(); got != n {
				return fmt.Errorf("slow's outcomes: %v written + %v stored, want %d in all", delivered(), stored(), n)
			}
			return nil
		})
		if k := testutil.ToFloat64(m.Kickouts.WithLabelValues("SLOW_CONSUMER")); k < 1 {
			t.Fatal("the slow session was not kicked out as SLOW_CONSUMER")
		}
		t.Logf("slow session: %v messages written before the kick, %v stored", delivered(), stored())
		// Its window and queue hold only a few; the rest was stored, and the
		// store holds exactly what carrier counted as stored.
		if delivered() > 8 {
			t.Fatalf("%v messages counted as written to a stream that holds a 64 KB window and a 4-slot queue", delivered())
		}
		e.waitZcard("slow", "ios", int64(stored()))
	})
}

// With Kafka unreachable the Push API answers Unavailable, and no push
// reports success.
func TestKafkaDownPushUnavailable(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, func(c *app.ClusterConfig) { c.Backends.KafkaWriteTimeout = 2 * time.Second }, queueOpt)
		e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}}, "works")
		e.stopQueue()
		for i := 0; i < 5; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			resp, err := e.push.Push(ctx, &pushpb.PushRequest{Uids: []string{"alice"},
				MsgBodies: []*anypb.Any{text(fmt.Sprint("lost ", i))}})
			cancel()
			if err == nil {
				t.Fatalf("push %d reported success (%v) with Kafka down", i, resp.GetSeqs())
			}
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("push %d: %v, want Unavailable", i, err)
			}
		}
		// The refusals are counted under the queue in use.
		kind, other := "kafka", "nats"
		if e.nats != nil {
			kind, other = other, kind
		}
		errs := e.gomsg.Metrics.BackendErrors
		if n := promtest.ToFloat64(errs.WithLabelValues(kind, "publish")); n < 5 {
			t.Errorf("gomsg_backend_errors_total{backend=%q,op=\"publish\"} = %v, want at least 5", kind, n)
		}
		if n := promtest.ToFloat64(errs.WithLabelValues(other, "publish")); n != 0 {
			t.Errorf("gomsg_backend_errors_total{backend=%q,op=\"publish\"} = %v, want 0", other, n)
		}
	})
}

// A draining boat leaves etcd, tells its clients to reconnect elsewhere,
// hands back un-ACKed messages (they are stored offline) and reports the
// disconnects to station in batches.
func TestBoatDrain(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withServices("station", "carrier"), withAckWait(30*time.Second))
		b1 := e.startExtraWith(func(c *app.ClusterConfig) { c.Boat.ID = "boat-a" }, "boat")
		e.waitBoat("boat-a")
		e.boatAddr = b1.Boat.ClientAddr()

		const n = 600
		devs := make([]*device, n)
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 16 {
					d, err := e.tryDial(fmt.Sprint("u", i), "web", true)
					if err != nil {
						t.Error(err)
						return
					}
					devs[i] = d
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for _, d := range devs {
			d.waitReady(t)
		}
		silent := e.connect("holder", "ios", false) // never ACKs
		seq := e.pushText(&pushpb.PushRequest{Uids: []string{"holder"}, MsgOptions: optAck | optOffline,
			PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}}}, "in flight")
		silent.waitCount(t, 1)
		calls0 := testutil.ToFloat64(e.gomsg.Metrics.DisconnectCalls)

		if err := b1.Stop(); err != nil {
			t.Fatal(err)
		}
		// Stop has written every kickout; each device's reader takes it
		// up in its own time.
		for _, d := range append(devs, silent) {
			tu.WaitFor(t, 10*time.Second, func() error {
				d.mu.Lock()
				k := d.kickout
				d.mu.Unlock()
				if k.GetReason() != msgpb.KickoutReason_SERVER_DRAINING {
					return fmt.Errorf("%s got kickout %v, want SERVER_DRAINING", d.UID, k)
				}
				return nil
			})
		}
		resp, _ := tu.EtcdClient(t, e.etcd).Get(context.Background(), "/gomsg/boats/boat-a")
		if len(resp.Kvs) != 0 {
			t.Fatal("drained boat still registered")
		}
		// The un-ACKed message was handed back and stored.
		tu.WaitFor(t, 20*time.Second, func() error {
			m, _ := e.rdb.ZRange(context.Background(), e.keys.Offline("holder", "ios"), 0, -1).Result()
			if !slices.Equal(m, []string{fmt.Sprint(seq)}) {
				return fmt.Errorf("holder's ios store = %v, want [%d]", m, seq)
			}
			return nil
		})
		// Every session is gone from Redis, reported in a few batches.
		keys, _ := e.rdb.Keys(context.Background(), "msg/u:*/ss").Result()
		if len(keys) != 0 {
			t.Fatalf("%d session hashes left after drain", len(keys))
		}
		calls := testutil.ToFloat64(e.gomsg.Metrics.DisconnectCalls) - calls0
		t.Logf("%d sessions reported in %v Disconnect calls", n+1, calls)
		if calls < 1 || calls > 10 {
			t.Fatalf("%v Disconnect calls for %d sessions, want a few batches", calls, n+1)
		}
	})
}

// A boat that loses its etcd lease while running stops serving (another
// process may take its id): its session is kicked with SERVER_DRAINING.
// Messages pushed meanwhile are stored; once the boat registered again the
// device reconnects and gets them in the replay, then live ones, once each.
func TestBoatLeaseLossKicksSessions(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, queueOpt)
		d := e.connect("ivy", "android", true)
		cli := tu.EtcdClient(t, e.etcd)
		ctx := context.Background()
		resp, err := cli.Get(ctx, "/gomsg/boats/boat-1")
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("boat key: %v", err)
		}
		lease := clientv3.LeaseID(resp.Kvs[0].Lease)
		if _, err := cli.Revoke(ctx, lease); err != nil {
			t.Fatal(err)
		}
		tu.WaitFor(t, 20*time.Second, func() error {
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.kickout == nil {
				return fmt.Errorf("session not kicked after the lease was revoked")
			}
			if r := d.kickout.GetReason(); r != msgpb.KickoutReason_SERVER_DRAINING {
				t.Fatalf("kickout reason %v, want SERVER_DRAINING", r)
			}
			return nil
		})
		seq := e.pushText(&pushpb.PushRequest{Uids: []string{"ivy"}, MsgOptions: optOffline}, "during the cut")
		tu.WaitFor(t, 20*time.Second, func() error {
			r, err := cli.Get(ctx, "/gomsg/boats/boat-1")
			if err != nil || len(r.Kvs) == 0 || clientv3.LeaseID(r.Kvs[0].Lease) == lease {
				return fmt.Errorf("boat not registered again yet")
			}
			return nil
		})
		var d2 *device
		tu.WaitFor(t, 20*time.Second, func() error {
			var err error
			d2, err = e.tryDial("ivy", "android", true)
			return err
		})
		d2.waitCount(t, 1)
		seq2 := e.pushText(&pushpb.PushRequest{Uids: []string{"ivy"}, MsgOptions: optOffline}, "after")
		d2.waitCount(t, 2)
		if s := seqsOf(d2); !slices.Equal(s, []int64{seq, seq2}) {
			t.Fatalf("received %v, want [%d %d] once each", s, seq, seq2)
		}
		if got := seqsOf(d); slices.Contains(got, seq) || slices.Contains(got, seq2) {
			t.Fatalf("kicked session received %v", got)
		}
		e.waitZcard("ivy", "android", 0)
	})
}
