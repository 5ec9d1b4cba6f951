package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/testutil"
)

// startNATS runs a nats-server with testTopic's stream of partitions
// partitions and returns its URL.
func startNATS(tb testing.TB, partitions int) (*testutil.NATS, string) {
	tb.Helper()
	srv := testutil.StartNATS(tb)
	j := connectNATS(tb, srv.URL, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := j.EnsureStreams(ctx, []TopicSpec{{Name: testTopic, Partitions: partitions}}, true); err != nil {
		tb.Fatalf("ensure streams: %v", err)
	}
	return srv, srv.URL
}

func connectNATS(tb testing.TB, url string, writeTimeout time.Duration) *JetStream {
	tb.Helper()
	j, err := ConnectNATS(NATSConfig{URLs: []string{url}, WriteTimeout: writeTimeout}, zaptest.NewLogger(tb))
	if err != nil {
		tb.Fatalf("connect nats: %v", err)
	}
	tb.Cleanup(func() { _ = j.Close() })
	return j
}

// streamState is testTopic's stream's state as the server reports it now.
func streamState(tb testing.TB, j *JetStream) jetstream.StreamState {
	tb.Helper()
	s, err := j.js.Stream(context.Background(), StreamName(testTopic))
	if err != nil {
		tb.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return info.State
}

// natsConfig is a consumer configuration with short group timings.
func natsConfig(group string, workers int) ConsumerConfig {
	return ConsumerConfig{GroupID: group, Topic: testTopic, Workers: workers, SessionTimeout: 3 * time.Second,
		CommitInterval: 100 * time.Millisecond, DrainTimeout: time.Second}
}

// runNATS runs c until stop is called or the test ends; stop waits for Run.
func runNATS(tb testing.TB, c *NATSConsumer) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					tb.Errorf("consumer Run: %v", err)
				}
			case <-time.After(20 * time.Second):
				tb.Errorf("consumer did not stop within 20s")
			}
		})
	}
	tb.Cleanup(stop)
	return stop
}

// Publish returns only once JetStream stored the records: right after it,
// the stream holds each one, on the subject of the partition the Kafka
// producer would choose for its key, with its key and headers.
func TestNATSPublishStoresBeforeReturning(t *testing.T) {
	t.Parallel()
	const partitions = 4
	_, url := startNATS(t, partitions)
	j := connectNATS(t, url, 5*time.Second)
	recs := sequenced(5, 20)
	for i := range recs {
		recs[i].Headers = map[string]string{"trace": strconv.Itoa(i)}
	}
	ctx := context.Background()
	if err := j.Publish(ctx, recs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if n := streamState(t, j).Msgs; n != uint64(len(recs)) {
		t.Fatalf("stream holds %d records right after Publish returned, want %d", n, len(recs))
	}
	s, err := j.js.Stream(ctx, StreamName(testTopic))
	if err != nil {
		t.Fatal(err)
	}
	all := []int{0, 1, 2, 3}
	for i, r := range recs {
		m, err := s.GetMsg(ctx, uint64(i+1))
		if err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
		want := subject(testTopic, kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(r.Key)}, all...))
		if m.Subject != want || string(m.Data) != string(r.Value) || m.Header.Get(keyHeader) != r.Key || m.Header.Get("trace") != strconv.Itoa(i) {
			t.Fatalf("record %d stored as subject %s value %q key %q trace %q; want %s %q %q %q",
				i+1, m.Subject, m.Data, m.Header.Get(keyHeader), m.Header.Get("trace"), want, r.Value, r.Key, strconv.Itoa(i))
		}
	}
}

// Publish reports what JetStream did not store: a stream that refuses
// records (full, discarding new ones) makes it fail, never succeed.
func TestNATSPublishFailsWhenNotStored(t *testing.T) {
	t.Parallel()
	srv := testutil.StartNATS(t)
	j := connectNATS(t, srv.URL, 5*time.Second)
	ctx := context.Background()
	if _, err := j.js.CreateStream(ctx, jetstream.StreamConfig{Name: "full", Subjects: []string{"full.*"},
		MaxMsgs: 3, Discard: jetstream.DiscardNew, Metadata: map[string]string{partitionsMeta: "2"}}); err != nil {
		t.Fatal(err)
	}
	recs := make([]Record, 5)
	for i := range recs {
		recs[i] = Record{Topic: "full", Key: strconv.Itoa(i), Value: []byte("v")}
	}
	err := j.Publish(ctx, recs...)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("publish of 5 records to a stream that keeps 3: %v, want ErrUnavailable", err)
	}
}

