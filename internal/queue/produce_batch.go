package queue

import (
	"context"
	"errors"
	"fmt"
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
// one leader (and one topic) joins the leader's next request; the first
// call of a request waits out the window, as long as the Writer's own batch
// timeout, unless traffic to the leader is light (see gatherer): then it
// goes at once, since a push has no others to wait for. A call that cannot go
// this way (records for several leaders, a topic not known yet) or whose
// request fails is written by the Writer instead, which retries and reports
// errors as before: the batcher only ever saves requests, never decides a
// failure.
type produceBatcher struct {
	timeout time.Duration // the brokers' wait for acks=all, per request
	// roundTrip sends one request. The tests wrap it.
	roundTrip func(ctx context.Context, req *produceAPI.Request) (*produceAPI.Response, error)
	layouts   *layouts
	gather    *gatherer[*produceCall]

	requests, records atomic.Int64 // requests sent, records they carried
}

type produceCall struct {
	ctx        context.Context
	msgs       []kafka.Message
	partitions []int
	done       chan struct{}
	err        error
}

func newProduceBatcher(client *kafka.Client, window, timeout time.Duration) *produceBatcher {
	b := &produceBatcher{timeout: timeout, layouts: newLayouts(kafkaLayout(client)),
		roundTrip: roundTripper[*produceAPI.Request, *produceAPI.Response](client, "produce")}
	b.gather = newGatherer(window, func(cl *produceCall) bool { return cl.ctx.Err() == nil }, b.send)
	b.gather.eager = true
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
	b.gather.add(leader, cl)
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
		l, found := b.layouts.get(ctx, m.Topic)
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

// send writes calls, gathered for one leader, as one request.
func (b *produceBatcher) send(calls []*produceCall) {
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
			b.layouts.forget()
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
		b.layouts.forget()
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
