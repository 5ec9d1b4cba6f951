package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// Baselines are the parts of the delivery path measured bare, in the same
// run as the system, each in messages (or operations) per second.
type Baselines struct {
	// KafkaPerSec: internal/queue Producer.Publish of one record per call
	// (the station's batching: 2ms, acks=all) → internal/queue Consumer
	// (the carrier's: 256 workers), records consumed per second.
	KafkaPerSec float64 `json:"kafka_per_sec"`
	KafkaP99MS  float64 `json:"kafka_p99_ms"`
	// GRPCPerSec: bare grpc-go bidirectional streams, the server sends a
	// msgpb.Messages with one message and waits for the client's Ack.
	GRPCPerSec float64 `json:"grpc_msg_ack_per_sec"`
	GRPCP99MS  float64 `json:"grpc_p99_ms"`
	// RedisLookupPerSec: pipelined HGETALL of session hashes (the read
	// carrier makes per ToUid task); RedisEvalPerSec: pipelined EVALSHA of
	// offline write.lua, batches of 10.
	RedisLookupPerSec float64 `json:"redis_hgetall_per_sec"`
	RedisEvalPerSec   float64 `json:"redis_evalsha_write_per_sec"`
	// ChainedPerSec = 1 / (1/Kafka + 2/GRPC + 1/RedisLookup): the parts run
	// one after another on the same cores, so their per-message times add.
	ChainedPerSec float64 `json:"chained_per_sec"`
}

func (b *Baselines) chain() {
	if b.KafkaPerSec > 0 && b.GRPCPerSec > 0 && b.RedisLookupPerSec > 0 {
		b.ChainedPerSec = 1 / (1/b.KafkaPerSec + 2/b.GRPCPerSec + 1/b.RedisLookupPerSec)
	}
}

// meanBaselines averages baseline runs taken before and after a system run.
func meanBaselines(runs []Baselines) Baselines {
	var m Baselines
	if len(runs) == 0 {
		return m
	}
	for _, r := range runs {
		m.KafkaPerSec += r.KafkaPerSec
		m.KafkaP99MS += r.KafkaP99MS
		m.GRPCPerSec += r.GRPCPerSec
		m.GRPCP99MS += r.GRPCP99MS
		m.RedisLookupPerSec += r.RedisLookupPerSec
		m.RedisEvalPerSec += r.RedisEvalPerSec
	}
	n := float64(len(runs))
	m.KafkaPerSec /= n
	m.KafkaP99MS /= n
	m.GRPCPerSec /= n
	m.GRPCP99MS /= n
	m.RedisLookupPerSec /= n
	m.RedisEvalPerSec /= n
	m.chain()
	return m
}

// BaselineConfig says where and how long to measure the baselines.
type BaselineConfig struct {
	KafkaBrokers []string
	RedisAddr    string
	Concurrency  int
	Duration     time.Duration // per baseline
	RunID        string
	// Rate paces the Kafka callers (records per second in all); 0: as fast
	// as they can.
	Rate float64
}

// runBaselines measures every baseline once.
func runBaselines(ctx context.Context, cfg BaselineConfig, log *zap.Logger) (Baselines, error) {
	var b Baselines
	var err error
	// A cluster on NATS has no Kafka to measure.
	if len(cfg.KafkaBrokers) > 0 {
		if b.KafkaPerSec, b.KafkaP99MS, err = kafkaBaseline(ctx, cfg, log); err != nil {
			return b, fmt.Errorf("kafka baseline: %w", err)
		}
	}
	if b.GRPCPerSec, b.GRPCP99MS, err = grpcBaseline(ctx, cfg.Concurrency, cfg.Duration); err != nil {
		return b, fmt.Errorf("grpc baseline: %w", err)
	}
	if b.RedisLookupPerSec, b.RedisEvalPerSec, err = redisBaseline(ctx, cfg); err != nil {
		return b, fmt.Errorf("redis baseline: %w", err)
	}
	b.chain()
	return b, nil
}

