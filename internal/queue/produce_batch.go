package queue

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
)

// produceBatcher sends the records of Publish calls made within a moment of
// each other as one Produce request per partition leader. kafka-go's Writer
// batches per partition: with many partitions and one record per push, each
// of its batches holds about one record, so every push cost a request of
// its own in the producer and in the broker. A call whose records all go to
// one leader (and one topic) joins the leader's next request; the first call of a request
// waits out the window, as long as the Writer's own batch timeout. A call
// that cannot go this way (records for several leaders, a topic not known
// yet) or whose request fails is written by the Writer instead, which
// retries and reports errors as before: the batcher only ever saves
// requests, never decides a failure.
type produceBatcher struct {
	window  time.Duration
	timeout time.Duration // the brokers' wait for acks=all, per request
	// roundTrip sends one request; metadata looks topics' partitions and
	// their leaders up. The tests wrap them.
	roundTrip func(ctx context.Context, req *produceAPI.Request) (*produceAPI.Response, error)
	metadata  func(ctx context.Context, topic string) (topicLayout, error)

	requests, records atomic.Int64 // requests sent, records they carried

	mu      sync.Mutex
	layouts map[string]topicLayout
	looking map[string]bool      // a look-up of the topic's layout runs
	failed  map[string]time.Time // when the last look-up failed
	queues  map[int]*produceQueue
}

// topicLayout is a topic's partitions, sorted as kafka-go's balancer takes
// them, and each one's leader.
type topicLayout struct {
	partitions []int
	leader     map[int]int
	at         time.Time
}

// layoutTTL is how long a topic's layout is used before it is looked up
// again (kafka-go's transport refreshes its own metadata as often), so that
// partitions added to a topic are used by the batcher as by the Writer.
const layoutTTL = 6 * time.Second

type produceQueue struct {
	mu      sync.Mutex
	waiting []*produceCall
	timer   bool
}

type produceCall struct {
	ctx        context.Context
	msgs       []kafka.Message
	partitions []int
	done       chan struct{}
	err        error
}

func newProduceBatcher(client *kafka.Client, window, timeout time.Duration) *produceBatcher {
	b := &produceBatcher{window: window, timeout: timeout, layouts: make(map[string]topicLayout),
		looking: make(map[string]bool), failed: make(map[string]time.Time), queues: make(map[int]*produceQueue)}
	b.roundTrip = func(ctx context.Context, req *produceAPI.Request) (*produceAPI.Response, error) {
		// The transport routes the request to its partitions' leader.
		m, err := client.Transport.RoundTrip(ctx, client.Addr, req)
		if err != nil {
			return nil, err
		}
		res, ok := m.(*produceAPI.Response)
		if !ok {
			return nil, fmt.Errorf("produce answered with %T", m)
		}
		return res, nil
	}
	b.metadata = func(ctx context.Context, topic string) (topicLayout, error) {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		if err != nil {
			return topicLayout{}, err
		}
		for _, t := range md.Topics {
			if t.Name != topic {
				continue
			}
			if t.Error != nil {
				return topicLayout{}, t.Error
			}
			l := topicLayout{leader: make(map[int]int, len(t.Partitions)), at: time.Now()}
			for _, p := range t.Partitions {
				l.partitions = append(l.partitions, p.ID)
				l.leader[p.ID] = p.Leader.ID
			}
			sort.Ints(l.partitions)
			if len(l.partitions) == 0 {
				return topicLayout{}, fmt.Errorf("topic %s has no partitions", topic)
			}
			return l, nil
		}
		return topicLayout{}, fmt.Errorf("topic %s not in the cluster's metadata", topic)
	}
	return b
}

// write writes msgs in one of the leaders' next requests and reports
// whether it did; false means the caller must write them another way (the
// records may have been written anyway when the request failed).
func (b *produceBatcher) write(ctx context.Context, msgs []kafka.Message) bool {
	for _, m := range msgs[1:] {
		if m.Topic != msgs[0].Topic {
			return false // the Writer reports which topics' records failed
		}
	}
	leader, partitions, ok := b.route(ctx, msgs)
	if !ok {
		return false
	}
	cl := &produceCall{ctx: ctx, msgs: msgs, partitions: partitions, done: make(chan struct{})}
	q := b.queue(leader)
	q.mu.Lock()
	q.waiting = append(q.waiting, cl)
	if !q.timer {
		q.timer = true
		time.AfterFunc(b.window, func() { b.send(q) })
	}
	q.mu.Unlock()
	select {
	case <-cl.done:
		return cl.err == nil
	case <-ctx.Done():
		return false
	}
}

