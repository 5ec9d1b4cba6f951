package testutil

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// StartRedisSecure starts redis-server with a password and only a TLS port
// (certificate issued by ca; client certificates optional) and returns its
// address.
func StartRedisSecure(tb testing.TB, ca *CA, password string) string {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redis-server not found on PATH (run scripts/test.sh, which installs it): %v", err)
	}
	certFile, keyFile := ca.Issue(tb, "redis")
	port := FreePort(tb)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command("redis-server",
		"--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", ca.CertFile,
		"--tls-auth-clients", "optional", "--requirepass", password,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", tb.TempDir(), "--loglevel", "warning")
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password,
		TLSConfig: &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}})
	defer c.Close()
	WaitFor(tb, 10*time.Second, func() error { return c.Ping(context.Background()).Err() })
	return addr
}

// Etcd root credentials of StartEtcdSecure.
const (
	EtcdRootUser     = "root"
	EtcdRootPassword = "root-password"
)

// StartEtcdSecure runs an embedded etcd serving clients over TLS
// (certificate issued by ca) with authentication enabled: user
// EtcdRootUser / EtcdRootPassword has the root role. It returns the client
// endpoint (host:port).
func StartEtcdSecure(tb testing.TB, ca *CA) string {
	tb.Helper()
	certFile, keyFile := ca.Issue(tb, "etcd")
	cfg := embed.NewConfig()
	cfg.Name = "gomsg-test"
	cfg.Dir = tb.TempDir()
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: certFile, KeyFile: keyFile}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	// bcrypt's lowest cost: the default (10) made adding the user and every
	// authenticated dial take seconds under -race on a busy machine.
	cfg.BcryptCost = 4
	var host string
	e := retryBind(tb, func() (*embed.Etcd, error) {
		host = "127.0.0.1:" + strconv.Itoa(FreePort(tb))
		cu := url.URL{Scheme: "https", Host: host}
		pu := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(FreePort(tb))}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		return embed.StartEtcd(cfg)
	})
	tb.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		tb.Fatal("embedded etcd not ready after 30s")
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://" + host}, DialTimeout: 5 * time.Second,
		TLS: &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := c.RoleAdd(ctx, "root"); return err },
		func() error { _, err := c.UserAdd(ctx, EtcdRootUser, EtcdRootPassword); return err },
		func() error { _, err := c.UserGrantRole(ctx, EtcdRootUser, "root"); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			tb.Fatalf("etcd auth setup step %d: %v", i, err)
		}
	}
	return host
}

// KafkaSecure configures StartKafkaSecure.
type KafkaSecure struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism, User, Password string
	// TLS, when set, serves the broker over TLS.
	TLS *tls.Config
}

// StartKafkaSecure runs kfake requiring SASL (one superuser) and, with
// s.TLS, TLS; it returns the bootstrap address.
func StartKafkaSecure(tb testing.TB, s KafkaSecure, partitions int, topics ...string) string {
	tb.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(0), kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions), kfake.EnableSASL(), kfake.Superuser(s.Mechanism, s.User, s.Password)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), topics...))
	}
	if s.TLS != nil {
		opts = append(opts, kfake.TLS(s.TLS))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		tb.Fatalf("start kafka: %v", err)
	}
	tb.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// ServerTLS is a server configuration with a certificate ca issued for
// name (valid for localhost and 127.0.0.1).
func (ca *CA) ServerTLS(tb testing.TB, name string) *tls.Config {
	tb.Helper()
	certFile, keyFile := ca.Issue(tb, name)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		tb.Fatal(fmt.Errorf("load %s: %w", name, err))
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}
