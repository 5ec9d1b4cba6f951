package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/discovery"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/testutil"
)

// A restarted boat waits for its previous run's lease to free its id before
// it serves; meanwhile /readyz — also as the Helm chart asks it with TLS on,
// every backend excluded — must say not ready, as grpc.health.v1 does, or a
// probe routes devices to a boat that refuses them. Once the id is free it
// serves and is ready.
func TestBoatNotReadyUntilItServes(t *testing.T) {
	t.Parallel()
	etcd := testutil.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	// The previous run's registration, still leased.
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, discovery.BoatKey("/gomsg", "b-ready"), "127.0.0.1:1", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	cfg := app.ClusterConfig{
		Services: []string{"station", "boat"},
		Backends: app.Backends{KafkaBrokers: []string{testutil.StartKafkaBroker(t, 1, "gomsg.tasks").Addr},
			EtcdEndpoints: []string{etcd}, RedisAddrs: []string{testutil.StartRedis(t).Addr}, CreateTopics: true},
		Internal: app.InternalAuth{Token: "readiness-internal-token-0123456789"},
		Station: app.StationOptions{JWTSecret: "readiness-test-secret-at-least-32-bytes",
			APIKeys: apikey.Line("readiness-test-key", []apikey.Scope{apikey.Push}, "readiness"),
			Station: station.Config{PushGRPCAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0"}},
		Boat:    boat.Config{ID: "b-ready", ClientAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0"},
		OpsAddr: "127.0.0.1:0",
	}
	c, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + c.Ops.Addr() + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/readyz", "/readyz?exclude=redis&exclude=kafka&exclude=etcd"} {
		testutil.WaitFor(t, 10*time.Second, func() error {
			if code, body := get(path); code != http.StatusServiceUnavailable || !strings.Contains(body, "not registered in etcd yet") {
				return fmt.Errorf("%s while the id is held: %d %q, want 503 saying the boat is not registered", path, code, body)
			}
			return nil
		})
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if code, body := get("/readyz?exclude=redis&exclude=kafka&exclude=etcd"); code != http.StatusOK {
			return fmt.Errorf("after the id was freed: %d %q, want 200", code, body)
		}
		return nil
	})
	if err := c.Boat.Serving(); err != nil {
		t.Fatalf("ready but Serving says %v", err)
	}
}

// A boat restarted after a crash finds its id still registered, under the
// address it now listens on: the crashed run no longer listens there, so
// its lease is revoked at once and the restarted boat serves within
// moments instead of waiting out the lease.
func TestRestartedBoatTakesOverItsCrashedRun(t *testing.T) {
	t.Parallel()
	etcd := testutil.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := t.Context()
	internal := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	lease, err := cli.Grant(ctx, 3600) // the crashed run's: far longer than the test waits
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, discovery.BoatKey("/gomsg", "b-crashed"), internal, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	cfg := app.ClusterConfig{
		Services: []string{"station", "boat"},
		Backends: app.Backends{KafkaBrokers: []string{testutil.StartKafkaBroker(t, 1, "gomsg.tasks").Addr},
			EtcdEndpoints: []string{etcd}, RedisAddrs: []string{testutil.StartRedis(t).Addr}, CreateTopics: true},
		Internal: app.InternalAuth{Token: "readiness-internal-token-0123456789"},
		Station: app.StationOptions{JWTSecret: "readiness-test-secret-at-least-32-bytes",
			APIKeys: apikey.Line("readiness-test-key", []apikey.Scope{apikey.Push}, "readiness"),
			Station: station.Config{PushGRPCAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0"}},
		Boat: boat.Config{ID: "b-crashed", ClientAddr: "127.0.0.1:0", InternalAddr: internal},
	}
	c, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	testutil.WaitFor(t, 10*time.Second, func() error { return c.Boat.Serving() })
	ttl, err := cli.TimeToLive(ctx, lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Fatalf("the crashed run's lease has %ds left, want it revoked", ttl.TTL)
	}
	resp, err := cli.Get(ctx, discovery.BoatKey("/gomsg", "b-crashed"))
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != internal || resp.Kvs[0].Lease == int64(lease.ID) {
		t.Fatalf("registration after the take-over: %v, %v; want %s under a new lease", resp, err, internal)
	}
}
