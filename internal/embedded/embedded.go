//go:build !nodev

package embedded

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Included reports whether this build has the embedded backends.
const Included = true

// Etcd is an embedded single-member etcd server.
type Etcd struct {
	Addr string
	e    *embed.Etcd
}

// StartEtcd starts etcd with its data in dir, serving clients on clientAddr
// and peers on peerAddr (host:port each).
func StartEtcd(dir, clientAddr, peerAddr string) (*Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "gomsg-dev"
	cfg.Dir = dir
	cu := url.URL{Scheme: "http", Host: clientAddr}
	pu := url.URL{Scheme: "http", Host: peerAddr}
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd not ready after 30s")
	}
	return &Etcd{Addr: e.Clients[0].Addr().String(), e: e}, nil
}

// Close stops the server.
func (e *Etcd) Close() { e.e.Close() }

// Kafka is an in-process Kafka-protocol broker.
type Kafka struct {
	Addr string
	c    *kfake.Cluster
	once sync.Once
}

// StartKafka starts a single-broker cluster listening on addr (port 0 picks a
// free one; the host is always 127.0.0.1) with topics pre-created.
func StartKafka(addr string, partitions int, topics ...string) (*Kafka, error) {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("kafka listen address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("kafka listen address %q: %w", addr, err)
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(port), kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("start in-process kafka: %w", err)
	}
	return &Kafka{Addr: c.ListenAddrs()[0], c: c}, nil
}

// Close stops the broker; closing twice is fine.
func (k *Kafka) Close() { k.once.Do(k.c.Close) }

// Redis is an in-process Redis (miniredis) whose key TTLs count down with the
// wall clock, as a real server's do.
type Redis struct {
	Addr string
	m    *miniredis.Miniredis
}

// StartRedis serves miniredis on addr.
func StartRedis(addr string) (*Redis, error) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("start in-process redis on %s: %w", addr, err)
	}
	return &Redis{Addr: m.Addr(), m: m}, nil
}

// Close stops the server.
func (r *Redis) Close() { r.m.Close() }
