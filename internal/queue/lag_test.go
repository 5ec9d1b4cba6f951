package queue

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/gomsg/gomsg/internal/testutil"
)

// commitOffsets commits offsets for group outside any generation, as a
// group with no live member accepts.
func commitOffsets(tb testing.TB, brokers []string, group, topic string, offsets map[int]int64) {
	tb.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	var commits []kafka.OffsetCommit
	for p, off := range offsets {
		commits = append(commits, kafka.OffsetCommit{Partition: p, Offset: off})
	}
	resp, err := client.OffsetCommit(context.Background(), &kafka.OffsetCommitRequest{
		GroupID: group, GenerationID: -1, Topics: map[string][]kafka.OffsetCommit{topic: commits}})
	if err != nil {
		tb.Fatalf("commit: %v", err)
	}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			tb.Fatalf("commit %s/%d: %v", topic, p.Partition, p.Error)
		}
	}
}

func TestGroupLag(t *testing.T) {
	t.Parallel()
	brokers := startBroker(t, 3)
	publish(t, newTestProducer(t, brokers), sequenced(30, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The partitions' ends as a partition reader sees them.
	ranges, err := TopicReader{Brokers: brokers, Topic: testTopic}.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges) != 3 {
		t.Fatalf("%d partitions, want 3", len(ranges))
	}
	var total int64
	for _, r := range ranges {
		if r.First != 0 || r.End < 3 {
			t.Fatalf("partition %d holds [%d, %d): the test needs 3 records or more from 0 in each", r.ID, r.First, r.End)
		}
		total += r.End
	}
	lr := LagReader{Brokers: brokers}

	// A group that never committed is behind by every record.
	got, err := lr.GroupLag(ctx, "fresh", testTopic)
	if err != nil {
		t.Fatal(err)
	}
	if got.Lag != total || got.Topic != testTopic || got.Group != "fresh" || len(got.Partitions) != 3 {
		t.Errorf("fresh group: %+v, want lag %d over 3 partitions", got, total)
	}
	for i, p := range got.Partitions {
		if p.Partition != i || p.Committed != -1 || p.End != ranges[i].End || p.Lag != ranges[i].End {
			t.Errorf("fresh group, partition %d: %+v, want committed -1, end = lag = %d", i, p, ranges[i].End)
		}
	}

	// Partition 0 fully read, 1 two behind, 2 never committed.
	commitOffsets(t, brokers, "carrier", testTopic, map[int]int64{0: ranges[0].End, 1: ranges[1].End - 2})
	got, err = lr.GroupLag(ctx, "carrier", testTopic)
	if err != nil {
		t.Fatal(err)
	}
	want := []PartitionLag{
		{Partition: 0, End: ranges[0].End, Committed: ranges[0].End, Lag: 0},
		{Partition: 1, End: ranges[1].End, Committed: ranges[1].End - 2, Lag: 2},
		{Partition: 2, End: ranges[2].End, Committed: -1, Lag: ranges[2].End},
	}
	if got.Lag != 2+ranges[2].End {
		t.Errorf("lag %d, want %d", got.Lag, 2+ranges[2].End)
	}
	if len(got.Partitions) != len(want) {
		t.Fatalf("partitions %+v, want %+v", got.Partitions, want)
	}
	for i := range want {
		if got.Partitions[i] != want[i] {
			t.Errorf("partition %d: %+v, want %+v", i, got.Partitions[i], want[i])
		}
	}

	// Five more records on the topic: the lag grows by five.
	publish(t, newTestProducer(t, brokers), sequenced(5, 1))
	got, err = lr.GroupLag(ctx, "carrier", testTopic)
	if err != nil {
		t.Fatal(err)
	}
	if got.Lag != 2+ranges[2].End+5 {
		t.Errorf("after 5 more records: lag %d, want %d", got.Lag, 2+ranges[2].End+5)
	}
}

func TestGroupLagUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dead := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	_, err := LagReader{Brokers: []string{dead}, Timeout: 2 * time.Second}.GroupLag(ctx, "carrier", testTopic)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("lag from a broker that is down: %v, want ErrUnavailable", err)
	}
	brokers := startBroker(t, 1)
	_, err = LagReader{Brokers: brokers}.GroupLag(ctx, "carrier", "no-such-topic")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("lag on a topic that does not exist: %v, want ErrUnavailable", err)
	}
}
