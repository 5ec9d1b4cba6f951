package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/bench"
)

// binaries finds what the end-to-end tests run: redis-server, mosquitto and
// Centrifugo. Centrifugo takes minutes to build, so the tests do not build
// it: they use CENTRIFUGO_BIN or the install `gomsg-bench peers
// --install-only` leaves in the cache, and fail, saying so, without one.
func binaries(t *testing.T) (redis, mosq, cent string) {
	t.Helper()
	var err error
	if redis, err = exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not on PATH (scripts/test.sh installs it): %v", err)
	}
	noop := func(string, ...any) {}
	if mosq, err = findMosquitto(t.Context(), os.Getenv("MOSQUITTO_BIN"), false, noop); err != nil {
		t.Fatalf("%v (scripts/test.sh installs it)", err)
	}
	if cent, err = findCentrifugo(t.Context(), os.Getenv("CENTRIFUGO_BIN"), false, noop); err != nil {
		t.Fatalf("%v; or point CENTRIFUGO_BIN at a Centrifugo v6 binary", err)
	}
	return redis, mosq, cent
}

// TestShortCompare runs the comparison's short mode for real — gomsg over
// gRPC, Centrifugo's memory engine and Mosquitto, 50 sessions, 2 s windows,
// one round, 200 idle sessions — and checks the table: a row per system
// with delivered/s above zero, latency and idle memory measured, every
// published message received exactly once by its session (no missing, no
// duplicate, no error, no disconnect), gomsg pushed NEED_ACK|NEED_OFFLINE,
// and the raw JSON of every step in the output directory.
func TestShortCompare(t *testing.T) {
	redis, mosq, cent := binaries(t)
	dir := t.TempDir()
	gomsg, err := BuildGomsg(t.Context(), "../..", dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Systems: []string{GomsgGRPC, CentrifugoMemory, Mosquitto}, Sessions: 50, IdleSessions: 200,
		Warmup: 500 * time.Millisecond, Duration: 2 * time.Second, Concurrency: 8, Rounds: 1, GomsgOffline: true,
		StepTimeout: 2 * time.Minute, Gomsg: gomsg, RedisServer: redis, Centrifugo: cent, Mosquitto: mosq,
		Out: filepath.Join(dir, "out"), Command: "go test -run TestShortCompare"}
	cmp, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	md := cmp.Markdown()
	rows := cmp.Rows()
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3:\n%s", len(rows), md)
	}
	for i, r := range rows {
		if r.System != cfg.Systems[i] {
			t.Errorf("row %d is %s, want %s", i, r.System, cfg.Systems[i])
		}
		if !r.HasDelivered || r.DeliveredPerSec.mean <= 0 || !r.HasLatency || r.P99.mean <= 0 || !r.HasIdle || !r.HasCPU {
			t.Errorf("%s: delivered/s %+v, p99 %+v, idle %v, cpu %v: want all measured, delivered/s and p99 above 0",
				r.System, r.DeliveredPerSec, r.P99, r.HasIdle, r.HasCPU)
		}
		if r.Pushed == 0 || r.Delivered != r.Pushed || r.Missing != 0 || r.Duplicates != 0 || r.Errors != 0 ||
			r.Disconnects != 0 || r.WrongTarget != 0 || len(r.Failed) != 0 {
			t.Errorf("%s: pushed %d, delivered %d, missing %d, dup %d, errors %d, disconnects %d, wrong %d, failed %v; want delivered = pushed > 0, the rest none",
				r.System, r.Pushed, r.Delivered, r.Missing, r.Duplicates, r.Errors, r.Disconnects, r.WrongTarget, r.Failed)
		}
		row := fmt.Sprintf("| %s | %.0f | ", labels[r.System], r.DeliveredPerSec.mean)
		if !strings.Contains(md, row) {
			t.Errorf("table has no row starting %q:\n%s", row, md)
		}
	}
	if g := rows[0].Guarantee; g != "at least once, ACKed: NEED_ACK|NEED_OFFLINE" {
		t.Errorf("gomsg's guarantee %q, want NEED_ACK|NEED_OFFLINE named", g)
	}
	if !strings.Contains(md, `NEED_ACK\|NEED_OFFLINE`) {
		t.Errorf("the table does not escape the options' | inside its cell:\n%s", md)
	}
	if m := rows[2].Idle; m.Process != "mosquitto" || m.HeapPerSession != 0 || !strings.Contains(md, "(RSS only)") {
		t.Errorf("Mosquitto idle %+v: want mosquitto's RSS only", m)
	}
	// Raw JSON per step, and the whole comparison.
	for _, st := range cmp.Steps {
		b, err := os.ReadFile(filepath.Join(cfg.Out, st.Report))
		if err != nil {
			t.Fatal(err)
		}
		var got Step
		if err := json.Unmarshal(b, &got); err != nil || got.System != st.System || got.Kind != st.Kind {
			t.Errorf("%s: %+v, %v; want the step %s %s", st.Report, got, err, st.System, st.Kind)
		}
	}
	if len(cmp.Steps) != 9 {
		t.Errorf("%d steps, want 9 (throughput, latency, idle × 3)", len(cmp.Steps))
	}
	for _, f := range []string{"comparison.json", "table.md", "gomsg-grpc/throughput-1/throughput.json"} {
		if _, err := os.Stat(filepath.Join(cfg.Out, f)); err != nil {
			t.Error(err)
		}
	}
	t.Logf("\n%s", md)
}

