package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	fetchAPI "github.com/segmentio/kafka-go/protocol/fetch"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/testutil"
)

// testBatcher returns a batcher on brokers whose round trips are recorded
// (the partitions each request carried) and, while hold is open, held.
type recordedTrips struct {
	mu      sync.Mutex
	parts   [][]int32 // partitions of each request, in the order sent
	entered chan struct{}
}

func testBatcher(t *testing.T, brokers []string, hold <-chan struct{}) (*fetchBatcher, *recordedTrips) {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: &kafka.Transport{}}
	b := newFetchBatcher(testTopic, client)
	trips := &recordedTrips{entered: make(chan struct{}, 64)}
	send := b.roundTrip
	b.roundTrip = func(ctx context.Context, req *fetchAPI.Request) (*fetchAPI.Response, error) {
		var ps []int32
		for _, p := range req.Topics[0].Partitions {
			ps = append(ps, p.Partition)
		}
		trips.mu.Lock()
		trips.parts = append(trips.parts, ps)
		trips.mu.Unlock()
		trips.entered <- struct{}{}
		if hold != nil {
			<-hold
		}
		return send(ctx, req)
	}
	return b, trips
}

// waiting returns how many fetches wait in b's queues.
func waiting(b *fetchBatcher) int { return b.gather.waiting() }

// knowLayout looks the topic's layout up for b. Fetches that find no
// layout known go alone while one of them looks it up; a consumer's first
// round does so.
func knowLayout(t *testing.T, b *fetchBatcher) {
	t.Helper()
	if _, ok := b.layouts.get(context.Background(), testTopic); !ok {
		t.Fatal("the topic's layout could not be looked up")
	}
}

// fetchAnswer is what one fetch of fetchEach returned.
type fetchAnswer struct {
	partition int
	res       *kafka.FetchResponse
	err       error
}

// fetchEach fetches every partition from offset 0 at once through b, each
// in its own goroutine, and returns where their answers come.
func fetchEach(ctx context.Context, b *fetchBatcher, partitions int, maxWait time.Duration) <-chan fetchAnswer {
	answers := make(chan fetchAnswer, partitions)
	for p := range partitions {
		go func() {
			res, err := b.fetch(ctx, &kafka.FetchRequest{Topic: testTopic, Partition: p, Offset: 0,
				MinBytes: 1, MaxBytes: 1 << 20, MaxWait: maxWait})
			answers <- fetchAnswer{p, res, err}
		}()
	}
	return answers
}

// readAll reads res's records and returns their offsets.
func readAll(t *testing.T, res *kafka.FetchResponse) []int64 {
	t.Helper()
	var offs []int64
	for {
		r, err := res.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return offs
		}
		if err != nil {
			t.Fatalf("read record of partition %d: %v", res.Partition, err)
		}
		offs = append(offs, r.Offset)
	}
}

// Fetches made within the gathering window go as one request, and each
// caller gets its own partition's records.
func TestFetchBatcherGathersFetchesOfAMoment(t *testing.T) {
	t.Parallel()
	const partitions = 4
	brokers := startBroker(t, partitions)
	recs := sequenced(16, 3)
	publish(t, newTestProducer(t, brokers), recs)
	b, trips := testBatcher(t, brokers, nil)
	b.gather.window = 300 * time.Millisecond // wide, so that a loaded machine starts the four fetches within it
	knowLayout(t, b)
	answers := fetchEach(context.Background(), b, partitions, 5*time.Second)
	total := 0
	for range partitions {
		var a fetchAnswer
		select {
		case a = <-answers:
		case <-time.After(10 * time.Second):
			t.Fatal("a fetch did not return")
		}
		if a.err != nil || a.res.Error != nil {
			t.Fatalf("fetch of partition %d: %v, %v", a.partition, a.err, a.res.Error)
		}
		if a.res.Partition != a.partition {
			t.Errorf("fetch of partition %d answered for partition %d", a.partition, a.res.Partition)
		}
		offs := readAll(t, a.res)
		for i, o := range offs {
			if o != int64(i) {
				t.Errorf("partition %d: offsets %v, want 0, 1, 2, …", a.partition, offs)
				break
			}
		}
		if int64(len(offs)) != a.res.HighWatermark {
			t.Errorf("partition %d: %d records, high watermark %d", a.partition, len(offs), a.res.HighWatermark)
		}
		total += len(offs)
	}
	if total != len(recs) {
		t.Errorf("%d records fetched over %d partitions, want %d", total, partitions, len(recs))
	}
	trips.mu.Lock()
	defer trips.mu.Unlock()
	if len(trips.parts) != 1 || len(trips.parts[0]) != partitions {
		t.Errorf("requests carried partitions %v, want one request for all %d", trips.parts, partitions)
	}
	if n := b.requests.Load(); n != 1 {
		t.Errorf("%d requests counted, want 1", n)
	}
}