// kafkaBaseline publishes one record per call from Concurrency callers and
// counts what a consumer group member handles.
func kafkaBaseline(ctx context.Context, cfg BaselineConfig, log *zap.Logger) (perSec, p99 float64, err error) {
	topic := "gomsg.bench.baseline-" + cfg.RunID
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = queue.EnsureTopics(tctx, cfg.KafkaBrokers, []queue.TopicSpec{{Name: topic, Partitions: 16, ReplicationFactor: 1}})
	cancel()
	if err != nil {
		return 0, 0, err
	}
	prod := queue.NewProducer(queue.ProducerConfig{Brokers: cfg.KafkaBrokers}, log)
	defer prod.Close()
	var consumed, inWin atomic.Int64
	var winStart, winEnd atomic.Int64
	winStart.Store(1 << 62)
	lat := newLatencies()
	cons := queue.NewConsumer(queue.ConsumerConfig{Brokers: cfg.KafkaBrokers, GroupID: topic, Topic: topic, Workers: 256},
		func(_ context.Context, m queue.Message) error {
			now := time.Now().UnixNano()
			consumed.Add(1)
			if len(m.Value) == 8 {
				sent := int64(binary.BigEndian.Uint64(m.Value))
				if sent >= winStart.Load() && now <= winEnd.Load() {
					inWin.Add(1)
					lat.add(int(sent), now-sent)
				}
			}
			return nil
		}, log)
	cctx, stopCons := context.WithCancel(ctx)
	consDone := make(chan error, 1)
	go func() { consDone <- cons.Run(cctx) }()
	defer func() { stopCons(); <-consDone }()

	// Wait until the consumer group is consuming: probes until one arrives.
	deadline := time.Now().Add(60 * time.Second)
	for consumed.Load() == 0 {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("consumer got nothing within 60s")
		}
		if err := prod.Publish(ctx, queue.Record{Topic: topic, Key: "probe", Value: []byte("probe")}); err != nil {
			return 0, 0, err
		}
		time.Sleep(100 * time.Millisecond)
	}

	warm := time.Second
	start := time.Now().Add(warm)
	end := start.Add(cfg.Duration)
	winStart.Store(start.UnixNano())
	winEnd.Store(end.UnixNano())
	var wg sync.WaitGroup
	var perr atomic.Value
	var next atomic.Int64
	t0 := time.Now()
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(end); i++ {
				if cfg.Rate > 0 {
					due := t0.Add(time.Duration(float64(next.Add(1)-1) / cfg.Rate * float64(time.Second)))
					if !due.Before(end) || !sleepUntil(ctx, due) {
						return
					}
				}
				v := make([]byte, 8)
				binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
				if err := prod.Publish(ctx, queue.Record{Topic: topic, Key: "u" + strconv.Itoa(w*1_000_000+i), Value: v}); err != nil {
					perr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e, ok := perr.Load().(error); ok {
		return 0, 0, e
	}
	// Let records sent inside the window arrive (bounded).
	sleepUntil(ctx, time.Now().Add(500*time.Millisecond))
	return float64(inWin.Load()) / cfg.Duration.Seconds(), lat.percentiles().P99, nil
}

// serverOptions are boat's client-stream server options
// (internal/boat/boat.go); the floor server and the gRPC baseline use them.
func serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// echoServer sends one message at a time on each stream and waits for its
// Ack, like boat delivering a NEED_ACK message.
type echoServer struct {
	msgpb.UnimplementedMsgServer
}

func (echoServer) Loop(stream msgpb.Msg_LoopServer) error {
	body := encodeBody(0, 0)
	for seq := int64(1); ; seq++ {
		m := &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Messages{Messages: &msgpb.Messages{
			Msgs: []*msgpb.Message{{Seq: seq, Options: uint32(msgpb.Option_NEED_ACK), Body: body, Timestamp: time.Now().UnixMilli()}}}}}
		if err := stream.Send(m); err != nil {
			return err
		}
		if _, err := stream.Recv(); err != nil {
			return nil
		}
	}
}

