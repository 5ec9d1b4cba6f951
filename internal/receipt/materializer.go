package receipt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/batch"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// DefaultRetention is --delivery-retention's default.
const DefaultRetention = 24 * time.Hour

// MaterializerConfig configures a Materializer.
type MaterializerConfig struct {
	Brokers  []string
	Security queue.Security
	// Topic is the receipts topic; GroupID the consumer group (carrier's
	// group + "-receipts").
	Topic   string
	GroupID string
	// Retention is how long a seq's records are kept after its last
	// receipt (--delivery-retention).
	Retention time.Duration
	// Workers is how many users' receipts are handled at once; the
	// receipts of concurrent handlers share one Redis pipeline. Default 64.
	Workers int
	// Batch caps the receipts of one pipeline. Default 256.
	Batch    int
	Consumer queue.ConsumerSettings
	// NewConsumer makes the consumer (--queue); nil: Kafka's.
	NewConsumer queue.NewConsumerFunc
}

// Validate names the first bad setting.
func (c MaterializerConfig) Validate() error {
	switch {
	case c.Topic == "":
		return errors.New("receipts: no topic")
	case c.Retention <= 0:
		return fmt.Errorf("--delivery-retention: %s, must be positive", c.Retention)
	}
	return nil
}

// Materializer consumes the receipts topic and writes every receipt to the
// Store, for GetDelivery. A record is committed only once its receipt is
// stored: while Redis fails, the write is retried and the partition waits
// (queue.Consumer), so no receipt is lost; one stored twice (a record
// consumed again after a rebalance) is one step (Store.Write). A record
// that is not a receipt the store keeps is logged, counted and skipped.
type Materializer struct {
	cfg     MaterializerConfig
	store   *Store
	log     *zap.Logger
	metrics *metrics.Metrics
	writes  *batch.Coalescer[*receiptpb.Receipt, struct{}]
}

// NewMaterializer returns a materializer writing to store.
func NewMaterializer(cfg MaterializerConfig, store *Store, log *zap.Logger, m *metrics.Metrics) (*Materializer, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 64
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mt := &Materializer{cfg: cfg, store: store, log: log.With(zap.String("component", "receipts")), metrics: m}
	mt.writes = batch.New(cfg.Batch, mt.write)
	return mt, nil
}

// Run consumes the receipts topic until ctx ends.
func (mt *Materializer) Run(ctx context.Context) error {
	topic := mt.cfg.Topic
	newConsumer := mt.cfg.NewConsumer
	if newConsumer == nil {
		newConsumer = queue.NewKafkaConsumer
	}
	c := newConsumer(mt.cfg.Consumer.Apply(queue.ConsumerConfig{
		Brokers: mt.cfg.Brokers, GroupID: mt.cfg.GroupID, Topic: topic, Workers: mt.cfg.Workers, Security: mt.cfg.Security,
		OnLag:           func(lag int64) { mt.metrics.ConsumerLag.WithLabelValues(topic).Set(float64(lag)) },
		OnBufferedBytes: func(n int64) { mt.metrics.ConsumerBuffered.WithLabelValues(topic).Set(float64(n)) },
		OnError:         func(op string, _ error) { mt.metrics.QueueError(op).Inc() },
	}), mt.Handle, mt.log)
	mt.log.Info("delivery store consuming", zap.String("topic", topic), zap.String("group", mt.cfg.GroupID),
		zap.Duration("retention", mt.cfg.Retention))
	return c.Run(ctx)
}

// Handle stores one record's receipt. Concurrent calls share a pipeline.
// An error (Redis failed) means not stored: the consumer calls again.
func (mt *Materializer) Handle(ctx context.Context, m queue.Message) error {
	var rc receiptpb.Receipt
	err := proto.Unmarshal(m.Value, &rc)
	if err == nil {
		err = Check(&rc)
	}
	if err != nil {
		mt.metrics.ReceiptsSkipped.Inc()
		mt.log.Warn("skipping a record of the receipts topic", zap.Int("partition", m.Partition),
			zap.Int64("offset", m.Offset), zap.String("key", m.Key), zap.Error(err))
		return nil
	}
	_, err = mt.writes.Do(ctx, &rc)
	return err
}

// write is the coalescer's fetch: one pipeline for the receipts of every
// handler waiting.
func (mt *Materializer) write(ctx context.Context, rs []*receiptpb.Receipt) ([]struct{}, []error) {
	vals := make([]struct{}, len(rs))
	if err := mt.store.Write(ctx, mt.cfg.Retention, rs); err != nil {
		mt.metrics.ReceiptsStoreErrors.Inc()
		mt.metrics.BackendErrors.WithLabelValues("redis", "receipts").Inc()
		errs := make([]error, len(rs))
		for i := range errs {
			errs[i] = err
		}
		return vals, errs
	}
	mt.metrics.ReceiptsApplied.Add(float64(len(rs)))
	return vals, nil
}