// A fetch does not wait behind another partition's long poll: with
// partition 1's fetch held by the broker (nothing to read), partition 0's
// records come back at once.
func TestFetchBatcherNeverWaitsBehindALongPoll(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 2)
	key := ""
	for i := 0; key == ""; i++ {
		k := "uid-" + strconv.Itoa(i)
		if (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(k)}, 0, 1) == 0 {
			key = k
		}
	}
	publish(t, newTestProducer(t, brokers), []Record{{Topic: testTopic, Key: key, Value: []byte(key + "/0")}})
	b, trips := testBatcher(t, brokers, nil)
	polling := make(chan error, 1)
	go func() {
		_, err := b.fetch(t.Context(), &kafka.FetchRequest{Topic: testTopic, Partition: 1, Offset: 0,
			MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 20 * time.Second})
		polling <- err
	}()
	await(t, trips.entered, 10*time.Second, "partition 1's long poll")

	start := time.Now()
	res, err := b.fetch(context.Background(), &kafka.FetchRequest{Topic: testTopic, Partition: 0, Offset: 0,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 20 * time.Second})
	if err != nil || res.Error != nil {
		t.Fatalf("fetch of partition 0: %v, %v", err, res.Error)
	}
	if offs := readAll(t, res); len(offs) != 1 {
		t.Errorf("partition 0 answered %d records, want 1", len(offs))
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("partition 0's fetch took %v: it waited behind partition 1's long poll", took)
	}
	select {
	case err := <-polling:
		t.Errorf("partition 1's long poll ended early (%v): it should still be held", err)
	default:
	}
}

// A request whose callers have all gone (their generation ended) is
// cancelled at once rather than held for the broker's long poll.
func TestFetchBatcherCancelsARequestNobodyWaitsFor(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	b, trips := testBatcher(t, brokers, nil)
	ended := make(chan error, 1)
	send := b.roundTrip
	b.roundTrip = func(ctx context.Context, req *fetchAPI.Request) (*fetchAPI.Response, error) {
		res, err := send(ctx, req)
		ended <- err
		return res, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() {
		_, err := b.fetch(ctx, &kafka.FetchRequest{Topic: testTopic, Partition: 0, Offset: 0,
			MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 20 * time.Second}) // the empty partition is long-polled
		returned <- err
	}()
	await(t, trips.entered, 10*time.Second, "the request")
	cancel()
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled fetch returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled fetch did not return")
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Errorf("the request ended without an error, want it cancelled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request nobody waits for was still in flight 10 s later (the broker holds it 20 s)")
	}
}