// route picks each message's partition as the Writer's murmur2 balancer
// does, and returns their one leader; ok is false when they have several,
// or a topic's layout is not known.
func (b *produceBatcher) route(ctx context.Context, msgs []kafka.Message) (leader int, partitions []int, ok bool) {
	partitions = make([]int, len(msgs))
	var balancer kafka.Murmur2Balancer
	for i, m := range msgs {
		l, found := b.layout(ctx, m.Topic)
		if !found {
			return 0, nil, false
		}
		p := balancer.Balance(m, l.partitions...)
		if i > 0 && l.leader[p] != leader {
			return 0, nil, false
		}
		leader, partitions[i] = l.leader[p], p
	}
	return leader, partitions, true
}

// layout returns topic's layout, looking it up when it is missing or older
// than layoutTTL. One caller looks up at a time; the others use the old
// layout meanwhile, or go without (to the Writer) when there is none, so
// that a cluster that does not answer holds no Publish behind another.
func (b *produceBatcher) layout(ctx context.Context, topic string) (topicLayout, bool) {
	b.mu.Lock()
	l, found := b.layouts[topic]
	if (found && time.Since(l.at) <= layoutTTL) || b.looking[topic] ||
		time.Since(b.failed[topic]) < time.Second {
		b.mu.Unlock()
		return l, found
	}
	b.looking[topic] = true
	b.mu.Unlock()

	fresh, err := b.metadata(ctx, topic)
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.looking, topic)
	if err != nil {
		b.failed[topic] = time.Now()
		delete(b.layouts, topic)
		return topicLayout{}, false
	}
	b.layouts[topic] = fresh
	return fresh, true
}

func (b *produceBatcher) queue(leader int) *produceQueue {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[leader]
	if q == nil {
		q = &produceQueue{}
		b.queues[leader] = q
	}
	return q
}

// forget makes the next calls look every topic's layout up again.
func (b *produceBatcher) forget() {
	b.mu.Lock()
	clear(b.layouts)
	b.mu.Unlock()
}

// send writes the calls gathered in q as one request.
func (b *produceBatcher) send(q *produceQueue) {
	q.mu.Lock()
	calls := q.waiting[:0:0]
	for _, cl := range q.waiting {
		if cl.ctx.Err() == nil {
			calls = append(calls, cl)
		}
	}
	q.waiting = nil
	q.timer = false
	q.mu.Unlock()
	if len(calls) == 0 {
		return
	}
	err := b.produce(calls)
	for _, cl := range calls {
		if cl.err == nil {
			cl.err = err
		}
		close(cl.done)
	}
}

type topicPartition struct {
	topic     string
	partition int
}

// produce sends calls' records as one request, in call order within each
// partition, and sets the error of every call whose partitions the brokers
// refused.
func (b *produceBatcher) produce(calls []*produceCall) error {
	records := make(map[topicPartition][]protocol.Record)
	var order []topicPartition
	for _, cl := range calls {
		for i, m := range cl.msgs {
			tp := topicPartition{m.Topic, cl.partitions[i]}
			if _, ok := records[tp]; !ok {
				order = append(order, tp)
			}
			r := protocol.Record{Time: m.Time, Value: protocol.NewBytes(m.Value), Headers: m.Headers}
			if m.Key != nil {
				r.Key = protocol.NewBytes(m.Key)
			}
			records[tp] = append(records[tp], r)
		}
	}
	req := &produceAPI.Request{Acks: int16(kafka.RequireAll), Timeout: int32(b.timeout / time.Millisecond)}
	byTopic := make(map[string]int)
	for _, tp := range order {
		i, ok := byTopic[tp.topic]
		if !ok {
			i = len(req.Topics)
			byTopic[tp.topic] = i
			req.Topics = append(req.Topics, produceAPI.RequestTopic{Topic: tp.topic})
		}
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, produceAPI.RequestPartition{
			Partition: int32(tp.partition),
			RecordSet: protocol.RecordSet{Version: 2, Records: protocol.NewRecordReader(records[tp]...)},
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), b.timeout+time.Second)
	defer cancel()
	b.requests.Add(1)
	for _, rs := range records {
		b.records.Add(int64(len(rs)))
	}
	res, err := b.roundTrip(ctx, req)
	if err != nil {
		var routing *produceAPI.Error // the partitions' leaders moved
		if errors.As(err, &routing) {
			b.forget()
		}
		return err
	}
	refused := make(map[topicPartition]error)
	for _, t := range res.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				refused[topicPartition{t.Topic, int(p.Partition)}] = kafka.Error(p.ErrorCode)
			}
		}
	}
	answered := make(map[topicPartition]bool)
	for _, t := range res.Topics {
		for _, p := range t.Partitions {
			answered[topicPartition{t.Topic, int(p.Partition)}] = true
		}
	}
	if len(refused) > 0 {
		b.forget()
	}
	for _, cl := range calls {
		for i, m := range cl.msgs {
			tp := topicPartition{m.Topic, cl.partitions[i]}
			if err := refused[tp]; err != nil {
				cl.err = err
				break
			}
			if !answered[tp] {
				cl.err = fmt.Errorf("no answer for %s/%d", tp.topic, tp.partition)
				break
			}
		}
	}
	return nil
}
