package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/carrier"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/testutil"
)

const (
	testSecret = "bench-test-secret-at-least-32-bytes"
	testAPIKey = "bench-test-api-key"
	testTopic  = "gomsg.tasks"
	// testBroadcastTopic is station's and carrier's default.
	testBroadcastTopic = "gomsg.broadcast"
)

// startCluster runs boat, station and carrier in-process on a real
// redis-server, an embedded etcd and an in-process Kafka broker.
func startCluster(t *testing.T) *Cluster {
	t.Helper()
	return startClusterAckWait(t, 5*time.Second)
}

// startClusterAckWait is startCluster with carrier's ack_wait set.
func startClusterAckWait(t *testing.T, ackWait time.Duration) *Cluster {
	t.Helper()
	r := testutil.StartRedis(t)
	etcd := testutil.StartEtcd(t)
	kafka := testutil.StartKafka(t, 4, testTopic, testBroadcastTopic)
	plat := platform.MustParse("ios,android")
	cfg := app.ClusterConfig{
		Services: []string{"boat", "station", "carrier"},
		Backends: app.Backends{RedisAddrs: []string{r.Addr}, KafkaBrokers: []string{kafka}, EtcdEndpoints: []string{etcd},
			TaskTopic: testTopic},
		Internal: app.InternalAuth{Token: "bench-internal-token-0123456789"},
		Station: app.StationOptions{JWTSecret: testSecret, APIKeys: apikey.Line(testAPIKey, []apikey.Scope{apikey.Push, apikey.Broadcast}, "bench"), Station: station.Config{
			PushGRPCAddr: "127.0.0.1:0", PushHTTPAddr: "", InternalAddr: "127.0.0.1:0", Platforms: plat,
			// The tool measures the cluster, not station's broadcast limit.
			BroadcastRate: 1e6}},
		Boat: boat.Config{ID: "boat-1", ClientAddr: "127.0.0.1:0", WSAddr: "127.0.0.1:0", MQTTAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0",
			ConnectRate: 1e6, ConnectRatePerIP: 1e6, MaxConnectionsPerIP: 1 << 20, MaxStreamsPerConnection: 1 << 20},
		Carrier: carrier.Config{Platforms: plat, AckWait: ackWait, Workers: 32},
		OpsAddr: "127.0.0.1:0",
	}
	c, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	return &Cluster{
		ClientAddr: c.Boat.ClientAddr(), WSAddr: c.Boat.WSAddr(), MQTTAddr: c.Boat.MQTTAddr(), PushAddr: c.Station.PushAddr(), RedisAddr: r.Addr,
		KafkaBrokers: []string{kafka}, Secret: testSecret, APIKey: testAPIKey, Platform: "ios",
		// One process holds every service here.
		Services: []Service{{Name: "cluster", OpsAddr: c.Ops.Addr()}},
	}
}

// metricValue reads one unlabelled sample from a /metrics page.
func metricValue(t *testing.T, ops, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == name {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// transports are the transports the session tests run over, with the
// streams per connection each uses (WebSocket: one session a connection).
var transports = []struct {
	name           string
	streamsPerConn int
}{{TransportGRPC, 2}, {TransportWS, 1}, {TransportMQTT, 1}}

// wsCloses is how many WebSocket sessions the boat serving ops has closed.
func wsCloses(t *testing.T, ops string) float64 {
	t.Helper()
	return metricSum(t, ops, "gomsg_boat_websocket_closes_total")
}

// waitWSCloses waits until the boat has closed want WebSocket sessions
// (after the tool closed them, the boat notices a moment later).
func waitWSCloses(t *testing.T, ops string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := wsCloses(t, ops)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("boat closed %v WebSocket sessions, want %v", got, want)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestShortRun runs the throughput scenario's short mode against an
// in-process cluster, over each transport, and checks the tool's
// bookkeeping: every pushed seq is received exactly once by its target
// session, and the report's counts agree with each other and with the
// station's own count of accepted messages. Over WebSocket every session was
// one of boat's WebSocket sessions; over gRPC none was. The WebSocket run
// pushes with NEED_OFFLINE too (--offline), and every message must arrive
// with the options asked for.
func TestShortRun(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testShortRun(t, tr.name, tr.streamsPerConn) })
	}
}

