package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	fetchAPI "github.com/segmentio/kafka-go/protocol/fetch"
)

// fetchBatcher sends the fetches that a consumer's partition loops make
// within a moment of each other as one Fetch request per partition leader.
// Each loop still asks for its own partition and gets its own answer, so
// pausing, offsets and errors stay per partition; but at saturation a loop
// finds its partition's few new records after each round trip, and one
// request per partition per round trip costs the consumer and the broker a
// request's encoding, a 64 KiB page and two system calls each, per handful
// of records. The loops whose partitions came back in one answer ask again
// within microseconds of each other, so a short gathering window (the
// first fetch waits it out, the others join) keeps them in one request
// from then on, long polls included.
//
// Requests do not wait for each other: a fetch never waits behind another
// partition's long poll, only for the window. Fetches from the first or
// last offset, which need a look-up of the offset first, go alone.
type fetchBatcher struct {
	topic  string
	window time.Duration
	// roundTrip sends one request; leaders looks up each partition's
	// leader (broker id); single fetches one partition alone. The tests
	// wrap them.
	roundTrip func(ctx context.Context, req *fetchAPI.Request) (*fetchAPI.Response, error)
	leaders   func(ctx context.Context) (map[int]int, error)
	single    func(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error)

	requests atomic.Int64 // requests sent, gathered or single

	mu       sync.Mutex
	leaderOf map[int]int // nil until looked up, and after a leader moved
	queues   map[int]*fetchQueue
}

// newFetchBatcher returns a batcher sending through client for topic.
func newFetchBatcher(topic string, client *kafka.Client) *fetchBatcher {
	b := &fetchBatcher{topic: topic, window: fetchWindow, queues: make(map[int]*fetchQueue)}
	b.roundTrip = func(ctx context.Context, req *fetchAPI.Request) (*fetchAPI.Response, error) {
		// The transport routes the request to its partitions' leader.
		m, err := client.Transport.RoundTrip(ctx, client.Addr, req)
		if err != nil {
			return nil, err
		}
		res, ok := m.(*fetchAPI.Response)
		if !ok {
			return nil, fmt.Errorf("fetch answered with %T", m)
		}
		return res, nil
	}
	b.leaders = func(ctx context.Context) (map[int]int, error) {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		if err != nil {
			return nil, err
		}
		out := make(map[int]int)
		for _, t := range md.Topics {
			if t.Name != topic {
				continue
			}
			if t.Error != nil {
				return nil, t.Error
			}
			for _, p := range t.Partitions {
				out[p.ID] = p.Leader.ID
			}
		}
		return out, nil
	}
	b.single = client.Fetch
	return b
}

// fetchWindow is how long the first fetch of a request waits for others
// to join it: long enough for the loops woken by one answer to ask again on
// a busy machine (500µs gathered visibly fewer of them), and short against
// a delivery's latency. Only records that arrive while their partition's
// loop is between requests wait for it; a long poll in flight returns
// records as they come.
const fetchWindow = 2 * time.Millisecond

// fetchQueue holds the fetches gathering for the next request to one
// leader.
type fetchQueue struct {
	mu      sync.Mutex
	waiting []*fetchCall
	timer   bool // a request goes when the window closes
}

type fetchCall struct {
	ctx  context.Context
	req  *kafka.FetchRequest
	done chan struct{} // closed once res and err are set
	res  *kafka.FetchResponse
	err  error
}