// A server that cannot be reached is ErrUnavailable, never a success, and
// Publish does not hang: it fails within its write timeout.
func TestNATSPublishUnavailable(t *testing.T) {
	t.Parallel()
	srv, url := startNATS(t, 2)
	j := connectNATS(t, url, 2*time.Second)
	if err := j.Publish(context.Background(), Record{Topic: testTopic, Key: "a", Value: []byte("before")}); err != nil {
		t.Fatalf("publish while up: %v", err)
	}
	srv.Close()
	start := time.Now()
	err := j.Publish(context.Background(), Record{Topic: testTopic, Key: "a", Value: []byte("after")})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("publish with the server down: %v, want ErrUnavailable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("publish with the server down took %s, want at most the write timeout (2s) and a margin", took)
	}
	// A record with no topic can never be written.
	if err := j.Publish(context.Background(), Record{Key: "a"}); !errors.Is(err, ErrInvalidRecord) {
		t.Fatalf("record without topic: %v, want ErrInvalidRecord", err)
	}
}

// keyGuard fails the test when two handlers of one key overlap, on one
// member or across members.
type keyGuard struct {
	mu     sync.Mutex
	active map[string]string
	tb     testing.TB
}

func (g *keyGuard) enter(key, who string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if other, ok := g.active[key]; ok {
		g.tb.Errorf("key %s handled by %s while %s still handles it", key, who, other)
	}
	g.active[key] = who
}

func (g *keyGuard) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.active, key)
}

// Two members share the partitions; each key's records are handled exactly
// once, in the order published, never two of one key at once, while keys run
// in parallel (more than one handler at a time) and both members work.
func TestNATSOrderPerKeyAcrossMembers(t *testing.T) {
	t.Parallel()
	const partitions, keys, perKey = 8, 40, 25
	_, url := startNATS(t, partitions)
	rec := newSeqRecorder()
	guard := &keyGuard{active: make(map[string]string), tb: t}
	var running, peak atomic.Int64
	var perMember [2]atomic.Int64
	handler := func(i int) Handler {
		return func(ctx context.Context, m Message) error {
			guard.enter(m.Key, strconv.Itoa(i))
			defer guard.leave(m.Key)
			n := running.Add(1)
			defer running.Add(-1)
			peak.Store(max(peak.Load(), n))
			time.Sleep(time.Millisecond) // keeps handlers overlapping
			rec.add(m.Key, parseSeq(t, m))
			perMember[i].Add(1)
			return nil
		}
	}
	for i := range 2 {
		j := connectNATS(t, url, 5*time.Second)
		runNATS(t, j.NewConsumer(natsConfig("order", 8), handler(i), zaptest.NewLogger(t)))
	}
	// Both members hold partitions before the records arrive.
	p := connectNATS(t, url, 5*time.Second)
	waitOwners(t, p, "order", partitions, 2)
	if err := p.Publish(context.Background(), sequenced(keys, perKey)...); err != nil {
		t.Fatal(err)
	}
	rec.waitCount(t, keys*perKey, 30*time.Second)
	rec.checkExactlyInOrder(t, keys, perKey)
	if peak.Load() < 2 {
		t.Errorf("at most %d handler ran at a time, want keys in parallel", peak.Load())
	}
	if perMember[0].Load() == 0 || perMember[1].Load() == 0 {
		t.Errorf("records handled per member: %d and %d, want both to share the load", perMember[0].Load(), perMember[1].Load())
	}
}

// waitOwners waits until every partition of group is owned and owners
// distinct members own them, the same number each (give or take one): the
// group's settled split, after which no partition moves while the members
// stay.
func waitOwners(tb testing.TB, j *JetStream, group string, partitions, owners int) map[int]string {
	tb.Helper()
	var got map[int]string
	waitFor(tb, 20*time.Second, func() error {
		var err error
		got, err = partitionOwners(j, group)
		if err != nil {
			return err
		}
		members := make(map[string]int)
		for _, m := range got {
			members[m]++
		}
		if len(got) != partitions || len(members) != owners {
			return fmt.Errorf("%d partitions owned by %d members, want %d by %d", len(got), len(members), partitions, owners)
		}
		for m, n := range members {
			if n < partitions/owners || n > (partitions+owners-1)/owners {
				return fmt.Errorf("member %s owns %d of %d partitions: not settled", m, n, partitions)
			}
		}
		return nil
	})
	return got
}