func testShortRun(t *testing.T, transport string, streamsPerConn int) {
	c := startCluster(t)
	const sessions = 300
	offline := transport == TransportWS
	wantOptions := "NEED_ACK"
	if offline {
		wantOptions = "NEED_ACK|NEED_OFFLINE"
	}
	rep, err := Run(t.Context(), Options{
		Scenario: ScenarioThroughput, Transport: transport, Sessions: []int{sessions}, StreamsPerConn: streamsPerConn, SourceSpread: 4, Offline: offline,
		Warmup: 500 * time.Millisecond, Duration: 2 * time.Second, Concurrency: 16,
		ConnectTimeout: 20 * time.Second,
		NewCluster:     func(context.Context) (*Cluster, bool, error) { return c, false, nil },
		Command:        "go test ./internal/bench -run TestShortRun",
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Load == nil {
		t.Fatalf("runs = %+v, want one load run", rep.Runs)
	}
	l := rep.Runs[0].Load
	if l.Sessions != sessions {
		t.Errorf("sessions = %d, want %d", l.Sessions, sessions)
	}
	if l.Pushed == 0 {
		t.Fatal("nothing was pushed")
	}
	if l.PushErrors != 0 || l.Missing != 0 || l.Duplicates != 0 || l.Unexpected != 0 || l.WrongTarget != 0 {
		t.Errorf("push errors %d, missing %d, duplicates %d, unexpected %d, wrong target %d; want all 0",
			l.PushErrors, l.Missing, l.Duplicates, l.Unexpected, l.WrongTarget)
	}
	if l.Delivered != l.Pushed {
		t.Errorf("delivered %d, pushed %d: want equal", l.Delivered, l.Pushed)
	}
	if l.MsgOptions != wantOptions || l.WrongOptions != 0 {
		t.Errorf("pushed with %q, %d received with other options; want %q, 0", l.MsgOptions, l.WrongOptions, wantOptions)
	}
	if l.Kickouts != 0 || l.Ended != 0 {
		t.Errorf("kickouts %d, streams ended %d during the run; want 0", l.Kickouts, l.Ended)
	}
	if accepted := metricValue(t, c.Services[0].OpsAddr, "gomsg_station_messages_accepted_total"); int64(accepted) != l.Pushed {
		t.Errorf("station accepted %v messages, report says %d pushed", accepted, l.Pushed)
	}
	if l.Latency.Count == 0 || int64(l.Latency.Count) > l.Delivered {
		t.Errorf("latency samples %d, delivered %d: want 0 < samples <= delivered", l.Latency.Count, l.Delivered)
	}
	if l.DeliveriesPerSec*l.WindowSeconds > float64(l.Delivered) {
		t.Errorf("%v deliveries/s over %vs exceed the %d delivered", l.DeliveriesPerSec, l.WindowSeconds, l.Delivered)
	}
	if _, ok := l.CPUSeconds["cluster"]; !ok {
		t.Errorf("cpu seconds = %v, want the cluster process", l.CPUSeconds)
	}
	md := rep.Markdown()
	if !strings.Contains(md, "| throughput | 300 | max | "+strconv.FormatInt(l.Pushed, 10)+" | "+strconv.FormatInt(l.Delivered, 10)+" |") {
		t.Errorf("markdown does not show the counts:\n%s", md)
	}
	if !strings.Contains(md, "Messages pushed with "+wantOptions+".") {
		t.Errorf("markdown does not say the options %s:\n%s", wantOptions, md)
	}
	if rep.Transport != transport || !strings.Contains(md, "device sessions over "+transport+",") {
		t.Errorf("report transport %q, want %q shown in the markdown:\n%s", rep.Transport, transport, md)
	}
	want := 0.0
	if transport == TransportWS {
		want = sessions
	}
	waitWSCloses(t, c.Services[0].OpsAddr, want)
}

// TestShortRunStuckClient runs TestShortRun's load with one session that
// reads its messages and never ACKs them: the other sessions' counts are
// exact (every seq pushed to them received once), the stuck session's
// receipts are counted apart and not as theirs, every push to it asked for
// an ACK, and boat kicks it out for not ACKing. Without reconnects it stays
// out, so that on a carrier whose workers wait for the ACK the others' stall
// ends after one ack_wait. The same over each transport.
func TestShortRunStuckClient(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testShortRunStuckClient(t, tr.name, tr.streamsPerConn) })
	}
}

