package testutil

import (
	"net"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

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

// StartKafkaBehindProxy runs the broker of StartKafka behind a Proxy and
// advertises the proxy's address as the broker's: every client connection,
// the ones made from metadata included, goes through the proxy, so that
// cutting it partitions the clients from Kafka.
func StartKafkaBehindProxy(tb testing.TB, partitions int, topics ...string) *Proxy {
	tb.Helper()
	port := FreePort(tb)
	px := StartProxy(tb, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	adv, err := net.ResolveTCPAddr("tcp", px.Addr())
	if err != nil {
		tb.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions), kfake.SeedTopics(int32(partitions), topics...),
		kfake.ListenFn(func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, addr)
			if err != nil {
				return nil, err
			}
			return advertised{ln, adv}, nil
		}))
	if err != nil {
		tb.Fatalf("start kafka: %v", err)
	}
	tb.Cleanup(c.Close)
	return px
}

// advertised is a listener that reports another address as its own.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }
