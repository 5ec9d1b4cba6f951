package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/segmentio/kafka-go"

	"github.com/gomsg/gomsg/internal/backoff"
)

// partition is one partition assigned to this member for one generation.
// Its counters are guarded by the keyPool's lock.
type partition struct {
	id    int
	start int64 // committed offset, or kafka.FirstOffset
	// keys holds the queue of every key with records buffered or running.
	keys map[string]*keyQueue
	// buffered and bytes count the records fetched and not finished
	// (queued or running); running those being handled.
	buffered, running int
	bytes             int64
	revoked           bool
	// room is signalled when records finish, to wake a paused fetch loop or
	// a drain waiting for the running handlers.
	room chan struct{}
	// offsets is the generation's record of finished offsets.
	offsets *offsetTracker
	// stop ends retries of a failing record once the partition is revoked;
	// hctx is the handlers' context, cancelled once a drain times out.
	stop    context.Context
	stopNow context.CancelFunc
	hctx    context.Context
	cancel  context.CancelFunc
	lag     atomic.Int64
}

func newPartition(hctx context.Context, id int, start int64, offsets *offsetTracker) *partition {
	p := &partition{id: id, start: start, keys: make(map[string]*keyQueue), room: make(chan struct{}, 1), offsets: offsets}
	p.stop, p.stopNow = context.WithCancel(context.Background())
	p.hctx, p.cancel = context.WithCancel(hctx)
	return p
}

func (p *partition) signal() {
	select {
	case p.room <- struct{}{}:
	default:
	}
}

// fetchLoop fetches p's records into the key queues until ctx (the
// generation) is done. While p holds QueueSize records or MaxBufferedBytes
// bytes it does not fetch; other partitions' loops are not affected. A
// failed fetch is retried with backoff, never given up: returning would end
// the generation for every partition.
func (c *Consumer) fetchLoop(ctx context.Context, p *partition) {
	retry := c.newBackoff()
	next := p.start
	for {
		room, ok := c.pool.waitRoom(ctx, p, c.cfg.QueueSize, c.cfg.MaxBufferedBytes)
		if !ok {
			return
		}
		maxBytes := min(int64(c.cfg.MaxBytes), max(room, 1))
		res, err := c.fetch(ctx, &kafka.FetchRequest{
			Topic: c.cfg.Topic, Partition: p.id, Offset: next,
			MinBytes: min(int64(c.cfg.MinBytes), maxBytes), MaxBytes: maxBytes, MaxWait: c.cfg.MaxWait,
		})
		if err == nil && res.Error != nil {
			err = res.Error
		}
		if err == nil {
			next, err = c.take(p, res, next)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, kafka.OffsetOutOfRange) {
				// Retention removed what was committed: start from the
				// earliest record still there.
				next = kafka.FirstOffset
			}
			c.fetchErrors.Add(1)
			err = fmt.Errorf("fetch partition %d: %w", p.id, err)
			if c.cfg.OnError != nil {
				c.cfg.OnError("fetch", err)
			}
			c.outage.Fail(err)
			if !backoff.Sleep(ctx, retry.next()) {
				return
			}
			continue
		}
		retry.reset()
		c.outage.OK()
	}
}

// take queues the records of res from offset next on, as far as p has room,
// and returns the offset to fetch next. Records beyond the room are dropped
// and fetched again later.
func (c *Consumer) take(p *partition, res *kafka.FetchResponse, next int64) (int64, error) {
	taken := 0
	for {
		r, err := res.Records.ReadRecord()
		if err != nil {
			if errors.Is(err, io.EOF) || taken > 0 {
				break
			}
			return next, fmt.Errorf("read record: %w", err)
		}
		if next >= 0 && r.Offset < next {
			release(r)
			continue // a batch can start before the offset asked for
		}
		m, err := toMessage(c.cfg.Topic, p.id, r)
		release(r)
		if err != nil {
			if taken > 0 {
				break
			}
			return next, err
		}
		if !c.pool.add(c, p, m, c.cfg.QueueSize, c.cfg.MaxBufferedBytes) {
			break
		}
		taken++
		next = r.Offset + 1
	}
	if next < 0 && res.LogStartOffset >= 0 {
		// Nothing yet from the first offset: poll on from where the log
		// starts. Asked for the first offset again, every long poll of an
		// idle partition would cost an offset look-up before it and go
		// alone, not gathered with the other partitions' polls.
		next = res.LogStartOffset
	}
	if next >= 0 {
		p.lag.Store(max(0, res.HighWatermark-next))
	}
	return next, nil
}

// release gives r's key and value back to kafka-go once copied: they point
// into the 64 KiB page their record batch was read into, which goes back to
// kafka-go's pool only when every record's key and value is closed. Left
// open, each batch's page is garbage for the collector instead — at one
// record per batch (a lone push), most of what a consumer allocates.
func release(r *kafka.Record) {
	if r.Key != nil {
		_ = r.Key.Close()
	}
	if r.Value != nil {
		_ = r.Value.Close()
	}
}

func toMessage(topic string, partition int, r *kafka.Record) (Message, error) {
	key, err := kafka.ReadAll(r.Key)
	if err != nil {
		return Message{}, fmt.Errorf("read key: %w", err)
	}
	value, err := kafka.ReadAll(r.Value)
	if err != nil {
		return Message{}, fmt.Errorf("read value: %w", err)
	}
	var headers map[string]string
	if len(r.Headers) > 0 {
		headers = make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			headers[h.Key] = string(h.Value)
		}
	}
	return Message{Topic: topic, Partition: partition, Offset: r.Offset, Key: string(key), Value: value,
		Headers: headers, Time: r.Time}, nil
}

// size is what a message counts against MaxBufferedBytes.
func size(m Message) int64 {
	n := len(m.Key) + len(m.Value)
	for k, v := range m.Headers {
		n += len(k) + len(v)
	}
	return int64(n)
}
