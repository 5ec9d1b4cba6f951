package queue

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/gomsg/gomsg/internal/testutil"
)

// closeCounter wraps a record's key or value and counts its Close.
type closeCounter struct {
	kafka.Bytes
	closed *atomic.Int64
}

func (c closeCounter) Close() error {
	c.closed.Add(1)
	return c.Bytes.Close()
}

// countingReader hands out its records with their keys and values counting
// their Close calls.
type countingReader struct {
	kafka.RecordReader
	read, closed *atomic.Int64
}

func (r countingReader) ReadRecord() (*kafka.Record, error) {
	rec, err := r.RecordReader.ReadRecord()
	if err != nil {
		return rec, err
	}
	r.read.Add(1)
	if rec.Key != nil {
		rec.Key = closeCounter{rec.Key, r.closed}
	}
	if rec.Value != nil {
		rec.Value = closeCounter{rec.Value, r.closed}
	}
	return rec, nil
}

// A record batch is read into a 64 KiB page of kafka-go's, which goes back
// to its pool only once every record's key and value is closed: the
// consumer closes them once copied, skipped records included (a batch can
// start before the offset asked for). Left open, a stream of lone records —
// one batch each, as lone pushes are — allocates a page per record (81 KiB
// per record measured, against 16 KiB closed).
func TestConsumerGivesRecordPagesBack(t *testing.T) {
	t.Parallel()
	const n = 40
	brokers := startBroker(t, 1)
	publish(t, newTestProducer(t, brokers), sequenced(1, n))
	seen := newSeqRecorder()
	c := unitConsumer(t, ConsumerConfig{}, func(_ context.Context, m Message) error {
		seen.add(m.Key, parseSeq(t, m))
		return nil
	})
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	var read, closed atomic.Int64
	var once sync.Once
	c.fetch = func(ctx context.Context, req *kafka.FetchRequest) (*kafka.FetchResponse, error) {
		once.Do(func() { req.Offset = 0 }) // the loop starts past the first records: they are skipped
		res, err := client.Fetch(ctx, req)
		if err == nil {
			res.Records = countingReader{res.Records, &read, &closed}
		}
		return res, err
	}
	fetchTo(t, c, brokers, n/2)
	seen.waitCount(t, n/2, 10*time.Second)
	waitFor(t, 10*time.Second, func() error {
		if r, cl := read.Load(), closed.Load(); r < n || cl != 2*r {
			return testutil.Errorf("%d records read, %d keys and values closed; want %d read and every one's key and value closed", r, cl, n)
		}
		return nil
	})
}