// On a cluster whose partitions have different leaders, each request goes
// to one leader: a consumer delivers everything, in order, with no failed
// fetch.
func TestFetchBatcherSendsEachLeaderItsOwn(t *testing.T) {
	t.Parallel()
	const partitions = 6
	brokers := kfakeCluster(t, 3, partitions).ListenAddrs()

	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: &kafka.Transport{}}
	layout, err := kafkaLayout(client)(context.Background(), testTopic)
	leaders := layout.leader
	if err != nil {
		t.Fatal(err)
	}
	distinct := map[int]bool{}
	for _, l := range leaders {
		distinct[l] = true
	}
	if len(leaders) != partitions || len(distinct) < 2 {
		t.Fatalf("leaders %v: the test needs %d partitions led by more than one broker", leaders, partitions)
	}

	// A group's first fetch of a partition, from its first offset, goes
	// alone; the records published once every partition has been read
	// once come through gathered requests.
	const keys, perKey = 24, 4
	recs := sequenced(keys, perKey)
	p := newTestProducer(t, brokers)
	publish(t, p, recs[:keys])
	seen := newSeqRecorder()
	cons := runRecording(t, ConsumerConfig{Brokers: brokers}, seen)
	seen.waitCount(t, keys, 20*time.Second)
	before := cons.Stats().FetchRequests
	publish(t, p, recs[keys:])
	seen.waitCount(t, keys*perKey, 20*time.Second)
	seen.checkExactlyInOrder(t, keys, perKey)
	// A fetch sent before the second batch (a long poll) may have carried
	// it; the fetches sent after it are counted once they go out.
	testutil.WaitFor(t, 10*time.Second, func() error {
		if n := cons.Stats().FetchRequests; n <= before {
			return fmt.Errorf("fetch requests %d after the second batch, %d before: the records did not come through the batcher", n, before)
		}
		return nil
	})
	if s := cons.Stats(); s.FetchErrors != 0 {
		t.Errorf("%d failed fetches, want none (a request mixing leaders is refused)", s.FetchErrors)
	}
}

// TestIdlePartitionsLookTheirOffsetUpOnce: a partition with no committed
// offset and no records is read from its first offset, which the client
// looks up with a ListOffsets request; from then on its long polls go from
// the offset where its log starts, with no look-up before each. A record
// published after a long idle spell still comes through.
func TestIdlePartitionsLookTheirOffsetUpOnce(t *testing.T) {
	t.Parallel()
	const partitions = 6
	c := kfakeCluster(t, 1, partitions)
	var lookups atomic.Int64
	c.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		lookups.Add(1)
		return nil, nil, false // the broker answers it as usual
	})
	brokers := c.ListenAddrs()

	seen := newSeqRecorder()
	cons := runRecording(t, ConsumerConfig{Brokers: brokers, MaxWait: 50 * time.Millisecond}, seen)

	// Every partition has been polled once its fetch count passes the
	// partitions' first look-ups.
	testutil.WaitFor(t, 20*time.Second, func() error {
		if n := cons.Stats().FetchRequests; n < 2*partitions {
			return fmt.Errorf("%d fetch requests, want at least %d", n, 2*partitions)
		}
		return nil
	})
	before, fetchesBefore := lookups.Load(), cons.Stats().FetchRequests
	// Twenty long polls' worth of idling: polled from the first offset
	// each time, every partition would look it up twenty times.
	testutil.WaitFor(t, 20*time.Second, func() error {
		if n := cons.Stats().FetchRequests - fetchesBefore; n < 20 {
			return fmt.Errorf("%d fetch requests while idle, want 20", n)
		}
		return nil
	})
	if n := lookups.Load() - before; n != 0 {
		t.Errorf("%d offset look-ups over 20 idle fetch requests of %d partitions, want none", n, partitions)
	}

	p := newTestProducer(t, brokers)
	recs := sequenced(12, 2)
	publish(t, p, recs)
	seen.waitCount(t, len(recs), 20*time.Second)
	seen.checkExactlyInOrder(t, 12, 2)
}