func testShortRunStuckClient(t *testing.T, transport string, streamsPerConn int) {
	c := startClusterAckWait(t, time.Second)
	const sessions = 300
	rep, err := Run(t.Context(), Options{
		Scenario: ScenarioThroughput, Transport: transport, Sessions: []int{sessions}, StreamsPerConn: streamsPerConn, SourceSpread: 4,
		Warmup: 500 * time.Millisecond, Duration: 2 * time.Second, Concurrency: 16,
		ConnectTimeout: 20 * time.Second, StuckClients: 1,
		NewCluster: func(context.Context) (*Cluster, bool, error) { return c, false, nil },
		Command:    "go test ./internal/bench -run TestShortRunStuckClient",
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Load == nil {
		t.Fatalf("runs = %+v, want one load run", rep.Runs)
	}
	l := rep.Runs[0].Load
	o, st := l.Others, l.Stuck
	if l.StuckClients != 1 || o == nil || st == nil {
		t.Fatalf("stuck clients %d, others %+v, stuck %+v: want 1 and both groups", l.StuckClients, o, st)
	}
	if o.Sessions != sessions-1 || st.Sessions != 1 {
		t.Errorf("others %d sessions, stuck %d; want %d and 1", o.Sessions, st.Sessions, sessions-1)
	}
	if o.Pushed == 0 || st.Pushed == 0 {
		t.Fatalf("pushed %d to the others and %d to the stuck session; want both > 0", o.Pushed, st.Pushed)
	}
	if o.Delivered != o.Pushed || o.Missing != 0 || o.Duplicates != 0 || o.Unexpected != 0 || o.WrongTarget != 0 {
		t.Errorf("others: pushed %d, delivered %d, missing %d, dup %d, unexpected %d, wrong target %d; want delivered = pushed and the rest 0",
			o.Pushed, o.Delivered, o.Missing, o.Duplicates, o.Unexpected, o.WrongTarget)
	}
	if o.Kickouts != 0 || o.Ended != 0 {
		t.Errorf("others: kickouts %d, streams ended %d; want 0", o.Kickouts, o.Ended)
	}
	if st.Delivered == 0 || st.NeedAck != st.Delivered || st.Unexpected != 0 || st.WrongTarget != 0 {
		t.Errorf("stuck: received %d, of them NEED_ACK %d, unexpected %d, wrong target %d; want > 0, all NEED_ACK, 0, 0",
			st.Delivered, st.NeedAck, st.Unexpected, st.WrongTarget)
	}
	if st.Kickouts != 1 || st.Ended != 1 || st.Reconnects != 0 {
		t.Errorf("stuck: kickouts %d, streams ended %d, reconnects %d; want 1, 1, 0 (kicked for not ACKing)", st.Kickouts, st.Ended, st.Reconnects)
	}
	if l.PushErrors != 0 || l.Pushed != o.Pushed+st.Pushed || l.Delivered != o.Delivered+st.Delivered {
		t.Errorf("all: pushed %d (errors %d), delivered %d; want %d+%d pushed, %d+%d delivered, no errors",
			l.Pushed, l.PushErrors, l.Delivered, o.Pushed, st.Pushed, o.Delivered, st.Delivered)
	}
	if accepted := metricValue(t, c.Services[0].OpsAddr, "gomsg_station_messages_accepted_total"); int64(accepted) != l.Pushed {
		t.Errorf("station accepted %v messages, report says %d pushed", accepted, l.Pushed)
	}
	if o.DeliveriesPerSec != l.DeliveriesPerSec || o.DeliveriesPerSec*l.WindowSeconds > float64(o.Delivered) {
		t.Errorf("others %v delivered/s, run %v acked deliveries/s over %vs, others delivered %d: want equal rates within the count",
			o.DeliveriesPerSec, l.DeliveriesPerSec, l.WindowSeconds, o.Delivered)
	}
	if o.Latency.Count == 0 || int64(o.Latency.Count) > o.Delivered || int64(st.Latency.Count) > st.Delivered ||
		l.Latency.Count != o.Latency.Count+st.Latency.Count {
		t.Errorf("latency samples: others %d (delivered %d), stuck %d (received %d), all %d",
			o.Latency.Count, o.Delivered, st.Latency.Count, st.Delivered, l.Latency.Count)
	}
	md := rep.Markdown()
	row := fmt.Sprintf("| throughput | 1 | %d | %d | %d | ", sessions-1, o.Pushed, o.Delivered)
	if !strings.Contains(md, row) || !strings.Contains(md, fmt.Sprintf("| %d | %d | %d | %d | 1 | 0 |\n", st.Pushed, st.Delivered, st.NeedAck, st.Missing)) {
		t.Errorf("markdown does not show the stuck split (want %q):\n%s", row, md)
	}
}

// TestStuckClientReconnects checks that a stuck session with reconnects
// stays stuck: boat kicks it for not ACKing, it connects again, receives
// more and is kicked again. The other session's counts stay exact. The same
// over each transport.
func TestStuckClientReconnects(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testStuckClientReconnects(t, tr.name) })
	}
}

