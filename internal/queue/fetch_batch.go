package queue

import (
	"context"
	"errors"
	"fmt"
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
//
// A partition that comes back with nothing to read stays in the next
// request, for up to fetchCarry, instead of being answered: one record in
// one partition answers the whole request, and answering every partition
// of it woke every loop only for each to ask again, the same, at once.
// Under light traffic that was most of what a consumer did per record.
type fetchBatcher struct {
	topic string
	// roundTrip sends one request; single fetches one partition alone. The
	// tests wrap them.
	roundTrip func(ctx context.Context, req *fetchAPI.Request) (*fetchAPI.Response, error)
	single    func(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error)
	layouts   *layouts
	gather    *gatherer[*fetchCall]
	carry     time.Duration // fetchCarry; the tests change it

	requests atomic.Int64 // requests sent, gathered or single
}

// newFetchBatcher returns a batcher sending through client for topic.
func newFetchBatcher(topic string, client *kafka.Client) *fetchBatcher {
	b := &fetchBatcher{topic: topic, single: client.Fetch, layouts: newLayouts(kafkaLayout(client)), carry: fetchCarry,
		roundTrip: roundTripper[*fetchAPI.Request, *fetchAPI.Response](client, "fetch")}
	b.gather = newGatherer(fetchWindow, func(cl *fetchCall) bool { return cl.ctx.Err() == nil }, b.fetchTogether)
	return b
}

// fetchWindow is how long the first fetch of a request waits for others
// to join it: long enough for the loops woken by one answer to ask again on
// a busy machine (500µs gathered visibly fewer of them), and short against
// a delivery's latency. Only records that arrive while their partition's
// loop is between requests wait for it; a long poll in flight returns
// records as they come.
const fetchWindow = 2 * time.Millisecond

// fetchCarry is how long a fetch of a partition with nothing to read is
// kept in the following requests before its loop hears back: a few long
// polls, so that an idle partition's loop still wakes (to report its lag
// and that the broker answers) about once a second.
const fetchCarry = time.Second

type fetchCall struct {
	ctx    context.Context
	req    *kafka.FetchRequest
	leader int
	since  time.Time     // when the loop asked
	done   chan struct{} // closed once res and err are set
	res    *kafka.FetchResponse
	err    error
}

// fetch has the signature of kafka.Client.Fetch, which it replaces. A fetch
// whose partition's leader is not known (yet, or while another fetch looks
// the leaders up) goes alone, as do fetches from the first or last offset.
func (b *fetchBatcher) fetch(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
	leader, ok := -1, false
	if req.Offset >= 0 {
		if l, found := b.layouts.get(ctx, b.topic); found {
			leader, ok = l.leader[req.Partition]
		}
	}
	if !ok {
		b.requests.Add(1)
		return b.single(ctx, req)
	}
	cl := &fetchCall{ctx: ctx, req: req, leader: leader, since: time.Now(), done: make(chan struct{})}
	b.gather.add(leader, cl)
	select {
	case <-cl.done:
		return cl.res, cl.err
	case <-ctx.Done():
		return nil, ctx.Err()
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
			b.layouts.forget()
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
	var carry []*fetchCall
	for _, cl := range calls {
		p, ok := byID[cl.req.Partition]
		if !ok {
			cl.err = fmt.Errorf("kafka fetch: no answer for partition %d", cl.req.Partition)
			close(cl.done)
			continue
		}
		if b.carries(cl, res, p) {
			carry = append(carry, cl)
			continue
		}
		cl.res = b.response(res, p)
		close(cl.done)
	}
	if len(carry) == 0 {
		return
	}
	l, found := b.layouts.get(context.Background(), b.topic)
	for _, cl := range carry {
		if found && l.leader[cl.req.Partition] == cl.leader {
			b.gather.add(cl.leader, cl)
			continue
		}
		// The leader moved: the loop hears of its empty answer and asks
		// afresh.
		cl.res = b.response(res, byID[cl.req.Partition])
		close(cl.done)
	}
}

// response is one partition's answer, as kafka.Client.Fetch gives it.
func (b *fetchBatcher) response(res *fetchAPI.Response, p *fetchAPI.ResponsePartition) *kafka.FetchResponse {
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
		b.layouts.forget()
	}
	if out.Records == nil {
		out.Records = kafka.NewRecordReader()
	}
	return out
}

// carries reports whether cl's partition, answered p, goes on into the next
// request rather than back to its loop: nothing came and nothing is there
// to read from its offset, no error, and its loop has waited less than
// fetchCarry and still waits.
func (b *fetchBatcher) carries(cl *fetchCall, res *fetchAPI.Response, p *fetchAPI.ResponsePartition) bool {
	return p.RecordSet.Records == nil && p.ErrorCode == 0 && res.ErrorCode == 0 &&
		p.HighWatermark <= cl.req.Offset && cl.ctx.Err() == nil && time.Since(cl.since) < b.carry
}
