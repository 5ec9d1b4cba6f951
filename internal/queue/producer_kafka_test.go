package queue

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/embedded"
	"github.com/gomsg/gomsg/internal/testutil"
)

func TestPublishOneRecordIsConsumedWithKeyValueHeaders(t *testing.T) {
	t.Parallel()
	const partitions = 8
	brokers := startBroker(t, partitions)
	p := newTestProducer(t, brokers)

	want := Record{Topic: testTopic, Key: "uid-42", Value: []byte("hello"),
		Headers: map[string]string{"type": "ToUid", "trace": "abc"}}
	publish(t, p, []Record{want})

	var mu sync.Mutex
	var got []Message
	startConsumer(t, ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic},
		func(_ context.Context, m Message) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, m)
			return nil
		})
	waitFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return testutil.Errorf("nothing consumed yet")
		}
		return nil
	})

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("consumed %d messages, want 1: %+v", len(got), got)
	}
	m := got[0]
	if m.Topic != want.Topic || m.Key != want.Key || string(m.Value) != string(want.Value) {
		t.Errorf("consumed %s/%q=%q, want %s/%q=%q", m.Topic, m.Key, m.Value, want.Topic, want.Key, want.Value)
	}
	if len(m.Headers) != len(want.Headers) || m.Headers["type"] != "ToUid" || m.Headers["trace"] != "abc" {
		t.Errorf("headers = %v, want %v", m.Headers, want.Headers)
	}
	// Keys are partitioned with murmur2, as the Java client and librdkafka
	// do, so that every producer agrees on a uid's partition.
	all := make([]int, partitions)
	for i := range all {
		all[i] = i
	}
	if wantPart := (kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(want.Key)}, all...); m.Partition != wantPart {
		t.Errorf("partition = %d, want murmur2 partition %d", m.Partition, wantPart)
	}
	if m.Time.IsZero() {
		t.Error("message time is zero")
	}
}

func TestPublishBatchesManyKeysIntoFewRequests(t *testing.T) {
	t.Parallel()
	const partitions, records = 8, 10000
	p := newTestProducer(t, startBroker(t, partitions))
	recs := make([]Record, records)
	for i := range recs {
		recs[i] = Record{Topic: testTopic, Key: "uid-" + strconv.Itoa(i), Value: []byte("v")}
	}
	publish(t, p, recs)
	// BatchSize 1000 over 8 partitions: 2 produce requests per partition.
	if writes := p.writes(); writes > 4*partitions || writes < partitions {
		t.Errorf("publishing %d records took %d produce requests, want %d to %d", records, writes, partitions, 4*partitions)
	}
}

func TestPublishConcurrentCallsAllAcknowledged(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 4)
	p := newTestProducer(t, brokers)
	const callers, perCaller = 20, 50
	var wg sync.WaitGroup
	errs := make(chan error, callers*perCaller)
	for c := range callers {
		wg.Go(func() {
			for i := range perCaller {
				rec := Record{Topic: testTopic, Key: "uid-" + strconv.Itoa(c), Value: []byte(strconv.Itoa(i))}
				if err := p.Publish(context.Background(), rec); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("publish: %v", err)
	}

	seen := newSeqRecorder()
	startConsumer(t, ConsumerConfig{Brokers: brokers, GroupID: "g", Topic: testTopic},
		func(_ context.Context, m Message) error {
			n, _ := strconv.Atoi(string(m.Value))
			seen.add(m.Key, n)
			return nil
		})
	seen.waitCount(t, callers*perCaller, 20*time.Second)
	seen.checkExactlyInOrder(t, callers, perCaller)
}

// silentBroker accepts connections and never answers.
func silentBroker(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

func TestPublishToUnreachableBrokerIsUnavailable(t *testing.T) {
	t.Parallel()
	rec := Record{Topic: testTopic, Key: "k", Value: []byte("v")}
	closedPort := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
	silent := silentBroker(t)
	tests := []struct {
		name         string
		broker       string
		writeTimeout time.Duration
		ctxTimeout   time.Duration
		within       time.Duration
		wantCtxErr   bool
	}{
		{name: "closed port", broker: closedPort, writeTimeout: time.Second, within: time.Second},
		{name: "silent broker, write timeout", broker: silent, writeTimeout: 500 * time.Millisecond, within: 1500 * time.Millisecond},
		{name: "silent broker, context deadline", broker: silent, writeTimeout: 10 * time.Second,
			ctxTimeout: 500 * time.Millisecond, within: 1500 * time.Millisecond, wantCtxErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := NewProducer(ProducerConfig{Brokers: []string{tt.broker}, WriteTimeout: tt.writeTimeout}, zaptest.NewLogger(t))
			defer p.Close()
			ctx := context.Background()
			if tt.ctxTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctxTimeout)
				defer cancel()
			}
			start := time.Now()
			err := p.Publish(ctx, rec)
			if elapsed := time.Since(start); elapsed > tt.within {
				t.Errorf("Publish returned after %s, want within %s", elapsed, tt.within)
			}
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Publish error = %v, want one wrapping ErrUnavailable", err)
			}
			if got := errors.Is(err, context.DeadlineExceeded); got != tt.wantCtxErr {
				t.Errorf("Publish error = %v: wraps DeadlineExceeded = %v, want %v (only when the caller's context ended)", err, got, tt.wantCtxErr)
			}
		})
	}
}

// kafka-go's transport caches "cluster unreachable" until its next metadata
// refresh (6s); the producer must not keep failing once the broker is up.
func TestPublishRecoversOnceBrokerIsUp(t *testing.T) {
	t.Parallel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
	p := NewProducer(ProducerConfig{Brokers: []string{addr}, WriteTimeout: time.Second}, zaptest.NewLogger(t))
	defer p.Close()
	rec := Record{Topic: testTopic, Key: "k", Value: []byte("v")}
	if err := p.Publish(context.Background(), rec); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Publish before the broker is up: error = %v, want ErrUnavailable", err)
	}
	k, err := embedded.StartKafka(addr, 1, testTopic)
	if err != nil {
		t.Fatalf("start kafka on %s: %v", addr, err)
	}
	t.Cleanup(k.Close)
	waitFor(t, 2*time.Second, func() error {
		return p.Publish(context.Background(), rec)
	})
}

func TestPublishInvalidRecord(t *testing.T) {
	t.Parallel()
	p := NewProducer(ProducerConfig{Brokers: []string{"127.0.0.1:1"}}, zaptest.NewLogger(t))
	defer p.Close()
	err := p.Publish(context.Background(), Record{Key: "k", Value: []byte("v")})
	if !errors.Is(err, ErrInvalidRecord) || errors.Is(err, ErrUnavailable) {
		t.Errorf("Publish without topic: error = %v, want ErrInvalidRecord only", err)
	}
}

func TestProducerConfigDefaults(t *testing.T) {
	t.Parallel()
	want := ProducerConfig{BatchTimeout: 2 * time.Millisecond, BatchSize: 1000, WriteTimeout: 10 * time.Second}
	if got := (ProducerConfig{}).withDefaults(); got.BatchTimeout != want.BatchTimeout || got.BatchSize != want.BatchSize || got.WriteTimeout != want.WriteTimeout {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}
	if got := (ProducerConfig{BatchTimeout: -1, BatchSize: -1, WriteTimeout: -1}).withDefaults(); got.BatchTimeout != want.BatchTimeout || got.BatchSize != want.BatchSize || got.WriteTimeout != want.WriteTimeout {
		t.Errorf("defaults of negative values = %+v, want %+v", got, want)
	}
	set := ProducerConfig{BatchTimeout: 1, BatchSize: 2, WriteTimeout: 3}
	if got := set.withDefaults(); got.BatchTimeout != 1 || got.BatchSize != 2 || got.WriteTimeout != 3 {
		t.Errorf("defaults changed set values: %+v", got)
	}
}

// Calls of up to 32 records whose records go to one leader are gathered
// into the leader's requests, bigger ones take the large-batch writer; a
// producer that published closes cleanly.
func TestPublishRoutesByCallSizeAndCloses(t *testing.T) {
	t.Parallel()
	p := NewProducer(ProducerConfig{Brokers: startBroker(t, 2)}, zaptest.NewLogger(t))
	for _, n := range []int{1, smallBatch, smallBatch + 1} {
		publish(t, p, sequenced(n, 1))
		gathered, small, large := p.batcher.records.Swap(0), p.small.Stats().Messages, p.large.Stats().Messages
		if wantSmall := n <= smallBatch; (wantSmall && (gathered != int64(n) || small != 0 || large != 0)) ||
			(!wantSmall && (large != int64(n) || small != 0 || gathered != 0)) {
			t.Errorf("%d records: %d gathered, %d through the small writer, %d through the large one", n, gathered, small, large)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// A record larger than a produce request can carry is invalid, not a
// temporary failure; a producer without brokers is unavailable.
func TestPublishTooLargeRecordIsInvalid(t *testing.T) {
	t.Parallel()
	p := newTestProducer(t, startBroker(t, 1))
	err := p.Publish(context.Background(), Record{Topic: testTopic, Key: "k", Value: make([]byte, 2<<20)})
	if !errors.Is(err, ErrInvalidRecord) || errors.Is(err, ErrUnavailable) {
		t.Errorf("Publish of a 2 MiB record: error = %v, want ErrInvalidRecord only", err)
	}
	if err := NewProducer(ProducerConfig{}, zaptest.NewLogger(t)).Publish(context.Background(), Record{Topic: testTopic}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Publish without brokers: error = %v, want ErrUnavailable", err)
	}
	if err := p.Publish(context.Background()); err != nil {
		t.Errorf("Publish of nothing: %v", err)
	}
}

// A record the brokers refuse as larger than its topic accepts
// (max.message.bytes) is invalid, not a temporary failure: retrying it
// cannot help. The call's other records are still written.
func TestPublishRecordTheBrokersRefuseIsInvalid(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := (&kafka.Client{Addr: kafka.TCP(brokers...)}).CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: "small", NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: "200"}}}}})
	if err != nil || res.Errors["small"] != nil {
		t.Fatalf("create topic: %v, %v", err, res.Errors)
	}
	p := newTestProducer(t, brokers)
	err = p.Publish(ctx, Record{Topic: "small", Key: "k", Value: make([]byte, 1000)},
		Record{Topic: testTopic, Key: "k", Value: []byte("fits")})
	if !errors.Is(err, ErrInvalidRecord) || errors.Is(err, ErrUnavailable) || !errors.Is(err, kafka.MessageSizeTooLarge) ||
		!strings.Contains(err.Error(), "1 of 2 records") {
		t.Errorf("Publish with a record the topic refuses: error = %v, want ErrInvalidRecord for 1 of 2 records, MessageSizeTooLarge", err)
	}
	// The topic still takes records that fit.
	err = p.Publish(ctx, Record{Topic: "small", Key: "k", Value: []byte("fits")})
	if err != nil {
		t.Errorf("Publish of a record that fits: %v", err)
	}
}

