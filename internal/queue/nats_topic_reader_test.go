package queue

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The NATS topic reader reads one partition's records in order by stream
// sequence, within a range, and refuses a sequence that belongs to another
// partition.
func TestNATSTopicReader(t *testing.T) {
	t.Parallel()
	const partitions = 4
	_, url := startNATS(t, partitions)
	j := connectNATS(t, url, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	recs := sequenced(6, 5)
	if err := j.Publish(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	r := NATSTopicReader{J: j, Topic: testTopic}
	ranges, err := r.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges) != partitions || ranges[0].First != 1 || ranges[0].End != int64(len(recs))+1 {
		t.Fatalf("ranges %+v, want %d partitions of [1, %d)", ranges, partitions, len(recs)+1)
	}
	total := 0
	for _, pr := range ranges {
		var last int64
		bySeq := map[string]int{}
		err := r.Read(ctx, pr.ID, pr.First, pr.End, func(m Message) error {
			if m.Partition != pr.ID || m.Offset <= last {
				t.Errorf("partition %d: record at %d of partition %d after %d", pr.ID, m.Offset, m.Partition, last)
			}
			last = m.Offset
			seq := parseSeq(t, m)
			if seq != bySeq[m.Key] {
				t.Errorf("key %s: record %d, want %d", m.Key, seq, bySeq[m.Key])
			}
			bySeq[m.Key]++
			total++
			one, err := r.ReadOne(ctx, pr.ID, m.Offset)
			if err != nil || string(one.Value) != string(m.Value) || one.Key != m.Key {
				t.Errorf("ReadOne(%d, %d): %+v %v, want %q", pr.ID, m.Offset, one, err, m.Value)
			}
			if _, err := r.ReadOne(ctx, (pr.ID+1)%partitions, m.Offset); !errors.Is(err, ErrUnavailable) {
				t.Errorf("ReadOne of sequence %d as partition %d's: %v, want an error", m.Offset, (pr.ID+1)%partitions, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if total != len(recs) {
		t.Errorf("read %d records over all partitions, want %d", total, len(recs))
	}
	// A range's end bounds what is read.
	n := 0
	if err := r.Read(ctx, ranges[0].ID, 1, 3, func(Message) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n > 2 {
		t.Errorf("read %d records of sequences [1, 3), want at most 2", n)
	}
}
