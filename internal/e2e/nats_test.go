package e2e

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/testutil"
)

// natsRecords returns the values of every record of topic's stream, in
// stream order; a stream not created yet holds none.
func (e *env) natsRecords(topic string) [][]byte {
	e.t.Helper()
	var out [][]byte
	for _, m := range e.natsMessages(topic) {
		out = append(out, m.Value)
	}
	return out
}

// natsMessages returns every record of topic's stream, in stream order,
// with its partition (from its subject) and key.
func (e *env) natsMessages(topic string) []queue.Message {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []queue.Message
	err := testutil.NATSStreamRecords(ctx, e.nats.URL, queue.StreamName(topic), func(m *jetstream.RawStreamMsg) {
		part, err := strconv.Atoi(strings.TrimPrefix(m.Subject, topic+"."))
		if err != nil {
			e.t.Errorf("record %d of %s on subject %s: not a partition's", m.Sequence, topic, m.Subject)
			return
		}
		out = append(out, queue.Message{Topic: topic, Partition: part, Offset: int64(m.Sequence), Key: m.Header.Get("Gomsg-Key"), Value: m.Data})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// queueProducer is a producer on the cluster's queue, as the services have,
// for a test that writes records itself; the test closes it.
func (e *env) queueProducer() app.Publisher {
	e.t.Helper()
	if e.nats != nil {
		j, err := queue.ConnectNATS(queue.NATSConfig{URLs: e.cfg.Backends.NATSURLs}, zaptest.NewLogger(e.t))
		if err != nil {
			e.t.Fatal(err)
		}
		return j
	}
	return queue.NewProducer(queue.ProducerConfig{Brokers: []string{e.kafka}}, zaptest.NewLogger(e.t))
}

// stopQueue stops the cluster's queue: the nats-server, or the Kafka broker.
func (e *env) stopQueue() {
	if e.nats != nil {
		e.nats.Close()
	} else {
		e.broker.Close()
	}
}