// A record the brokers refuse for a reason other than its size (here a
// produce policy, injected into the in-process broker's answer, which has no
// such policy of its own) is a failure the caller should report and retry:
// the error wraps ErrUnavailable and the brokers' reason for the refused
// record, and counts it, while the call's other record is written.
func TestPublishRecordRefusedByPolicyIsUnavailable(t *testing.T) {
	t.Parallel()
	const refused = "refused"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, testTopic, refused))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != refused {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		st := kmsg.NewProduceResponseTopic()
		st.Topic = refused
		for _, rp := range req.Topics[0].Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, kerr.PolicyViolation.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	})
	brokers := c.ListenAddrs()
	p := newTestProducer(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = p.Publish(ctx, Record{Topic: testTopic, Key: "k", Value: []byte("written")},
		Record{Topic: refused, Key: "k", Value: []byte("refused")})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInvalidRecord) || !errors.Is(err, kafka.PolicyViolation) ||
		!strings.Contains(err.Error(), "1 of 2 records") {
		t.Errorf("Publish with a record the brokers refuse by policy: error = %v, want ErrUnavailable for 1 of 2 records, PolicyViolation", err)
	}
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], testTopic, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if last, err := conn.ReadLastOffset(); err != nil || last != 1 {
		t.Errorf("records written to %s: %d (%v), want the 1 not refused", testTopic, last, err)
	}
}

func TestPing(t *testing.T) {
	t.Parallel()
	if err := Ping(context.Background(), Security{}, startBroker(t, 1)); err != nil {
		t.Errorf("Ping of a running broker: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Ping(ctx, Security{}, nil); err == nil {
		t.Error("Ping without brokers succeeded")
	}
	closed := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
	if err := Ping(ctx, Security{}, []string{closed}); err == nil || !strings.Contains(err.Error(), "kafka metadata") {
		t.Errorf("Ping of a closed port: %v, want a kafka metadata error", err)
	}
}

// BenchmarkPublish measures acknowledged records per second against the
// in-process broker (8 partitions, acks=all).
func BenchmarkPublish(b *testing.B) {
	brokers := startBroker(b, 8)
	p := NewProducer(ProducerConfig{Brokers: brokers}, zaptest.NewLogger(b))
	b.Cleanup(func() { _ = p.Close() })
	ctx := context.Background()

	batch := make([]Record, 1000)
	for i := range batch {
		batch[i] = Record{Topic: testTopic, Key: "uid-" + strconv.Itoa(i), Value: make([]byte, 100)}
	}
	if err := p.Publish(ctx, batch...); err != nil { // warm up metadata and connections
		b.Fatal(err)
	}

	b.Run("batch1000", func(b *testing.B) {
		for b.Loop() {
			if err := p.Publish(ctx, batch...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("single", func(b *testing.B) {
		for b.Loop() {
			if err := p.Publish(ctx, batch[0]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("lone", func(b *testing.B) { // one record after 5 ms of quiet: light traffic
		for b.Loop() {
			b.StopTimer()
			time.Sleep(5 * time.Millisecond)
			b.StartTimer()
			if err := p.Publish(ctx, batch[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("single-parallel", func(b *testing.B) {
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := p.Publish(ctx, batch[0]); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
}
