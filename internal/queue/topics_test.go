package queue

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/gomsg/gomsg/internal/embedded"
	"github.com/gomsg/gomsg/internal/testutil"
)

func partitionCount(t *testing.T, broker, topic string) int {
	t.Helper()
	return len(readPartitions(t, broker, topic))
}

// readPartitions is the brokers' metadata of topic's partitions.
func readPartitions(t *testing.T, broker, topic string) []kafka.Partition {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := kafka.DialContext(ctx, "tcp", broker)
	if err != nil {
		t.Fatalf("dial %s: %v", broker, err)
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions(topic)
	if err != nil {
		t.Fatalf("read partitions of %s: %v", topic, err)
	}
	return parts
}

func TestEnsureTopicsCreatesMissingAndIsIdempotent(t *testing.T) {
	t.Parallel()
	broker := testutil.StartKafka(t, 1, "existing") // 1 partition each
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	specs := []TopicSpec{
		{Name: "tasks", Partitions: 6, ReplicationFactor: 1},
		{Name: "tasks-retry", Partitions: 3}, // broker's default replication
		{Name: "existing", Partitions: 4, ReplicationFactor: 1},
	}
	for range 2 {
		if err := EnsureTopics(ctx, []string{broker}, specs); err != nil {
			t.Fatalf("EnsureTopics: %v", err)
		}
		for topic, want := range map[string]int{"tasks": 6, "tasks-retry": 3, "existing": 1} {
			if got := partitionCount(t, broker, topic); got != want {
				t.Errorf("topic %s has %d partitions, want %d", topic, got, want)
			}
		}
	}
}

func TestEnsureTopicsRejectsInvalidReplication(t *testing.T) {
	t.Parallel()
	broker := testutil.StartKafka(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := EnsureTopics(ctx, []string{broker}, []TopicSpec{{Name: "t", Partitions: 1, ReplicationFactor: 3}})
	if !errors.Is(err, kafka.InvalidReplicationFactor) {
		t.Errorf("EnsureTopics with replication 3 on one broker: error = %v, want InvalidReplicationFactor", err)
	}
	if ctx.Err() != nil {
		t.Error("EnsureTopics retried a permanent error until the deadline")
	}
}

// EnsureTopics keeps trying while nothing answers Kafka on the address, and
// succeeds once a broker is there.
func TestEnsureTopicsWaitsForBroker(t *testing.T) {
	t.Parallel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))

	// First a listener that hangs up on every connection.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{}, 100)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- EnsureTopics(ctx, []string{addr}, []TopicSpec{{Name: "late", Partitions: 2, ReplicationFactor: 1}})
	}()
	for range 2 { // at least one retry
		select {
		case <-accepted:
		case err := <-done:
			t.Fatalf("EnsureTopics returned %v before a broker was up", err)
		case <-ctx.Done():
			t.Fatal("EnsureTopics never connected")
		}
	}
	_ = l.Close()

	k, err := embedded.StartKafka(addr, 1)
	if err != nil {
		t.Fatalf("start kafka on %s: %v", addr, err)
	}
	t.Cleanup(k.Close)
	if err := <-done; err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	if got := partitionCount(t, addr, "late"); got != 2 {
		t.Errorf("topic late has %d partitions, want 2", got)
	}
}

func TestEnsureTopicsGivesUpWithContext(t *testing.T) {
	t.Parallel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testutil.FreePort(t)))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	err := EnsureTopics(ctx, []string{addr}, []TopicSpec{{Name: "t", Partitions: 1}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("EnsureTopics against nothing: error = %v, want one wrapping DeadlineExceeded", err)
	}
}

// Specs and brokers are checked before anything is dialed.
func TestEnsureTopicsRejectsBadArguments(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nowhere := []string{"127.0.0.1:1"}
	if err := EnsureTopics(ctx, nil, []TopicSpec{{Name: "t", Partitions: 1}}); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Errorf("no brokers: %v", err)
	}
	if err := EnsureTopics(ctx, nowhere, nil); err != nil {
		t.Errorf("no topics: %v, want nil", err)
	}
	for _, spec := range []TopicSpec{{Name: "", Partitions: 1}, {Name: "t", Partitions: 0}, {Name: "t", Partitions: -1}} {
		if err := EnsureTopics(ctx, nowhere, []TopicSpec{spec}); err == nil || !strings.Contains(err.Error(), "invalid spec") {
			t.Errorf("spec %+v: %v, want an invalid spec error", spec, err)
		}
	}
	if ctx.Err() != nil {
		t.Error("EnsureTopics retried bad arguments until the deadline")
	}
}

// replicas returns how many replicas each partition of topic has.
func replicas(t *testing.T, broker, topic string) []int {
	t.Helper()
	parts := readPartitions(t, broker, topic)
	out := make([]int, len(parts))
	for i, p := range parts {
		out[i] = len(p.Replicas)
	}
	return out
}

// ReplicationFactor 0 asks for the brokers' default (kfake's: three, as
// many as there are brokers here), not for zero or one replica.
func TestEnsureTopicsZeroReplicationTakesTheBrokersDefault(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := EnsureTopics(ctx, brokers, []TopicSpec{{Name: "dflt", Partitions: 2}, {Name: "one", Partitions: 1, ReplicationFactor: 1}}); err != nil {
		t.Fatalf("EnsureTopics: %v", err)
	}
	if got := replicas(t, brokers[0], "dflt"); !slices.Equal(got, []int{3, 3}) {
		t.Errorf("replicas of a topic with ReplicationFactor 0: %v, want [3 3]", got)
	}
	if got := replicas(t, brokers[0], "one"); !slices.Equal(got, []int{1}) {
		t.Errorf("replicas of a topic with ReplicationFactor 1: %v, want [1]", got)
	}
}

// While the brokers cannot be reached EnsureTopics backs off between
// attempts (100ms doubling to 2s) instead of hammering them.
func TestEnsureTopicsBacksOffBetweenAttempts(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := EnsureTopics(ctx, []string{l.Addr().String()}, []TopicSpec{{Name: "t", Partitions: 1}}); err == nil {
		t.Fatal("EnsureTopics succeeded against a listener that hangs up")
	}
	// Waits of 50-100, 100-200, 200-400 and 400-800ms fit in the second:
	// about five attempts.
	if n := accepted.Load(); n < 2 || n > 20 {
		t.Errorf("%d connections in a second, want 2 to 20 (a few attempts with backoff)", n)
	}
}
