package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Ping asks the brokers for the cluster's metadata: it fails unless one of
// them answers.
func Ping(ctx context.Context, sec Security, brokers []string) error {
	if len(brokers) == 0 {
		return errors.New("ping: no brokers configured")
	}
	// A fresh transport per call: see createTopics.
	transport := sec.transport(0)
	defer transport.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 5 * time.Second, Transport: transport}
	if _, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}}); err != nil {
		return fmt.Errorf("kafka metadata: %w", err)
	}
	return nil
}