// fetch has the signature of kafka.Client.Fetch, which it replaces.
func (b *fetchBatcher) fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
	if req.Offset < 0 {
		b.requests.Add(1)
		return b.single(ctx, req)
	}
	q, err := b.queueFor(ctx, req.Partition)
	if err != nil {
		return nil, err
	}
	cl := &fetchCall{ctx: ctx, req: req, done: make(chan struct{})}
	q.mu.Lock()
	q.waiting = append(q.waiting, cl)
	if !q.timer {
		q.timer = true
		time.AfterFunc(b.window, func() { b.send(q) })
	}
	q.mu.Unlock()
	select {
	case <-cl.done:
		return cl.res, cl.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// queueFor returns the queue of partition's leader, looking the leaders up
// when they are not known.
func (b *fetchBatcher) queueFor(ctx context.Context, partition int) (*fetchQueue, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	leader, ok := b.leaderOf[partition]
	if !ok {
		leaders, err := b.leaders(ctx)
		if err != nil {
			return nil, fmt.Errorf("look up partition leaders: %w", err)
		}
		b.leaderOf = leaders
		if leader, ok = leaders[partition]; !ok {
			return nil, fmt.Errorf("no leader known for partition %d of %s", partition, b.topic)
		}
	}
	q := b.queues[leader]
	if q == nil {
		q = &fetchQueue{}
		b.queues[leader] = q
	}
	return q, nil
}

// forgetLeaders makes the next fetch look the leaders up again.
func (b *fetchBatcher) forgetLeaders() {
	b.mu.Lock()
	b.leaderOf = nil
	b.mu.Unlock()
}

// send sends the fetches gathered in q as one request, when the window
// closes.
func (b *fetchBatcher) send(q *fetchQueue) {
	q.mu.Lock()
	calls := q.waiting[:0:0]
	for _, cl := range q.waiting {
		if cl.ctx.Err() == nil { // a caller gone has returned already
			calls = append(calls, cl)
		}
	}
	q.waiting = nil
	q.timer = false
	q.mu.Unlock()
	if len(calls) > 0 {
		b.fetchTogether(calls)
	}
}

// fetchTogether sends calls as one request and hands each its partition's
// answer. The request is cancelled once every caller has gone.
func (b *fetchBatcher) fetchTogether(calls []*fetchCall) {
	req := &fetchAPI.Request{
		ReplicaID: -1, SessionID: -1, SessionEpoch: -1,
		MinBytes:    int32(calls[0].req.MinBytes),
		MaxWaitTime: int32(calls[0].req.MaxWait / time.Millisecond),
		Topics:      []fetchAPI.RequestTopic{{Topic: b.topic}},
	}
	var maxBytes int64
	parts := make([]fetchAPI.RequestPartition, 0, len(calls))
	for _, cl := range calls {
		r := cl.req
		req.MinBytes = min(req.MinBytes, int32(r.MinBytes))
		req.MaxWaitTime = min(req.MaxWaitTime, int32(r.MaxWait/time.Millisecond))
		maxBytes += r.MaxBytes
		parts = append(parts, fetchAPI.RequestPartition{Partition: int32(r.Partition), CurrentLeaderEpoch: -1,
			FetchOffset: r.Offset, LogStartOffset: -1, PartitionMaxBytes: int32(r.MaxBytes)})
	}
	req.MaxBytes = int32(min(maxBytes, 1<<30))
	req.Topics[0].Partitions = parts

	ctx, cancel := context.WithCancel(context.Background())
	left := int64(len(calls))
	stops := make([]func() bool, len(calls))
	for i, cl := range calls {
		stops[i] = context.AfterFunc(cl.ctx, func() {
			if atomic.AddInt64(&left, -1) == 0 {
				cancel()
			}
		})
	}
	b.requests.Add(1)
	res, err := b.roundTrip(ctx, req)
	for _, stop := range stops {
		stop()
	}
	cancel()
	b.answer(calls, res, err)
}

// answer hands each call its partition of res, or err.
func (b *fetchBatcher) answer(calls []*fetchCall, res *fetchAPI.Response, err error) {
	if err == nil && len(res.Topics) != 1 {
		err = fmt.Errorf("fetch answered for %d topics, want 1", len(res.Topics))
	}
	if err != nil {
		var routing *fetchAPI.Error // partitions of more than one leader, or none known
		if errors.As(err, &routing) {
			b.forgetLeaders()
		}
		for _, cl := range calls {
			cl.err = fmt.Errorf("kafka fetch: %w", err)
			close(cl.done)
		}
		return
	}
	byID := make(map[int]*fetchAPI.ResponsePartition, len(res.Topics[0].Partitions))
	for i := range res.Topics[0].Partitions {
		p := &res.Topics[0].Partitions[i]
		byID[int(p.Partition)] = p
	}
	for _, cl := range calls {
		p, ok := byID[cl.req.Partition]
		if !ok {
			cl.err = fmt.Errorf("kafka fetch: no answer for partition %d", cl.req.Partition)
			close(cl.done)
			continue
		}
		out := &kafka.FetchResponse{
			Throttle: time.Duration(res.ThrottleTimeMs) * time.Millisecond,
			Topic:    b.topic, Partition: int(p.Partition),
			HighWatermark: p.HighWatermark, LastStableOffset: p.LastStableOffset, LogStartOffset: p.LogStartOffset,
			Records: p.RecordSet.Records,
		}
		switch {
		case p.ErrorCode != 0:
			out.Error = kafka.Error(p.ErrorCode)
		case res.ErrorCode != 0:
			out.Error = kafka.Error(res.ErrorCode)
		}
		if errors.Is(out.Error, kafka.NotLeaderForPartition) || errors.Is(out.Error, kafka.UnknownTopicOrPartition) {
			b.forgetLeaders()
		}
		if out.Records == nil {
			out.Records = kafka.NewRecordReader()
		}
		cl.res = out
		close(cl.done)
	}
}