// TestMosquittoNoSubscriber: a publish to a topic no session subscribed to
// is a failed publish (PUBACK 0x10), not a success the bookkeeping would
// then count as missing.
func TestMosquittoNoSubscriber(t *testing.T) {
	_, mosq, _ := binaries(t)
	m, err := startMosquitto(t.Context(), mosquittoConfig{Bin: mosq, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.stop()
	p, err := m.openPool(t.Context(), 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer p.closeAll()
	pub, err := m.newPublisher(t.Context(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := pub.publish(ctx, topicOf("nobody"), encodePayload(nil, 1, 0, 1)); !errors.Is(err, errNoSubscribers) {
		t.Errorf("publish to a topic without a session: %v, want %v", err, errNoSubscribers)
	}
	if err := pub.publish(ctx, p.list[0].topic, encodePayload(nil, time.Now().UnixNano(), 0, 7)); err != nil {
		t.Errorf("publish to the session's topic: %v", err)
	}
}

func TestPayload(t *testing.T) {
	t.Parallel()
	b := encodePayload(nil, 1733490000123456789, 42, 9001)
	sent, target, seq, ok := decodePayload(b)
	if !ok || sent != 1733490000123456789 || target != 42 || seq != 9001 {
		t.Errorf("decode(%s) = %d %d %d %v", b, sent, target, seq, ok)
	}
	for _, bad := range []string{"", "[]", "[1,2]", "[1,2,3,4]", "[1,x,3]", "1,2,3", "[1,2,3"} {
		if _, _, _, ok := decodePayload([]byte(bad)); ok {
			t.Errorf("decode(%q) ok", bad)
		}
	}
}

// TestCheck feeds the bookkeeping a known mix of receipts.
func TestCheck(t *testing.T) {
	t.Parallel()
	p := &pool{list: []*conn{
		{idx: 0, got: map[int64]int32{1: 1, 2: 2, 9: 1}}, // 2 twice, 9 never published
		{idx: 1, got: map[int64]int32{4: 1}, wrong: 1},   // 4 was for session 0
	}}
	var r bench.LoadResult
	check(&r, p, [][]record{{{1, 0}, {2, 0}}, {{3, 1}, {4, 0}}})
	if r.Delivered != 5 || r.Missing != 2 || r.Duplicates != 1 || r.Unexpected != 1 || r.WrongTarget != 1 {
		t.Errorf("delivered %d missing %d dup %d unexpected %d wrong %d; want 5 2 1 1 1",
			r.Delivered, r.Missing, r.Duplicates, r.Unexpected, r.WrongTarget)
	}
}

func TestPublishError(t *testing.T) {
	t.Parallel()
	// PublishResponse{error: {code: 102, message: "unknown channel"}}
	e := []byte{0x08, 102, 0x12, 15}
	e = append(e, "unknown channel"...)
	resp := append([]byte{0x0a, byte(len(e))}, e...)
	if err := publishError(resp); err == nil || !strings.Contains(err.Error(), "102: unknown channel") {
		t.Errorf("error response: %v", err)
	}
	// PublishResponse{result: {…}}: field 2, no error.
	if err := publishError([]byte{0x12, 0x00}); err != nil {
		t.Errorf("result response: %v", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Systems: []string{Mosquitto}, Sessions: 1, Duration: time.Second, Concurrency: 1, Rounds: 1}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		systems []string
		want    string
	}{{[]string{"nats"}, `"nats" is not one of`}, {[]string{Mosquitto, Mosquitto}, "mosquitto twice"}, {nil, "none"}} {
		cfg := ok
		cfg.Systems = c.systems
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("systems %v: %v, want %q", c.systems, err, c.want)
		}
	}
}

// TestMarkdown renders a comparison of known steps: means with (min–max)
// over two rounds, the gomsg options' | escaped inside the notes cell (it
// would end the cell), a failed step named, a system without an idle step
// shown as not measured.
func TestMarkdown(t *testing.T) {
	t.Parallel()
	load := func(perSec, p99, cpu float64, missing int64) *bench.LoadResult {
		return &bench.LoadResult{Pushed: 10, Delivered: 10 - missing, Missing: missing, DeliveriesPerSec: perSec,
			Latency: bench.Percentiles{P50: p99 / 4, P99: p99}, CPUPerMsgWithBackUS: cpu, MsgOptions: "NEED_ACK|NEED_OFFLINE"}
	}
	cmp := &Comparison{Config: Config{Systems: []string{GomsgWS, Mosquitto}, Rounds: 2}, Steps: []Step{
		{System: GomsgWS, Kind: KindThroughput, Round: 1, Load: load(1000, 0, 200, 0)},
		{System: GomsgWS, Kind: KindThroughput, Round: 2, Load: load(3000, 0, 100, 0)},
		{System: GomsgWS, Kind: KindLatency, Round: 1, Load: load(1000, 8, 0, 0)},
		{System: GomsgWS, Kind: KindIdle, Memory: &bench.MemorySample{RSSPerSession: 2048, HeapPerSession: 1024, StackPerSession: 512}},
		{System: Mosquitto, Kind: KindThroughput, Round: 1, Load: &bench.LoadResult{Pushed: 5, Delivered: 5, DeliveriesPerSec: 500, MsgOptions: "MQTT"}},
		{System: Mosquitto, Kind: KindThroughput, Round: 2, Error: "mosquitto: exited"},
	}}
	md := cmp.Markdown()
	for _, want := range []string{
		"| gomsg, WebSocket | 2000 (1000–3000) | 2.00 ms | 8.0 ms | 2.0 (heap 1.0, stacks 0.5) | 150.0 (100.0–200.0) | at least once, ACKed: NEED_ACK\\|NEED_OFFLINE; 30 pushed, 30 delivered, missing 0,",
		"| Mosquitto, MQTT 5 QoS 1, persistent sessions | 500 | — | — | — | 0.0 | MQTT; 5 pushed, 5 delivered, missing 0, dup 0, errors 0, disconnects 0; **failed: throughput #2** |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}
