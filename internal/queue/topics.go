package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/gomsg/gomsg/internal/backoff"
)

// TopicSpec describes a topic EnsureTopics creates.
type TopicSpec struct {
	Name       string
	Partitions int
	// ReplicationFactor 0 takes the brokers' default.
	ReplicationFactor int
}

// EnsureTopics creates the topics that do not exist yet; existing ones are
// left as they are, even when their partition count differs. While the
// brokers cannot be reached, or answer with a retriable error, it retries
// with backoff until ctx ends.
func EnsureTopics(ctx context.Context, brokers []string, topics []TopicSpec) error {
	return EnsureTopicsWith(ctx, Security{}, brokers, topics)
}

// EnsureTopicsWith is EnsureTopics with SASL and TLS towards the brokers.
func EnsureTopicsWith(ctx context.Context, sec Security, brokers []string, topics []TopicSpec) error {
	if len(brokers) == 0 {
		return errors.New("ensure topics: no brokers configured")
	}
	if len(topics) == 0 {
		return nil
	}
	configs := make([]kafka.TopicConfig, len(topics))
	for i, t := range topics {
		if t.Name == "" || t.Partitions <= 0 {
			return fmt.Errorf("ensure topics: invalid spec %+v: want a name and at least one partition", t)
		}
		rf := t.ReplicationFactor
		if rf <= 0 {
			rf = -1 // broker default (CreateTopics v4+)
		}
		configs[i] = kafka.TopicConfig{Topic: t.Name, NumPartitions: t.Partitions, ReplicationFactor: rf}
	}

	return backoff.Retry(ctx, backoff.Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second}, func() error {
		pending, err := createTopics(ctx, sec, brokers, configs)
		if err != nil && !retriable(err) {
			return backoff.Permanent(err)
		}
		configs = pending
		return err
	}, nil)
}

// retriable reports whether CreateTopics may succeed when tried again: the
// brokers could not be reached, or answered with a temporary error.
func retriable(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return true
	}
	// kafka-go reports an unreachable cluster as BrokerNotAvailable, which
	// it does not count as temporary.
	return kerr.Temporary() || kerr == kafka.BrokerNotAvailable
}

// createTopics sends one CreateTopics request. It returns the topics still to
// create and the first error, nil when every topic exists.
func createTopics(ctx context.Context, sec Security, brokers []string, configs []kafka.TopicConfig) ([]kafka.TopicConfig, error) {
	// A fresh transport per attempt: a kafka-go transport that failed to
	// reach the cluster keeps returning that error until its metadata
	// refresh (6s by default), even once the brokers are up.
	transport := sec.transport(0)
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: transport}
	resp, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: configs})
	if err != nil {
		return configs, fmt.Errorf("ensure topics: %w", err)
	}
	var pending []kafka.TopicConfig
	var first error
	for _, c := range configs {
		err, ok := resp.Errors[c.Topic]
		switch {
		case !ok:
			err = fmt.Errorf("no answer for topic %q", c.Topic)
		case err == nil, errors.Is(err, kafka.TopicAlreadyExists):
			continue
		}
		pending = append(pending, c)
		if first == nil {
			first = fmt.Errorf("ensure topics: create %q: %w", c.Topic, err)
		}
	}
	return pending, first
}
