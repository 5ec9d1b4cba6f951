package testutil

import (
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gomsg/gomsg/internal/embedded"
)

// StartEtcd runs an embedded etcd server on free loopback ports and returns
// its client endpoint.
func StartEtcd(tb testing.TB) string {
	tb.Helper()
	var host string
	e := retryBind(tb, func() (*embedded.Etcd, error) {
		host = "127.0.0.1:" + strconv.Itoa(FreePort(tb))
		return embedded.StartEtcd(tb.TempDir(), host, "127.0.0.1:"+strconv.Itoa(FreePort(tb)))
	})
	tb.Cleanup(e.Close)
	return host
}

// retryBind calls start again with new ports while it fails because a port
// FreePort gave was taken before the server bound it (another package's test
// binary picks from the same range), and fails the test on any other error.
func retryBind[T any](tb testing.TB, start func() (T, error)) T {
	tb.Helper()
	for attempt := 1; ; attempt++ {
		v, err := start()
		if err == nil {
			return v
		}
		if !strings.Contains(err.Error(), "address already in use") || attempt == 5 {
			tb.Fatalf("start etcd: %v", err)
		}
	}
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
