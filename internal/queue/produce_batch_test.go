package queue

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap/zaptest"
)

// stored reads every record of topic on brokers, partition by partition,
// and returns the values by partition in offset order.
func stored(t *testing.T, brokers []string, topic string) map[int][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	out := make(map[int][]string)
	for _, p := range md.Topics[0].Partitions {
		for off := int64(0); ; {
			res, err := client.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: p.ID, Offset: off, MinBytes: 1,
				MaxBytes: 1 << 20, MaxWait: 10 * time.Millisecond})
			if err != nil || res.Error != nil {
				t.Fatalf("fetch %s/%d: %v %v", topic, p.ID, err, res.Error)
			}
			n := 0
			for {
				r, err := res.Records.ReadRecord()
				if err != nil {
					break
				}
				v, _ := kafka.ReadAll(r.Value)
				out[p.ID] = append(out[p.ID], string(v))
				off, n = r.Offset+1, n+1
			}
			if n == 0 || off >= res.HighWatermark {
				break
			}
		}
	}
	return out
}

// publishAll publishes recs one call each, all at once, and fails on any
// error.
func publishAll(t *testing.T, p *Producer, recs []Record) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(recs))
	for _, r := range recs {
		wg.Go(func() { errs <- p.Publish(context.Background(), r) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
}

// Publish calls made within a window of the last request go as one
// request, each record stored once.
func TestPublishGathersCallsOfAMoment(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 4)
	p := newTestProducer(t, brokers)
	p.batcher.gather.window = time.Second // wide, so that a loaded machine makes the calls within it
	recs := sequenced(20, 1)
	publish(t, p, recs[:1]) // looks the topic's layout up
	p.batcher.requests.Store(0)
	publishAll(t, p, recs[1:])
	if n := p.batcher.requests.Load(); n != 1 {
		t.Errorf("%d concurrent calls sent %d requests, want 1", len(recs)-1, n)
	}
	if n := p.small.Stats().Messages; n != 0 {
		t.Errorf("%d records went through the writer, want none", n)
	}
	got := 0
	for _, vals := range stored(t, brokers, testTopic) {
		got += len(vals)
	}
	if got != len(recs) {
		t.Errorf("%d records stored, want %d", got, len(recs))
	}
}

// A lone Publish goes at once, although the window is an hour: nothing has
// been sent to the leader within the last window, so there is nothing to
// gather. (A second call within the hour would wait for it.)
func TestPublishLoneCallDoesNotWaitForTheWindow(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	p := NewProducer(ProducerConfig{Brokers: brokers, BatchTimeout: time.Hour}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, Record{Topic: testTopic, Key: "k", Value: []byte("k/0")}); err != nil {
		t.Fatalf("a lone Publish under an hour's window: %v", err)
	}
	if n := p.batcher.requests.Load(); n != 1 {
		t.Errorf("%d gathered requests, want 1", n)
	}
	if got := stored(t, brokers, testTopic)[0]; fmt.Sprint(got) != "[k/0]" {
		t.Errorf("stored %v, want [k/0]", got)
	}
}

// A gathered request that fails hands its calls to the writer: Publish
// succeeds once the writer wrote them, and each record is stored once.
func TestPublishFallsBackToTheWriter(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 1)
	p := newTestProducer(t, brokers)
	send := p.batcher.roundTrip
	var failed sync.Once
	p.batcher.roundTrip = func(ctx context.Context, req *produceAPI.Request) (*produceAPI.Response, error) {
		var err error
		failed.Do(func() { err = errors.New("injected failure before sending") })
		if err != nil {
			return nil, err
		}
		return send(ctx, req)
	}
	publish(t, p, []Record{{Topic: testTopic, Key: "k", Value: []byte("k/0")}})
	publish(t, p, []Record{{Topic: testTopic, Key: "k", Value: []byte("k/1")}})
	if n := p.small.Stats().Messages; n != 1 {
		t.Errorf("%d records went through the writer, want the 1 whose request failed", n)
	}
	if got := stored(t, brokers, testTopic)[0]; fmt.Sprint(got) != "[k/0 k/1]" {
		t.Errorf("stored %v, want [k/0 k/1]", got)
	}
}

// On a cluster whose partitions have different leaders, each request goes
// to one leader: every record is gathered, none falls back to the writer.
func TestPublishSendsEachLeaderItsOwn(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(6, testTopic),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, "127.0.0.1:0") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// kfake picks each partition's leader at random: spread them, so that
	// no run finds all six on one broker.
	for part := range int32(6) {
		if err := c.MoveTopicPartition(testTopic, part, part%3); err != nil {
			t.Fatal(err)
		}
	}
	brokers := c.ListenAddrs()
	p := NewProducer(ProducerConfig{Brokers: brokers}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = p.Close() })
	p.batcher.gather.window = 100 * time.Millisecond
	recs := sequenced(30, 1)
	publish(t, p, recs[:1])
	l, _ := p.batcher.layouts.get(context.Background(), testTopic)
	leaders := map[int]bool{}
	for _, id := range l.leader {
		leaders[id] = true
	}
	if len(leaders) < 2 {
		t.Fatalf("layout %v: the test needs partitions led by more than one broker", l)
	}
	publishAll(t, p, recs[1:])
	if n := p.small.Stats().Messages; n != 0 {
		t.Errorf("%d records went through the writer, want none (a request mixing leaders is refused)", n)
	}
	if n := p.batcher.records.Load(); n != int64(len(recs)) {
		t.Errorf("%d records gathered, want %d", n, len(recs))
	}
	got := 0
	for _, vals := range stored(t, brokers, testTopic) {
		got += len(vals)
	}
	if got != len(recs) {
		t.Errorf("%d records stored, want %d", got, len(recs))
	}
}