// kfakeCluster runs an in-process broker cluster of brokers brokers with
// testTopic of partitions partitions, on loopback ports.
func kfakeCluster(t *testing.T, brokers, partitions int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(int32(partitions), testTopic),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// runRecording runs a consumer of testTopic in group g, with cfg's brokers
// and MaxWait, recording each message's key and seq in seen, until the test
// ends.
func runRecording(t *testing.T, cfg ConsumerConfig, seen *seqRecorder) *Consumer {
	t.Helper()
	cfg.GroupID, cfg.Topic = "g", testTopic
	cfg.RetryBackoffMin, cfg.RetryBackoffMax = time.Millisecond, 10*time.Millisecond
	cons := NewConsumer(cfg, func(_ context.Context, m Message) error { seen.add(m.Key, parseSeq(t, m)); return nil },
		zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = runChecked(t, ctx, cons) }()
	t.Cleanup(func() { cancel(); await(t, done, 30*time.Second, "Run to return") })
	return cons
}

// A partition with nothing to read is not answered when another partition
// of its request gets a record: it stays in the following requests, long
// poll after long poll, and only the partition that got the record hears
// back. Its loop still hears back once it has waited the batcher's carry
// time, with an empty answer and no error.
func TestFetchBatcherCarriesEmptyPartitions(t *testing.T) {
	t.Parallel()
	const partitions = 4
	brokers := startBroker(t, partitions)
	b, trips := testBatcher(t, brokers, nil)
	b.carry = time.Hour
	knowLayout(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := fetchEach(ctx, b, partitions, 50*time.Millisecond)
	sent := func() int {
		trips.mu.Lock()
		defer trips.mu.Unlock()
		return len(trips.parts)
	}
	// Six requests: the broker has answered every partition empty at least
	// four times (the first ones may go before all four fetches joined).
	testutil.WaitFor(t, 20*time.Second, func() error {
		select {
		case a := <-answers:
			t.Fatalf("partition %d answered after %d requests, with nothing to read: %v, %v", a.partition, sent(), a.res, a.err)
		default:
		}
		if n := sent(); n < 6 {
			return fmt.Errorf("%d requests sent", n)
		}
		return nil
	})
	trips.mu.Lock()
	if last := trips.parts[len(trips.parts)-1]; len(last) != partitions {
		t.Errorf("the last request carried partitions %v, want all %d", last, partitions)
	}
	trips.mu.Unlock()

	publish(t, newTestProducer(t, brokers), sequenced(1, 1))
	var got fetchAnswer
	select {
	case got = <-answers:
	case <-time.After(10 * time.Second):
		t.Fatal("no fetch returned the record")
	}
	if got.err != nil || got.res.Error != nil || len(readAll(t, got.res)) != 1 {
		t.Fatalf("partition %d: %v, %v; want its one record", got.partition, got.err, got.res)
	}
	// The others are carried on: more requests go, and none comes back.
	after := sent()
	testutil.WaitFor(t, 20*time.Second, func() error {
		select {
		case a := <-answers:
			t.Fatalf("partition %d, empty, answered after the record came to partition %d", a.partition, got.partition)
		default:
		}
		if n := sent(); n < after+3 {
			return fmt.Errorf("%d requests sent since the record", n-after)
		}
		return nil
	})
	cancel()
	for range partitions - 1 {
		select {
		case a := <-answers:
			if !errors.Is(a.err, context.Canceled) {
				t.Errorf("partition %d after its caller went: %v, want context.Canceled", a.partition, a.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a carried fetch did not return once its caller went")
		}
	}

	// With a short carry time, an idle partition's loop hears back.
	b2, trips2 := testBatcher(t, brokers, nil)
	b2.carry = 300 * time.Millisecond
	knowLayout(t, b2)
	idle := (got.partition + 1) % partitions
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	start := time.Now()
	res, err := b2.fetch(ctx2, &kafka.FetchRequest{Topic: testTopic, Partition: idle, Offset: 0,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 50 * time.Millisecond})
	waited := time.Since(start)
	if err != nil || res.Error != nil || len(readAll(t, res)) != 0 {
		t.Fatalf("idle partition %d: %v, %v; want an empty answer", idle, err, res)
	}
	trips2.mu.Lock()
	n := len(trips2.parts)
	trips2.mu.Unlock()
	if waited < b2.carry || n < 2 {
		t.Fatalf("idle partition %d answered after %s and %d requests, want a carry of at least %s over several", idle, waited, n, b2.carry)
	}
}