// grpcBaseline runs the echo server in-process and Concurrency streams (one
// connection each) against it.
func grpcBaseline(ctx context.Context, concurrency int, dur time.Duration) (perSec, p99 float64, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	srv := grpc.NewServer(serverOptions()...)
	msgpb.RegisterMsgServer(srv, echoServer{})
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	warm := 500 * time.Millisecond
	start := time.Now().Add(warm)
	end := start.Add(dur)
	var count atomic.Int64
	lat := newLatencies()
	var wg sync.WaitGroup
	var ferr atomic.Value
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				ferr.CompareAndSwap(nil, err)
				return
			}
			defer conn.Close()
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			stream, err := msgpb.NewMsgClient(conn).Loop(sctx)
			if err != nil {
				ferr.CompareAndSwap(nil, err)
				return
			}
			last := time.Now()
			for {
				p, err := stream.Recv()
				if err != nil {
					ferr.CompareAndSwap(nil, err)
					return
				}
				now := time.Now()
				if now.After(end) {
					return
				}
				if !now.Before(start) {
					count.Add(1)
					lat.add(w, now.Sub(last).Nanoseconds())
				}
				last = now
				seq := p.GetMessages().GetMsgs()[0].GetSeq()
				if err := stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ack{Ack: &msgpb.Ack{Seqs: []int64{seq}}}}); err != nil {
					ferr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if e, ok := ferr.Load().(error); ok {
		return 0, 0, e
	}
	return float64(count.Load()) / dur.Seconds(), lat.percentiles().P99, nil
}

// redisBaseline measures pipelined HGETALL of session hashes and pipelined
// EVALSHA of the offline write script, each from 8 goroutines sending
// pipelines of 10.
func redisBaseline(ctx context.Context, cfg BaselineConfig) (lookups, evals float64, err error) {
	rdb := redis.NewClient(&redis.Options{Addr: cfg.RedisAddr, PoolSize: 16})
	defer rdb.Close()
	const users, batch, workers = 1000, 10, 8
	prefix := "bench-" + cfg.RunID + "-"
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range users {
			k := "msg/u:" + prefix + strconv.Itoa(i) + "/ss"
			p.HSet(ctx, k, "1", "ios-bench")
			p.Expire(ctx, k, time.Minute)
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	run := func(op func(w, i int, p redis.Pipeliner) error) (float64, error) {
		end := time.Now().Add(cfg.Duration)
		var n atomic.Int64
		var ferr atomic.Value
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(end); i++ {
					_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return op(w, i, p) })
					if err != nil {
						ferr.CompareAndSwap(nil, err)
						return
					}
					n.Add(batch)
				}
			}()
		}
		wg.Wait()
		if e, ok := ferr.Load().(error); ok {
			return 0, e
		}
		return float64(n.Load()) / cfg.Duration.Seconds(), nil
	}
	lookups, err = run(func(w, i int, p redis.Pipeliner) error {
		for j := range batch {
			p.HGetAll(ctx, "msg/u:"+prefix+strconv.Itoa((w*7919+i*batch+j)%users)+"/ss")
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	script := redis.NewScript(offline.WriteScript())
	if err := script.Load(ctx, rdb).Err(); err != nil {
		return 0, 0, err
	}
	const expiry = time.Minute
	ms := strconv.FormatInt(expiry.Milliseconds(), 10)
	body := make([]byte, 64)
	base := time.Now().UnixNano()
	evals, err = run(func(w, i int, p redis.Pipeliner) error {
		uid := prefix + "w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
		ts := time.Now().UnixMilli()
		for j := range batch {
			seq := base + int64(w)<<40 + int64(i*batch+j)
			script.EvalSha(ctx, p, []string{rkeys.Standalone.Offline(uid, "ios"), rkeys.Standalone.Body(uid, seq), rkeys.Standalone.Count(uid, seq)},
				strconv.FormatInt(ts, 10), strconv.FormatInt(seq, 10), body,
				strconv.FormatInt(ts+expiry.Milliseconds(), 10), ms)
		}
		return nil
	})
	return lookups, evals, err
}
