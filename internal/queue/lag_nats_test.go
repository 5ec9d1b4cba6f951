package queue

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/testutil"
)

// GroupLag on JetStream counts, per partition, the messages from the
// group's committed position on: all of them before the group committed
// anything, none once its member handled and committed them, and exactly
// those published while no member ran. It leaves no consumer behind and
// moves no member.
func TestNATSGroupLag(t *testing.T) {
	t.Parallel()
	const partitions = 2
	_, url := startNATS(t, partitions)
	j := connectNATS(t, url, 5*time.Second)
	ctx := context.Background()
	perPartition := func(recs []Record) map[int]int64 {
		out := map[int]int64{}
		for _, r := range recs {
			out[murmur2.Balance(kafka.Message{Key: []byte(r.Key)}, 0, 1)]++
		}
		return out
	}
	check := func(want map[int]int64, committed bool) TopicLag {
		t.Helper()
		lag, err := j.GroupLag(ctx, "lagging", testTopic)
		if err != nil {
			t.Fatalf("GroupLag: %v", err)
		}
		var sum int64
		for _, p := range lag.Partitions {
			if p.Lag != want[p.Partition] {
				t.Errorf("partition %d: lag %d (committed %d, end %d), want %d", p.Partition, p.Lag, p.Committed, p.End, want[p.Partition])
			}
			if committed != (p.Committed > 0) {
				t.Errorf("partition %d: committed %d, want a position: %v", p.Partition, p.Committed, committed)
			}
			sum += p.Lag
		}
		if len(lag.Partitions) != partitions || lag.Lag != sum || lag.Topic != testTopic || lag.Group != "lagging" {
			t.Errorf("lag %+v: want %d partitions summing to its total", lag, partitions)
		}
		return lag
	}

	consumers := func() int { return streamState(t, j).Consumers }

	first := sequenced(6, 3)
	if err := j.Publish(ctx, first...); err != nil {
		t.Fatal(err)
	}
	check(perPartition(first), false)
	if n := consumers(); n != 0 {
		t.Errorf("%d consumers on the stream after a reading, want none", n)
	}

	var handled atomic.Int64
	c := j.NewConsumer(natsConfig("lagging", 4), func(context.Context, Message) error { handled.Add(1); return nil }, zaptest.NewLogger(t))
	stop := runNATS(t, c)
	testutil.WaitFor(t, 20*time.Second, func() error {
		lag, err := j.GroupLag(ctx, "lagging", testTopic)
		if err != nil {
			return err
		}
		if handled.Load() != int64(len(first)) || lag.Lag != 0 {
			return fmt.Errorf("handled %d of %d, lag %d", handled.Load(), len(first), lag.Lag)
		}
		return nil
	})
	stop()
	for _, p := range check(map[int]int64{}, true).Partitions {
		if p.Committed != p.End {
			t.Errorf("partition %d: committed %d, end %d; want the group at the end", p.Partition, p.Committed, p.End)
		}
	}

	more := sequenced(3, 1)
	if err := j.Publish(ctx, more...); err != nil {
		t.Fatal(err)
	}
	before := consumers()
	check(perPartition(more), true)
	if n := consumers(); n != before {
		t.Errorf("%d consumers on the stream after a reading, %d before it: the reading left its own", n, before)
	}
}
