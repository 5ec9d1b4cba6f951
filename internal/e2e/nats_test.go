package e2e

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/queue"
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
	nc, err := nats.Connect(e.nats.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, queue.StreamName(topic))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []queue.Message
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		part, err := strconv.Atoi(strings.TrimPrefix(m.Subject, topic+"."))
		if err != nil {
			e.t.Fatalf("record %d of %s on subject %s: not a partition's", seq, topic, m.Subject)
		}
		out = append(out, queue.Message{Topic: topic, Partition: part, Offset: int64(seq), Key: m.Header.Get("Gomsg-Key"), Value: m.Data})
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
