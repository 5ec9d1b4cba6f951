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
	ctx := t.Context()
	// The previous run's registration, still leased.
	cli, lease := holdBoatID(t, etcd, "b-ready", "127.0.0.1:1", 60)
	c := startStationAndBoat(t, etcd, boat.Config{ID: "b-ready", ClientAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0"})
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
	if _, err := cli.Revoke(ctx, lease); err != nil {
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
	ctx := t.Context()
	internal := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	cli, lease := holdBoatID(t, etcd, "b-crashed", internal, 3600) // the crashed run's: far longer than the test waits
	c := startStationAndBoat(t, etcd, boat.Config{ID: "b-crashed", ClientAddr: "127.0.0.1:0", InternalAddr: internal})
	testutil.WaitFor(t, 10*time.Second, func() error { return c.Boat.Serving() })
	ttl, err := cli.TimeToLive(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Fatalf("the crashed run's lease has %ds left, want it revoked", ttl.TTL)
	}
	resp, err := cli.Get(ctx, discovery.BoatKey("/gomsg", "b-crashed"))
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != internal || resp.Kvs[0].Lease == int64(lease) {
		t.Fatalf("registration after the take-over: %v, %v; want %s under a new lease", resp, err, internal)
	}
}

// startStationAndBoat runs station and a boat of b on etcd, with the ops
// port on.
func startStationAndBoat(t *testing.T, etcd string, b boat.Config) *app.Cluster {
	t.Helper()
	cfg := app.ClusterConfig{
		Services: []string{"station", "boat"},
		Backends: app.Backends{KafkaBrokers: []string{testutil.StartKafkaBroker(t, 1, "gomsg.tasks").Addr},
			EtcdEndpoints: []string{etcd}, RedisAddrs: []string{testutil.StartRedis(t).Addr}, CreateTopics: true},
		Internal: app.InternalAuth{Token: "readiness-internal-token-0123456789"},
		Station: app.StationOptions{JWTSecret: "readiness-test-secret-at-least-32-bytes",
			APIKeys: apikey.Line("readiness-test-key", []apikey.Scope{apikey.Push}, "readiness"),
			Station: station.Config{PushGRPCAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0"}},
		Boat:    b,
		OpsAddr: "127.0.0.1:0",
	}
	c, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// holdBoatID registers boat id → addr in etcd under a lease of ttl seconds
// of its own, as a previous run of the boat would have.
func holdBoatID(t *testing.T, etcd, id, addr string, ttl int64) (*clientv3.Client, clientv3.LeaseID) {
	t.Helper()
	cli := testutil.EtcdClient(t, etcd)
	lease, err := cli.Grant(t.Context(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), discovery.BoatKey("/gomsg", id), addr, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	return cli, lease.ID
}