func partitionOwners(j *JetStream, group string) (map[int]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := j.js.KeyValue(ctx, "gomsg_group_"+group+"_"+StreamName(testTopic))
	if err != nil {
		return nil, err
	}
	l, err := kv.ListKeysFiltered(ctx, "p.*")
	if err != nil {
		return nil, err
	}
	out := make(map[int]string)
	for k := range l.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(k, "p."))
		out[n] = string(e.Value())
	}
	return out, nil
}

// A stop that lands while a member looks at the group changes nothing of
// what it holds: the member list read under the ended context is an error,
// not a group without this member. The release that follows commits every
// position and deletes every partition's key although the loop's context
// has ended, so the others take the partitions at once and nothing
// finished is handled again; so is a partition's key created just before
// the stop for a partition that could not be taken.
func TestNATSStopDuringRebalanceKeepsThenReleasesCleanly(t *testing.T) {
	t.Parallel()
	const partitions = 4
	_, url := startNATS(t, partitions)
	j := connectNATS(t, url, 5*time.Second)
	rec := newSeqRecorder()
	c := j.NewConsumer(natsConfig("cut", 2), rec.handler(t), zaptest.NewLogger(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.setUp(ctx); err != nil {
		t.Fatal(err)
	}
	stopWorkers := c.engine.startWorkers()
	defer stopWorkers()
	c.heartbeat(ctx)
	c.rebalance(ctx, ctx, partitions)
	if len(c.held) != partitions {
		t.Fatalf("the only member holds %d partitions, want %d", len(c.held), partitions)
	}
	if err := j.Publish(ctx, sequenced(8, 3)...); err != nil {
		t.Fatal(err)
	}
	rec.waitCount(t, 24, 20*time.Second)

	// A list the stop cuts short: many members, the context ended while
	// their keys are read.
	const others = 1000
	for i := range others {
		if _, err := c.own.Put(ctx, fmt.Sprintf("m.other-%04d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	listing, stopListing := context.WithCancel(ctx)
	l, err := c.own.ListKeysFiltered(listing, "m.*")
	if err != nil {
		t.Fatal(err)
	}
	stopListing()
	if m, err := memberIDs(listing, l); err == nil {
		t.Errorf("members read under a context that ended meanwhile: %d of %d and no error, want the context's error", len(m), others+1)
	}
	for i := range others {
		if err := c.own.Delete(ctx, fmt.Sprintf("m.other-%04d", i)); err != nil {
			t.Fatal(err)
		}
	}

	stopped, stop := context.WithCancel(ctx)
	stop()
	c.rebalance(stopped, ctx, partitions)
	if len(c.held) != partitions {
		t.Fatalf("a rebalance under an ended context left %d of %d partitions held", len(c.held), partitions)
	}

	want := make(map[int]int64)
	for n, hp := range c.held {
		if pos, ok := hp.p.offsets.uncommitted()[n]; ok {
			want[n] = pos
		}
	}
	if len(want) == 0 {
		t.Fatal("no partition has a position to commit after 24 records were handled")
	}
	for n, hp := range c.held {
		c.release(stopped, n, hp, true)
	}
	for n, pos := range want {
		e, err := c.offs.Get(ctx, offsetKey("cut", testTopic, n))
		if err != nil {
			t.Errorf("partition %d: position not committed by its release: %v", n, err)
			continue
		}
		if got := string(e.Value()); got != strconv.FormatInt(pos, 10) {
			t.Errorf("partition %d: committed position %s, want %d", n, got, pos)
		}
	}
	for n := range partitions {
		if _, err := c.own.Get(ctx, partKey(n)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("partition %d: its key after the release: %v, want deleted", n, err)
		}
	}

	// A partition whose key was created but which could not be taken when
	// the stop came is given back all the same.
	rev, err := c.own.Create(ctx, partKey(0), []byte(c.member))
	if err != nil {
		t.Fatal(err)
	}
	c.giveBack(stopped, 0, rev)
	if _, err := c.own.Get(ctx, partKey(0)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the key of a partition given back under an ended context: %v, want deleted", err)
	}
}

// A member that dies (its connection gone, no goodbye) holds records it
// never finished: they are handled by the other member, within the session
// timeout and a margin of the death, and every record is handled at least
// once, in order per key on the survivor.
func TestNATSCrashHandsOverUnfinished(t *testing.T) {
	t.Parallel()
	const partitions, keys, perKey = 4, 8, 10
	_, url := startNATS(t, partitions)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })

	var crashed atomic.Bool
	var started atomic.Int64
	ja := connectNATS(t, url, 5*time.Second)
	a := ja.NewConsumer(natsConfig("crash", 4), func(ctx context.Context, m Message) error {
		if !crashed.Load() {
			started.Add(1)
		}
		// A dead process finishes nothing; this one's handlers end only
		// when its stop cancels them, at the end of the test.
		select {
		case <-release:
		case <-ctx.Done():
		}
		return errors.New("dead")
	}, zaptest.NewLogger(t))
	runNATS(t, a)
	p := connectNATS(t, url, 5*time.Second)
	waitOwners(t, p, "crash", partitions, 1)
	if err := p.Publish(context.Background(), sequenced(keys, perKey)...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		if started.Load() == 0 {
			return errors.New("member a started nothing yet")
		}
		return nil
	})

	rec := newSeqRecorder()
	var firstAt atomic.Int64
	jb := connectNATS(t, url, 5*time.Second)
	runNATS(t, jb.NewConsumer(natsConfig("crash", 4), func(ctx context.Context, m Message) error {
		firstAt.CompareAndSwap(0, time.Now().UnixNano())
		rec.add(m.Key, parseSeq(t, m))
		return nil
	}, zaptest.NewLogger(t)))
	// b joins, but a holds every partition (and renews them) while it
	// lives: b takes none, and handles nothing.
	waitFor(t, 10*time.Second, func() error {
		ms, err := partitionOwners(p, "crash")
		if err != nil {
			return err
		}
		for n, m := range ms {
			if m != a.Member() {
				t.Fatalf("partition %d owned by %s while a lives", n, m)
			}
		}
		if len(ms) != partitions {
			return fmt.Errorf("%d partitions owned", len(ms))
		}
		return nil
	})
	if rec.count() != 0 {
		t.Fatalf("member b handled %d records while a held every partition", rec.count())
	}

	crashed.Store(true)
	killed := time.Now()
	_ = ja.Close() // kill -9: no release, no commit, keys left to expire
	rec.waitCount(t, keys*perKey, 20*time.Second)
	pause := time.Duration(firstAt.Load() - killed.UnixNano())
	t.Logf("first record on the survivor %s after the crash", pause)
	if pause > 3*time.Second+2*time.Second {
		t.Errorf("survivor started %s after the crash, want within the session timeout (3s) and 2s", pause)
	}
	rec.checkExactlyInOrder(t, keys, perKey)
}

// A clean stop releases the partitions at once: the remaining member owns
// all of them within 2 s of the stop, and handles records published after.
func TestNATSCleanStopHandsOverQuickly(t *testing.T) {
	t.Parallel()
	const partitions = 6
	_, url := startNATS(t, partitions)
	rec := newSeqRecorder()
	ja := connectNATS(t, url, 5*time.Second)
	jb := connectNATS(t, url, 5*time.Second)
	stopA := runNATS(t, ja.NewConsumer(natsConfig("stop", 4), rec.handler(t), zaptest.NewLogger(t)))
	b := jb.NewConsumer(natsConfig("stop", 4), rec.handler(t), zaptest.NewLogger(t))
	runNATS(t, b)
	p := connectNATS(t, url, 5*time.Second)
	waitOwners(t, p, "stop", partitions, 2)
	if err := p.Publish(context.Background(), sequenced(12, 5)...); err != nil {
		t.Fatal(err)
	}
	rec.waitCount(t, 60, 20*time.Second)

	stopA()
	stopped := time.Now()
	owners := waitOwners(t, p, "stop", partitions, 1)
	took := time.Since(stopped)
	t.Logf("b owned every partition %s after a stopped", took)
	for n, m := range owners {
		if m != b.Member() {
			t.Fatalf("partition %d owned by %s after a stopped, want b (%s)", n, m, b.Member())
		}
	}
	if took > 2*time.Second {
		t.Errorf("b owned every partition %s after a stopped, want within 2s", took)
	}
	// Records after the stop go to b, none lost, none from before repeated
	// (a committed everything it finished before releasing).
	recs := sequenced(12, 10)[60:]
	if err := p.Publish(context.Background(), recs...); err != nil {
		t.Fatal(err)
	}
	rec.waitCount(t, 120, 20*time.Second)
	rec.checkExactlyInOrder(t, 12, 10)
}

// A renewal of a partition's key whose answer was lost (the call timed out,
// or the stop cancelled it) moved the key on while it still names its
// member. The member keeps the partition at its next renewal rather than
// give it up as taken, and a clean stop still hands it over at once rather
// than after the key's expiry. The test moves the keys on itself, with the
// member's own name, as such a renewal would.
func TestNATSLostRenewalKeepsAndReleasesThePartition(t *testing.T) {
	t.Parallel()
	const partitions = 4
	_, url := startNATS(t, partitions)
	rec := newSeqRecorder()
	cfg := natsConfig("lost", 2)
	cfg.SessionTimeout = 30 * time.Second // a hand-over by expiry would take this long
	ja, jb := connectNATS(t, url, 5*time.Second), connectNATS(t, url, 5*time.Second)
	a := ja.NewConsumer(cfg, rec.handler(t), zaptest.NewLogger(t))
	stopA := runNATS(t, a)
	p := connectNATS(t, url, 5*time.Second)
	waitOwners(t, p, "lost", partitions, 1)

	kv, err := p.js.KeyValue(t.Context(), "gomsg_group_lost_"+StreamName(testTopic))
	if err != nil {
		t.Fatal(err)
	}
	// moveOn moves a's keys on, each to a new revision naming a.
	moveOn := func() map[int]uint64 {
		revs := make(map[int]uint64, partitions)
		for n := range partitions {
			e, err := kv.Get(t.Context(), partKey(n))
			if err != nil {
				t.Fatal(err)
			}
			if string(e.Value()) != a.Member() {
				continue
			}
			rev, err := kv.Put(t.Context(), partKey(n), []byte(a.Member()))
			if err != nil {
				t.Fatal(err)
			}
			revs[n] = rev
		}
		return revs
	}

	// Renewed from where the keys are: each key moves past the test's
	// revision and still names a.
	moved := moveOn()
	waitFor(t, 10*time.Second, func() error {
		for n, after := range moved {
			e, err := kv.Get(t.Context(), partKey(n))
			if err != nil {
				return err
			}
			if string(e.Value()) != a.Member() {
				return fmt.Errorf("partition %d owned by %q, want a", n, e.Value())
			}
			if e.Revision() <= after {
				return fmt.Errorf("partition %d's key at revision %d, not renewed since the test moved it to %d", n, e.Revision(), after)
			}
		}
		return nil
	})
	if err := p.Publish(t.Context(), sequenced(8, 3)...); err != nil {
		t.Fatal(err)
	}
	rec.waitCount(t, 24, 20*time.Second)

	// Released where the keys are: b owns every partition long before the
	// keys' expiry.
	b := jb.NewConsumer(cfg, rec.handler(t), zaptest.NewLogger(t))
	runNATS(t, b)
	waitOwners(t, p, "lost", partitions, 2)
	if n := len(moveOn()); n != partitions/2 {
		t.Fatalf("moved %d of a's keys, want %d", n, partitions/2)
	}
	stopA()
	stopped := time.Now()
	owners := waitOwners(t, p, "lost", partitions, 1)
	for n, m := range owners {
		if m != b.Member() {
			t.Fatalf("partition %d owned by %s after a stopped, want b", n, m)
		}
	}
	if took := time.Since(stopped); took > 10*time.Second {
		t.Errorf("b owned every partition %s after a stopped: a's keys were left to expire (%s)", took, cfg.SessionTimeout)
	}
	if err := p.Publish(t.Context(), sequenced(8, 6)[24:]...); err != nil {
		t.Fatal(err)
	}
	rec.waitCount(t, 48, 20*time.Second)
	rec.checkExactlyInOrder(t, 8, 6)
}

// A stream that exists with settings gomsg cannot work with is refused,
// naming the setting; a missing one without create is an error; a matching
// one passes.
func TestNATSEnsureStreamsRefusesConflicts(t *testing.T) {
	t.Parallel()
	srv := testutil.StartNATS(t)
	j := connectNATS(t, srv.URL, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	spec := []TopicSpec{{Name: "conflict", Partitions: 4}}
	if err := j.EnsureStreams(ctx, spec, false); err == nil || !strings.Contains(err.Error(), "--create-topics") {
		t.Fatalf("missing stream without create: %v, want an error naming --create-topics", err)
	}
	if err := j.EnsureStreams(ctx, spec, true); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := j.EnsureStreams(ctx, spec, false); err != nil {
		t.Fatalf("check of a matching stream: %v", err)
	}
	err := j.EnsureStreams(ctx, []TopicSpec{{Name: "conflict", Partitions: 8}}, true)
	if !errors.Is(err, ErrStreamConflict) || !strings.Contains(err.Error(), "partitions") {
		t.Fatalf("partition count changed: %v, want ErrStreamConflict naming partitions", err)
	}
	if _, err := j.js.CreateStream(ctx, jetstream.StreamConfig{Name: "wq", Subjects: []string{"wq.*"},
		Retention: jetstream.WorkQueuePolicy, Metadata: map[string]string{partitionsMeta: "4"}}); err != nil {
		t.Fatal(err)
	}
	err = j.EnsureStreams(ctx, []TopicSpec{{Name: "wq", Partitions: 4}}, true)
	if !errors.Is(err, ErrStreamConflict) || !strings.Contains(err.Error(), "retention") {
		t.Fatalf("work-queue stream: %v, want ErrStreamConflict naming retention", err)
	}
	if _, err := j.js.CreateStream(ctx, jetstream.StreamConfig{Name: "subj", Subjects: []string{"other.*"},
		Metadata: map[string]string{partitionsMeta: "4"}}); err != nil {
		t.Fatal(err)
	}
	err = j.EnsureStreams(ctx, []TopicSpec{{Name: "subj", Partitions: 4}}, true)
	if !errors.Is(err, ErrStreamConflict) || !strings.Contains(err.Error(), "subjects") {
		t.Fatalf("stream with other subjects: %v, want ErrStreamConflict naming subjects", err)
	}
}

// A member that joins while the owner of a partition is still handling its
// records does not start that partition before the owner finished and
// released it: no key is ever handled by both at once, and every record is
// handled.
func TestNATSJoinWaitsForOwnerToFinish(t *testing.T) {
	t.Parallel()
	const partitions, keys, perKey = 4, 8, 6
	_, url := startNATS(t, partitions)
	guard := &keyGuard{active: make(map[string]string), tb: t}
	rec := newSeqRecorder()
	handler := func(who string, d time.Duration) Handler {
		return func(ctx context.Context, m Message) error {
			guard.enter(m.Key, who)
			defer guard.leave(m.Key)
			time.Sleep(d) // a slow handler: the owner is busy when b joins
			rec.add(m.Key, parseSeq(t, m))
			return nil
		}
	}
	cfg := natsConfig("join", 16)
	cfg.DrainTimeout = 5 * time.Second // a's handlers finish before it lets go
	ja := connectNATS(t, url, 5*time.Second)
	runNATS(t, ja.NewConsumer(cfg, handler("a", 300*time.Millisecond), zaptest.NewLogger(t)))
	p := connectNATS(t, url, 5*time.Second)
	waitOwners(t, p, "join", partitions, 1)
	if err := p.Publish(context.Background(), sequenced(keys, perKey)...); err != nil {
		t.Fatal(err)
	}
	rec.waitCount(t, keys, 10*time.Second) // a is busy with its first records
	jb := connectNATS(t, url, 5*time.Second)
	runNATS(t, jb.NewConsumer(cfg, handler("b", 0), zaptest.NewLogger(t)))
	waitOwners(t, p, "join", partitions, 2)
	rec.waitCount(t, keys*perKey, 30*time.Second)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for k := range keys {
		key := "uid-" + strconv.Itoa(k)
		seen := make(map[int]bool)
		for _, s := range rec.byKey[key] {
			seen[s] = true
		}
		if len(seen) != perKey {
			t.Errorf("key %s: handled %v, want every one of 0..%d", key, rec.byKey[key], perKey-1)
		}
	}
}
