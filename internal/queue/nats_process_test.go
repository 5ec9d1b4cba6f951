package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/testutil"
)

// On Debian's nats-server (a separate process, the version a Debian user
// installs), streams are created, checked again at the next start, and a
// consumer group reads every record in order per key; the server killed
// with SIGKILL and started again on its store: Publish is Unavailable while
// it is down, and afterwards the group, whose membership bucket lived in
// the server's memory, forms again and reads on from its committed
// position, records published before and after the restart alike.
func TestNATSProcessKilledAndRestarted(t *testing.T) {
	t.Parallel()
	const partitions, keys, perKey = 4, 10, 20
	srv := testutil.StartNATSProcess(t)
	p := connectNATS(t, srv.URL, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	spec := []TopicSpec{{Name: testTopic, Partitions: partitions}}
	for i := range 2 { // the second start checks the stream the first created
		if err := p.EnsureStreams(ctx, spec, true); err != nil {
			t.Fatalf("ensure streams, start %d: %v", i+1, err)
		}
	}
	rec := newSeqRecorder()
	c := connectNATS(t, srv.URL, 2*time.Second)
	runNATS(t, c.NewConsumer(natsConfig("restart", 4), func(_ context.Context, m Message) error {
		rec.add(m.Key, parseSeq(t, m))
		return nil
	}, zaptest.NewLogger(t)))
	recs := sequenced(keys, perKey)
	half := len(recs) / 2
	if err := p.Publish(ctx, recs[:half]...); err != nil {
		t.Fatal(err)
	}
	rec.waitCount(t, half, 20*time.Second)

	srv.Kill()
	err := p.Publish(ctx, recs[half])
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("publish with the server down: %v, want ErrUnavailable", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error { return p.Publish(ctx, recs[half:]...) })
	// The group's bucket is back with the member's partitions in it, and a
	// second member gets its share.
	waitOwners(t, p, "restart", partitions, 1)
	c2 := connectNATS(t, srv.URL, 2*time.Second)
	runNATS(t, c2.NewConsumer(natsConfig("restart", 4), func(_ context.Context, m Message) error {
		rec.add(m.Key, parseSeq(t, m))
		return nil
	}, zaptest.NewLogger(t)))
	waitOwners(t, p, "restart", partitions, 2)
	// At least once: a record handled but not committed before the kill is
	// handled again, so each key's first handlings must be 0..perKey-1 in
	// order, repeats aside.
	waitFor(t, 30*time.Second, func() error {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.byKey) != keys {
			return testutil.Errorf("handled records of %d keys, want %d", len(rec.byKey), keys)
		}
		for key, seqs := range rec.byKey {
			next := 0
			for _, s := range seqs {
				switch {
				case s == next:
					next++
				case s > next:
					return testutil.Errorf("key %s: %d handled before %d: %v", key, s, next, seqs)
				}
			}
			if next != perKey {
				return testutil.Errorf("key %s: handled up to %d of %d", key, next, perKey)
			}
		}
		return nil
	})
}
