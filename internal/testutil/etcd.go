package testutil

import (
	"net/url"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gomsg/gomsg/internal/embedded"
)

// StartEtcd runs an embedded etcd server on free loopback ports and returns
// its client endpoint.
func StartEtcd(tb testing.TB) string {
	tb.Helper()
	u := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(FreePort(tb))}
	e, err := embedded.StartEtcd(tb.TempDir(), u.Host, "127.0.0.1:"+strconv.Itoa(FreePort(tb)))
	if err != nil {
		tb.Fatalf("start etcd: %v", err)
	}
	tb.Cleanup(e.Close)
	return u.Host
}

// EtcdClient returns a client for endpoint, closed by t.Cleanup.
func EtcdClient(tb testing.TB, endpoint string) *clientv3.Client {
	tb.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