func testStuckClientReconnects(t *testing.T, transport string) {
	c := startClusterAckWait(t, 300*time.Millisecond)
	addr := c.ClientAddr
	switch transport {
	case TransportWS:
		addr = c.WSAddr
	case TransportMQTT:
		addr = c.MQTTAddr
	}
	p, err := openSessions(t.Context(), openConfig{Transport: transport, ClientAddr: addr, Secret: c.Secret, Platform: c.Platform,
		UIDPrefix: "reconnect-", N: 2, Timeout: 20 * time.Second, WaitReady: true, Stuck: 1, StuckReconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	res, err := runLoad(t.Context(), p, LoadConfig{PushAddr: c.PushAddr, APIKey: c.APIKey, Platform: c.Platform,
		Rate: 10, Concurrency: 4, Warmup: 0, Duration: 3 * time.Second, Services: c.Services})
	if err != nil {
		t.Fatal(err)
	}
	o, st := res.Others, res.Stuck
	if o == nil || st == nil {
		t.Fatalf("others %+v, stuck %+v: want both", o, st)
	}
	if o.Pushed == 0 || o.Delivered != o.Pushed || o.Missing != 0 || o.Duplicates != 0 || o.Kickouts != 0 || o.Ended != 0 {
		t.Errorf("others: pushed %d, delivered %d, missing %d, dup %d, kickouts %d, ended %d; want delivered = pushed > 0, rest 0",
			o.Pushed, o.Delivered, o.Missing, o.Duplicates, o.Kickouts, o.Ended)
	}
	if st.Kickouts < 2 || st.Reconnects < 2 || st.Delivered < 2 || st.NeedAck != st.Delivered {
		t.Errorf("stuck: kickouts %d, reconnects %d, received %d (NEED_ACK %d); want ≥ 2 kicks and reconnects, ≥ 2 received, all NEED_ACK",
			st.Kickouts, st.Reconnects, st.Delivered, st.NeedAck)
	}
	if transport == TransportWS {
		// Every kick closed one of the stuck session's WebSockets.
		if got := metricSum(t, c.Services[0].OpsAddr, `gomsg_boat_websocket_closes_total{code="4103"}`); got < float64(st.Kickouts) {
			t.Errorf("boat closed %v WebSockets with 4103 (ACK_TIMEOUT), want at least the %d kickouts", got, st.Kickouts)
		}
	}
}

// metricSum adds up the samples of name (every label set) on a /metrics
// page; name may include labels to pick one. 0 when there is none.
func metricSum(t *testing.T, ops, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + ops + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(k, "#") || !(k == name || strings.HasPrefix(k, name+"{")) {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatal(err)
		}
		sum += f
	}
	return sum
}

// TestCheckCounts feeds the bookkeeping a known mix of receipts.
func TestCheckCounts(t *testing.T) {
	t.Parallel()
	mk := func(idx int, got map[int64]int32, wrong int) *session {
		return &session{idx: idx, got: got, wrong: wrong}
	}
	p := &sessions{list: []*session{
		mk(0, map[int64]int32{1: 1, 2: 2, 9: 1}, 0), // 2 twice, 9 never pushed
		mk(1, map[int64]int32{4: 1}, 1),             // 4 was for session 0
	}}
	records := [][]pushed{{{seq: 1, target: 0}, {seq: 2, target: 0}}, {{seq: 3, target: 1}, {seq: 4, target: 0}}}
	var r LoadResult
	r.check(p, records)
	want := LoadResult{Delivered: 5, Missing: 2, Duplicates: 1, Unexpected: 1, WrongTarget: 1}
	if r.Delivered != want.Delivered || r.Missing != want.Missing || r.Duplicates != want.Duplicates ||
		r.Unexpected != want.Unexpected || r.WrongTarget != want.WrongTarget {
		t.Errorf("check = delivered %d missing %d dup %d unexpected %d wrong %d; want %d %d %d %d %d",
			r.Delivered, r.Missing, r.Duplicates, r.Unexpected, r.WrongTarget,
			want.Delivered, want.Missing, want.Duplicates, want.Unexpected, want.WrongTarget)
	}
}

func TestParseSample(t *testing.T) {
	t.Parallel()
	page := `# HELP process_cpu_seconds_total x
process_cpu_seconds_total 12.5
process_resident_memory_bytes 1.048576e+06
go_memstats_heap_inuse_bytes 4096
go_goroutines 7
go_memstats_stack_inuse_bytes 8192
go_memstats_heap_inuse_bytes_other 1
`
	s, err := parseSample(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if s != (Sample{CPUSeconds: 12.5, RSSBytes: 1 << 20, HeapInuse: 4096, Goroutines: 7, StackInuse: 8192}) {
		t.Errorf("sample = %+v", s)
	}
	if _, err := parseSample(strings.NewReader("go_goroutines 1\n")); err == nil {
		t.Error("a page without the process metrics parsed")
	}
}

// TestProcSyscalls: a process's count grows by at least the writes it
// makes.
func TestProcSyscalls(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "w"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before, err := procSyscalls(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	const writes = 200
	for range writes {
		if _, err := f.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	after, err := procSyscalls(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < writes {
		t.Errorf("system calls went from %v to %v over %d writes, want at least %d more", before, after, writes, writes)
	}
	if _, err := procSyscalls(-1); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	v := make([]int64, 1000)
	for i := range v {
		v[len(v)-1-i] = int64(i+1) * int64(time.Millisecond)
	}
	p := percentilesOf(v)
	if p.Count != 1000 || p.P50 != 500 || p.P99 != 990 || p.P999 != 999 || p.Max != 1000 {
		t.Errorf("percentiles = %+v", p)
	}
}

// TestStagesSplitAtStation: each latency splits at station's accept
// timestamp; a timestamp read early by its millisecond truncation (or a
// clock step) never gives a negative part or one above the total; slices
// hold the messages sent in them.
func TestStagesSplitAtStation(t *testing.T) {
	t.Parallel()
	ms := int64(time.Millisecond)
	t0 := time.Unix(1000, 0)
	base := t0.UnixNano()
	var l timedLatencies
	// sent at (ms from t0), total latency (ms), station's timestamp (ms from t0)
	for i, r := range [][3]int64{{0, 10, 2}, {100, 40, 130}, {600, 8, 600}, {700, 5, 690}, {900, 3, 950}} {
		l.add(i, base+r[0]*ms, r[1]*ms, (base/ms)+r[2])
	}
	st := l.stagesBetween(t0, t0.Add(time.Second))
	if st.Total.Count != 5 || st.Total.Max != 40 {
		t.Errorf("total = %+v, want 5 messages, max 40 ms", st.Total)
	}
	// to station: 2, 30, 0, 0 (timestamp 10 ms before the send), 3 (capped at the total)
	if st.ToStation.Max != 30 || st.ToStation.P50 != 2 {
		t.Errorf("to station = %+v, want max 30 ms, p50 2 ms", st.ToStation)
	}
	// after station: 8, 10, 8, 5, 0
	if st.AfterStation.Max != 10 || st.AfterStation.P50 != 8 {
		t.Errorf("after station = %+v, want max 10 ms, p50 8 ms", st.AfterStation)
	}
	sl := l.sliced(t0, t0.Add(time.Second), 500*time.Millisecond)
	if len(sl) != 2 || sl[0].FromSeconds != 0 || sl[1].FromSeconds != 0.5 {
		t.Fatalf("slices = %+v, want two, from 0 and 0.5 s", sl)
	}
	if sl[0].Total.Count != 2 || sl[0].Total.Max != 40 || sl[1].Total.Count != 3 || sl[1].Total.Max != 8 {
		t.Errorf("slices: %+v and %+v, want 2 messages (max 40 ms) and 3 (max 8 ms)", sl[0].Total, sl[1].Total)
	}
}

// TestOfflineSpawn runs the throughput scenario with --offline against a
// spawned cluster (as gomsg-bench throughput --spawn --offline does): every
// pushed seq arrives exactly once at its target, each with NEED_ACK and
// NEED_OFFLINE as asked, and the report names the options in its JSON and
// its Markdown.
func TestOfflineSpawn(t *testing.T) {
	rs, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found on PATH (run scripts/test.sh, which installs it): %v", err)
	}
	dir := t.TempDir()
	bin, err := BuildGomsg(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(t.Context(), Options{
		Scenario: ScenarioThroughput, Sessions: []int{100}, SourceSpread: 4, Offline: true,
		Warmup: 500 * time.Millisecond, Duration: 2 * time.Second, Concurrency: 8, ConnectTimeout: 30 * time.Second,
		NewCluster: func(ctx context.Context) (*Cluster, bool, error) {
			c, err := Spawn(ctx, SpawnConfig{Gomsg: bin, RedisServer: rs, LogDir: filepath.Join(dir, "logs")})
			return c, true, err
		},
		Command: "gomsg-bench throughput --spawn --offline --sessions 100",
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Load == nil {
		t.Fatalf("runs = %+v, want one load run", rep.Runs)
	}
	l := rep.Runs[0].Load
	if l.Pushed == 0 || l.Delivered != l.Pushed || l.PushErrors != 0 || l.Missing != 0 || l.Duplicates != 0 ||
		l.Unexpected != 0 || l.WrongTarget != 0 {
		t.Errorf("pushed %d (errors %d), delivered %d, missing %d, dup %d, unexpected %d, wrong target %d; want delivered = pushed > 0, the rest 0",
			l.Pushed, l.PushErrors, l.Delivered, l.Missing, l.Duplicates, l.Unexpected, l.WrongTarget)
	}
	if l.MsgOptions != "NEED_ACK|NEED_OFFLINE" || l.WrongOptions != 0 {
		t.Errorf("pushed with %q, %d received with other options; want NEED_ACK|NEED_OFFLINE, 0", l.MsgOptions, l.WrongOptions)
	}
	// Every spawned process's system calls are counted; the boat writes
	// each message to its device, so it makes at least one per message.
	for _, name := range []string{"boat", "station", "carrier", "backends", "redis", "tool"} {
		if l.SyscallsPerMsg[name] <= 0 {
			t.Errorf("system calls per message = %v, want %s's above 0", l.SyscallsPerMsg, name)
		}
	}
	if l.SyscallsPerMsg["boat"] < 1 {
		t.Errorf("boat made %.2f system calls per message, want at least the one write of each to its device", l.SyscallsPerMsg["boat"])
	}
	j, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(j), `"msg_options":"NEED_ACK|NEED_OFFLINE"`) {
		t.Errorf("JSON report does not name the options: %s", j)
	}
	if md := rep.Markdown(); !strings.Contains(md, "Messages pushed with NEED_ACK|NEED_OFFLINE.") {
		t.Errorf("markdown does not name the options:\n%s", md)
	}
}

// TestOfflineOnlyWherePushed: --offline is refused where the scenario
// pushes nothing to sessions (idle) or broadcasts to rooms, whose messages
// are never stored (fanout), rather than ignored.
func TestOfflineOnlyWherePushed(t *testing.T) {
	t.Parallel()
	for _, sc := range []string{ScenarioIdle, ScenarioFanout} {
		_, err := Run(t.Context(), Options{Scenario: sc, Sessions: []int{1}, Offline: true,
			NewCluster: func(context.Context) (*Cluster, bool, error) {
				t.Errorf("%s: a cluster was asked for", sc)
				return nil, false, errors.New("no cluster")
			}})
		if err == nil || !strings.Contains(err.Error(), "offline: only throughput") {
			t.Errorf("%s with offline: err = %v, want the offline refusal", sc, err)
		}
	}
}
