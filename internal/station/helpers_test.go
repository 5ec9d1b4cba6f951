package station

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/idgen"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/mqpb"
)

const (
	testSecret = "station-test-secret"
	testTopic  = "tasks"
	// testBroadcastTopic is the rig's --broadcast-topic.
	testBroadcastTopic = "broadcast"
	testBoat           = "boat-1"
	// testPresenceTopic is the topic of rigs made with presence events on.
	testPresenceTopic = "presence"
)

// rig is a station on a real redis-server and the in-process Kafka broker
// (one partition, so tasks read back in publish order). It is not served:
// tests call its methods, as the gRPC adapters do.
type rig struct {
	t        testing.TB
	s        *Station
	rdb      *redis.Client
	sessions *session.Store
	kafka    string
	read     int64 // task offset read up to
	bread    int64 // broadcast offset read up to
}

func newRig(t testing.TB, change func(*Config)) *rig {
	t.Helper()
	r := testutil.StartRedis(t)
	rdb := r.Client(t)
	brokers := testutil.StartKafka(t, 1, testTopic, testBroadcastTopic, testPresenceTopic, testReceiptsTopic)
	log := zaptest.NewLogger(t)
	prod := queue.NewProducer(queue.ProducerConfig{Brokers: []string{brokers}}, log)
	t.Cleanup(func() { _ = prod.Close() })
	cfg := Config{PushGRPCAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0", TaskTopic: testTopic, BroadcastTopic: testBroadcastTopic}
	if change != nil {
		change(&cfg)
	}
	sessions := session.New(rdb)
	s, err := New(cfg, log, metrics.New(), nil, auth.NewJWT(testSecret, false), sessions, nil, prod)
	if err != nil {
		t.Fatal(err)
	}
	// Run would lease a node id from etcd; an unfenced generator stands in.
	if s.ids, err = idgen.New(1); err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, s: s, rdb: rdb, sessions: sessions, kafka: brokers}
}

func (r *rig) token(uid, platform string) string {
	r.t.Helper()
	return mint(r.t, testSecret, uid, platform)
}

func mint(t testing.TB, secret, uid, platform string) string {
	t.Helper()
	tok, err := auth.Mint(secret, uid, platform, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// connect connects sid for uid on platform through testBoat.
func (r *rig) connect(uid, platform, sid string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := r.s.Connect(ctx, r.token(uid, platform), testBoat, sid)
	return err
}

// recorded returns the sids recorded for uid, oldest first.
func (r *rig) recorded(uid string) []string {
	r.t.Helper()
	all, err := r.sessions.List(context.Background(), uid)
	if err != nil {
		r.t.Fatal(err)
	}
	out := []string{}
	for _, s := range all {
		out = append(out, s.Sid)
	}
	return out
}

// end is the task topic's end offset.
func (r *rig) end() int64 { return r.endOf(testTopic) }

// endOf is a topic's end offset.
func (r *rig) endOf(topic string) int64 {
	r.t.Helper()
	conn, err := kafka.DialLeader(context.Background(), "tcp", r.kafka, topic, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close()
	last, err := conn.ReadLastOffset()
	if err != nil {
		r.t.Fatal(err)
	}
	return last
}

// tasks returns the tasks published since the last call, in order, with
// their keys.
func (r *rig) tasks() (keys []string, tasks []*mqpb.Payload) { return r.readTopic(testTopic, &r.read) }

// broadcasts returns the records of the broadcast topic published since
// the last call, in order, with their keys.
func (r *rig) broadcasts() (keys []string, tasks []*mqpb.Payload) {
	return r.readTopic(testBroadcastTopic, &r.bread)
}

// readTopic reads a topic from *read to its end with a consumer.
func (r *rig) readTopic(topic string, read *int64) (keys []string, tasks []*mqpb.Payload) {
	r.t.Helper()
	end := r.endOf(topic)
	if end == *read {
		return nil, nil
	}
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{r.kafka}, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	if err := rd.SetOffset(*read); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for *read < end {
		m, err := rd.ReadMessage(ctx)
		if err != nil {
			r.t.Fatalf("read %s at offset %d of %d: %v", topic, *read, end, err)
		}
		var p mqpb.Payload
		if err := proto.Unmarshal(m.Value, &p); err != nil {
			r.t.Fatal(err)
		}
		keys = append(keys, string(m.Key))
		tasks = append(tasks, &p)
		*read = m.Offset + 1
	}
	return keys, tasks
}

// noBroadcasts fails if anything was published on the broadcast topic
// since the last read.
func (r *rig) noBroadcasts(what string) {
	r.t.Helper()
	if _, tasks := r.broadcasts(); len(tasks) != 0 {
		r.t.Fatalf("%s: %d broadcasts published, want none: %v", what, len(tasks), tasks)
	}
}

// noTasks fails if anything was published since the last read.
func (r *rig) noTasks(what string) {
	r.t.Helper()
	if _, tasks := r.tasks(); len(tasks) != 0 {
		r.t.Fatalf("%s: %d tasks published, want none: %v", what, len(tasks), tasks)
	}
}

// invalid fails unless err is InvalidArgument naming field (a prefix:
// "msg_bodies" matches "msg_bodies[2]").
func invalid(t testing.TB, err error, field string) {
	t.Helper()
	var ge *grpcerr.Error
	if !errors.As(err, &ge) || ge.Code != codes.InvalidArgument || !strings.HasPrefix(ge.Field, field) {
		t.Fatalf("err = %v, want InvalidArgument naming %s", err, field)
	}
	if st := status.Convert(grpcerr.Status(err)); st.Code() != codes.InvalidArgument || st.Message() == "" {
		t.Fatalf("status = %v %q, want InvalidArgument with a message", st.Code(), st.Message())
	}
}

// raceConnects connects n ios sessions of uid at once and returns their
// sids, oldest first. Goroutine i connects sids[(i*stride)%n] (stride prime
// to n), so the sids are handed out in an order unrelated to the order the
// goroutines reach Redis and an older sid often writes last. round keeps the
// sids of successive calls apart.
func raceConnects(t *testing.T, r *rig, uid string, round, n, stride int) []string {
	t.Helper()
	sids := make([]string, n)
	for i := range sids {
		sids[i] = fmt.Sprint(1_000_000 + round*100 + i)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.connect(uid, "ios", sids[(i*stride)%n]); err != nil {
				t.Errorf("connect: %v", err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return sids
}
