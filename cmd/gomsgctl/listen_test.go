package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/carrier"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// `gomsgctl listen` against a whole cluster in-process: it prints the pushed
// messages and the room broadcast as JSON lines, reconnects after a kickout
// by request (getting what was pushed meanwhile), and exits after --count.
func TestListen(t *testing.T) {
	t.Parallel()
	c, _ := startListenCluster(t)
	pushAddr := c.Station.PushAddr()
	ctlOK := func(args ...string) string {
		t.Helper()
		code, out, errOut := ctl(t, "", append(args[:1:1], append([]string{"--push-addr", pushAddr, "--api-key", key}, args[1:]...)...)...)
		if code != 0 {
			t.Fatalf("gomsgctl %v: exit %d: %s", args, code, errOut)
		}
		return out
	}

	var out, errOut testutil.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"listen", "--addr", c.Boat.ClientAddr(), "--uid", "lou",
			"--platform", "web", "--jwt-secret", secret, "--room", "lobby", "--count", "3", "--timeout", "30s"},
			strings.NewReader(""), &out, &errOut)
	}()
	waitStderr := func(want string, n int) {
		t.Helper()
		testutil.WaitFor(t, 15*time.Second, func() error {
			if got := strings.Count(errOut.String(), want); got < n {
				return fmt.Errorf("stderr has %d %q, want %d:\n%s", got, want, n, errOut.String())
			}
			return nil
		})
	}
	waitStderr("joined room lobby", 1)
	waitStderr("ready: offline messages delivered", 1)
	ctlOK("push", "--uid", "lou", "--ack", "--offline", "first")
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), `"first"`) {
			return fmt.Errorf("stdout: %q", out.String())
		}
		return nil
	})
	// A kickout by request: listen reconnects and gets what came meanwhile.
	push := pushClient(t, pushAddr, key)
	if _, err := push.Kickout(context.Background(), &pushpb.KickoutRequest{Uid: "lou"}); err != nil {
		t.Fatal(err)
	}
	ctlOK("push", "--uid", "lou", "--ack", "--offline", "second")
	waitStderr("ready: offline messages delivered", 2)
	if !strings.Contains(errOut.String(), "disconnected: gomsg client: kicked out: BY_REQUEST") {
		t.Fatalf("stderr does not tell the kickout:\n%s", errOut.String())
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), `"second"`) {
			return fmt.Errorf("stdout: %q", out.String())
		}
		return nil
	})
	// The room was joined again on the new session.
	testutil.WaitFor(t, 10*time.Second, func() error {
		resp, err := push.RoomOnline(context.Background(), &pushpb.RoomOnlineRequest{Room: "lobby"})
		if err != nil || resp.GetMembers() != 1 {
			return fmt.Errorf("lobby members %d: %v", resp.GetMembers(), err)
		}
		return nil
	})
	ctlOK("broadcast", "--room", "lobby", "to the lobby")
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("listen exited %d:\n%s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("listen did not exit after --count 3:\n%s", errOut.String())
	}
	var lines []printed
	var bodies []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var p printed
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		lines = append(lines, p)
		bodies = append(bodies, fmt.Sprint(p.Room, ":", p.Body))
	}
	if want := []string{":first", ":second", "lobby:to the lobby"}; !slices.Equal(bodies, want) {
		t.Fatalf("printed %q, want %q", bodies, want)
	}
	if !slices.Equal(lines[0].Options, []string{"NEED_ACK", "NEED_OFFLINE"}) || lines[0].Seq == 0 || lines[0].Timestamp == 0 {
		t.Fatalf("first line %+v", lines[0])
	}
}

// pushClient is a Push API client with key.
func pushClient(t *testing.T, addr, key string) pushpb.PushClient {
	t.Helper()
	conn, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pushpb.NewPushClient(auth.WithBearer(conn, key))
}

// listen --pull: a device in pull mode prints its stored messages as pulled
// (none is replayed), ACKing each page with the next Pull, so the store is
// empty after; live messages are printed as they come.
func TestListenPull(t *testing.T) {
	t.Parallel()
	c, r := startListenCluster(t)
	pushAddr := c.Station.PushAddr()
	for i := range 5 {
		if code, _, errOut := ctl(t, "", "push", "--push-addr", pushAddr, "--api-key", key, "--uid", "pam", "--platform", "web",
			"--offline", fmt.Sprint("stored-", i)); code != 0 {
			t.Fatalf("push: exit %d: %s", code, errOut)
		}
	}
	rdb := r.Client(t)
	stored := func() int64 {
		n, err := rdb.ZCard(context.Background(), rkeys.Of(rdb).Offline("pam", "web")).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	testutil.WaitFor(t, 15*time.Second, func() error {
		if n := stored(); n != 5 {
			return fmt.Errorf("%d stored, want 5", n)
		}
		return nil
	})
	var out, errOut testutil.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"listen", "--addr", c.Boat.ClientAddr(), "--uid", "pam",
			"--platform", "web", "--jwt-secret", secret, "--pull", "2", "--count", "6", "--timeout", "30s"},
			strings.NewReader(""), &out, &errOut)
	}()
	testutil.WaitFor(t, 15*time.Second, func() error {
		if !strings.Contains(errOut.String(), "pulled: 5 offline messages") {
			return fmt.Errorf("stderr:\n%s", errOut.String())
		}
		return nil
	})
	if n := stored(); n != 0 {
		t.Fatalf("%d stored after listen pulled them all, want 0", n)
	}
	if code, _, e := ctl(t, "", "push", "--push-addr", pushAddr, "--api-key", key, "--uid", "pam", "live"); code != 0 {
		t.Fatalf("push: exit %d: %s", code, e)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("listen exited %d:\n%s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("listen did not exit after --count 6:\n%s", errOut.String())
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var p printed
		if err := json.Unmarshal([]byte(l), &p); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		got = append(got, fmt.Sprint(p.Pulled, ":", p.Body))
	}
	want := []string{"true:stored-0", "true:stored-1", "true:stored-2", "true:stored-3", "true:stored-4", "false:live"}
	if !slices.Equal(got, want) {
		t.Fatalf("printed %q, want %q", got, want)
	}
	if code := run(context.Background(), []string{"listen", "--uid", "x", "--platform", "web", "--pull", "101"},
		strings.NewReader(""), &out, &errOut); code == 0 {
		t.Fatal("listen --pull 101: exit 0, want a usage error")
	}
}

