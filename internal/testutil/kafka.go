package testutil

import (
	"testing"

	"github.com/gomsg/gomsg/internal/embedded"
)

// StartKafka runs an in-process Kafka-protocol broker (kfake) with the given
// topics, each with partitions partitions, and returns its bootstrap address.
func StartKafka(tb testing.TB, partitions int, topics ...string) string {
	tb.Helper()
	k, err := embedded.StartKafka("127.0.0.1:0", partitions, topics...)
	if err != nil {
		tb.Fatalf("start kafka: %v", err)
	}
	tb.Cleanup(k.Close)
	return k.Addr
}

// StartKafkaBroker is StartKafka returning the broker, for tests that stop it.
func StartKafkaBroker(tb testing.TB, partitions int, topics ...string) *embedded.Kafka {
	tb.Helper()
	k, err := embedded.StartKafka("127.0.0.1:0", partitions, topics...)
	if err != nil {
		tb.Fatalf("start kafka: %v", err)
	}
	tb.Cleanup(k.Close)
	return k
}
