package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gomsg/gomsg/internal/backoff"
	"github.com/gomsg/gomsg/internal/queue"
)

// Default addresses of the external backends of a service started without
// them (`gomsg dev` runs embedded ones instead).
const (
	DefaultRedisAddr    = "127.0.0.1:6379"
	DefaultKafkaBroker  = "127.0.0.1:9092"
	DefaultEtcdEndpoint = "127.0.0.1:2379"
)

// DefaultStartTimeout is how long start-up waits for a backend to answer.
const DefaultStartTimeout = 10 * time.Second

// Needs says which backends a set of services uses.
type Needs struct {
	Redis, Kafka, Etcd bool
}

// NeedsOf returns the backends services use: boat only etcd (and station,
// over gRPC); station Redis, Kafka and etcd; carrier Redis, Kafka and etcd;
// horn Redis and Kafka.
func NeedsOf(services []string) Needs {
	var n Needs
	for _, s := range services {
		switch s {
		case "boat":
			n.Etcd = true
		case "station", "carrier":
			n.Redis, n.Kafka, n.Etcd = true, true, true
		case "horn":
			n.Redis, n.Kafka = true, true
		}
	}
	return n
}

// ErrNotReachable is wrapped into the error of a backend that did not answer
// within the start timeout.
var ErrNotReachable = errors.New("not reachable")

// waitReachable calls probe until it succeeds, timeout passes or ctx ends.
// A refused connection is retried: a backend still starting is waited for.
// The error names the backend, its address and --start-timeout; when ctx
// ended (a signal) it is ctx's error.
func waitReachable(ctx context.Context, timeout time.Duration, name, addr string, probe func(context.Context) error) error {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	err := backoff.Retry(tctx, backoff.Policy{Min: 50 * time.Millisecond, Max: time.Second}, func() error {
		err := probe(tctx)
		// An attempt cut short by the timeout says only "i/o timeout";
		// the attempt before it said why the backend is not there.
		if err != nil && (last == nil || tctx.Err() == nil) {
			last = err
		}
		return err
	}, nil)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return fmt.Errorf("%s %s: %w within %s (--start-timeout): %w", name, addr, ErrNotReachable, timeout, last)
}

// tcpProbe dials one of addrs, so that an unreachable backend is reported
// as what it is ("connection refused", "no such host") rather than as a
// client's timeout.
func tcpProbe(addrs []string) func(context.Context) error {
	return func(ctx context.Context) error {
		var first error
		for _, a := range addrs {
			a = strings.TrimPrefix(strings.TrimPrefix(a, "http://"), "https://")
			if strings.Contains(a, "://") {
				return nil // unix sockets and other schemes: the client's own probe tells
			}
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			var d net.Dialer
			c, err := d.DialContext(dctx, "tcp", a)
			cancel()
			if err == nil {
				_ = c.Close()
				return nil
			}
			if first == nil {
				first = err
			}
		}
		return first
	}
}

// both runs a then b.
func both(a, b func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := a(ctx); err != nil {
			return err
		}
		return b(ctx)
	}
}

// redisProbe pings Redis; on Redis Cluster, every master, and it fails while
// the cluster is not serving all its slots (cluster_state is not ok, as
// while a master is down and no replica has taken over).
func redisProbe(r redis.UniversalClient) func(context.Context) error {
	cc, ok := r.(*redis.ClusterClient)
	if !ok {
		return func(ctx context.Context) error { return r.Ping(ctx).Err() }
	}
	return func(ctx context.Context) error {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			info, err := m.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("%s: %w", m.Options().Addr, err)
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster_state is not ok", m.Options().Addr)
			}
			return nil
		})
	}
}

// etcdProbe reads a key: the cluster answers and has a leader.
func etcdProbe(e *clientv3.Client, prefix string) func(context.Context) error {
	return func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := e.Get(pctx, prefix+"/health-probe")
		return err
	}
}

// kafkaProbe asks the brokers for metadata.
func kafkaProbe(sec queue.Security, brokers []string) func(context.Context) error {
	return func(ctx context.Context) error { return queue.Ping(ctx, sec, brokers) }
}