// The credentials of the cluster startListenCluster runs.
const secret, key, topic = "listen-test-secret-at-least-32-bytes", "listen-test-key", "gomsg.tasks"

// startListenCluster runs boat, station and carrier in process on their own
// Redis (returned), Kafka and etcd, stopped when the test ends.
func startListenCluster(t *testing.T) (*app.Cluster, *testutil.Redis) {
	t.Helper()
	plat := platform.MustParse("ios,android,web")
	r := testutil.StartRedis(t)
	cfg := app.ClusterConfig{
		Services: []string{"boat", "station", "carrier"},
		Backends: app.Backends{KafkaBrokers: []string{testutil.StartKafkaBroker(t, 2, topic).Addr},
			EtcdEndpoints: []string{testutil.StartEtcd(t)}, RedisAddrs: []string{r.Addr},
			TaskTopic: topic, TaskPartitions: 2, CreateTopics: true},
		Internal: app.InternalAuth{Token: "listen-internal-token-0123456789"},
		Station: app.StationOptions{JWTSecret: secret, APIKeys: apikey.Line(key, []apikey.Scope{apikey.All}, "listen"),
			Station: station.Config{PushGRPCAddr: "127.0.0.1:0", PushHTTPAddr: "127.0.0.1:0",
				InternalAddr: "127.0.0.1:0", Platforms: plat, BroadcastRate: 1e6}},
		Boat: boat.Config{ID: "boat-1", ClientAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0",
			ConnectRate: 1e6, ConnectRatePerIP: 1e6},
		Carrier: carrier.Config{Platforms: plat, AckWait: 5 * time.Second, Workers: 4},
	}
	c, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c, r
}

// listen --count 1 on a stored message, three times (the README's offline
// example): each run prints the message and ACKs it before it exits, so the
// store is empty after it and the next run prints the next message alone.
func TestListenCountAcksBeforeExit(t *testing.T) {
	t.Parallel()
	c, r := startListenCluster(t)
	pushAddr := c.Station.PushAddr()
	rdb := r.Client(t)
	storedIs := func(want int64) {
		t.Helper()
		testutil.WaitFor(t, 15*time.Second, func() error {
			n, err := rdb.ZCard(context.Background(), rkeys.Of(rdb).Offline("oli", "ios")).Result()
			if err != nil || n != want {
				return fmt.Errorf("%d stored, want %d (%v)", n, want, err)
			}
			return nil
		})
	}
	for i := range 3 {
		if code, _, errOut := ctl(t, "", "push", "--push-addr", pushAddr, "--api-key", key, "--uid", "oli", "--platform", "ios",
			"--ack", "--offline", fmt.Sprint("stored-", i)); code != 0 {
			t.Fatalf("push: exit %d: %s", code, errOut)
		}
		storedIs(1)
		var out, errOut testutil.SyncBuffer
		if code := run(context.Background(), []string{"listen", "--addr", c.Boat.ClientAddr(), "--uid", "oli",
			"--platform", "ios", "--jwt-secret", secret, "--count", "1", "--timeout", "30s"},
			strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("listen %d: exit %d:\n%s", i, code, errOut.String())
		}
		var p printed
		if err := json.Unmarshal([]byte(strings.TrimSpace(out.String())), &p); err != nil || p.Body != fmt.Sprint("stored-", i) {
			t.Fatalf("listen %d printed %q (%v), want stored-%d alone", i, out.String(), err, i)
		}
		storedIs(0)
	}
}

// A --push-addr that is another of the cluster's ports, or a key the
// station does not know, is explained in a line that names --push-addr (or
// the key's sources), not left as a bare gRPC error.
func TestWrongPushAddrIsExplained(t *testing.T) {
	t.Parallel()
	c, _ := startListenCluster(t)
	for _, tc := range []struct {
		name, addr, key, want string
	}{
		{"boat's client port", c.Boat.ClientAddr(), key, "serves no Push API"},
		{"station's internal port", c.Station.InternalAddr(), key, "an internal port of the cluster"},
		{"the HTTP/JSON API", c.Station.PushHTTPAddr(), key, "speaks HTTP/1.1"},
		{"a key station does not know", c.Station.PushAddr(), "not-a-key", "station does not know the key sent"},
	} {
		code, _, stderr := ctl(t, "", "push", "--push-addr", tc.addr, "--api-key", tc.key, "--uid", "alice", "hi")
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and %q", tc.name, code, stderr, tc.want)
		}
	}
	// The right address and key: no hint.
	code, _, stderr := ctl(t, "", "push", "--push-addr", c.Station.PushAddr(), "--api-key", key, "--uid", "alice", "hi")
	if code != 0 || stderr != "" {
		t.Fatalf("push: exit %d, stderr %q", code, stderr)
	}
}
