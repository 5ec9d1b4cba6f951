package bench

import (
	"context"
	"crypto/tls"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// TestCompareTLSSpawn runs the --compare-tls mode at a tiny size against
// spawned processes (as gomsg-bench --spawn does): a plaintext and a TLS
// cluster each deliver every pushed seq exactly once to its target, the TLS
// cluster refuses plaintext sessions and Push calls, and the report holds
// both modes side by side. The same with the sessions over WebSocket (ws,
// then wss): the spawned boats serve it on the free port the tool gave them.
func TestCompareTLSSpawn(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testCompareTLSSpawn(t, tr.name) })
	}
}

func testCompareTLSSpawn(t *testing.T, transport string) {
	rs, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found on PATH (run scripts/test.sh, which installs it): %v", err)
	}
	dir := t.TempDir()
	bin, err := BuildGomsg(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := MakeCerts(filepath.Join(dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	plain := SpawnConfig{Gomsg: bin, RedisServer: rs, LogDir: filepath.Join(dir, "logs-plain")}
	withTLS := plain
	withTLS.LogDir, withTLS.TLS = filepath.Join(dir, "logs-tls"), certs
	probed := 0
	rep, err := Run(t.Context(), Options{
		Scenario: ScenarioThroughput, Transport: transport, Sessions: []int{50}, SourceSpread: 4,
		Warmup: 500 * time.Millisecond, Duration: 2 * time.Second, Concurrency: 8,
		ConnectTimeout: 30 * time.Second, CompareTLS: true, Rounds: 1,
		NewCluster: func(ctx context.Context) (*Cluster, bool, error) {
			c, err := Spawn(ctx, plain)
			return c, true, err
		},
		TLSCluster: func(ctx context.Context) (*Cluster, bool, error) {
			c, err := Spawn(ctx, withTLS)
			if err != nil {
				return nil, false, err
			}
			probed++
			refusesPlaintext(t, c)
			return c, true, nil
		},
		Command: "go test ./internal/bench -run TestCompareTLSSpawn",
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if probed != 1 {
		t.Errorf("TLS cluster started %d times, want 1", probed)
	}
	if len(rep.Runs) != 2 {
		t.Fatalf("runs = %+v, want a plaintext and a TLS run", rep.Runs)
	}
	for i, mode := range []string{ModePlain, ModeTLS} {
		run := rep.Runs[i]
		l := run.Load
		if run.Mode != mode || run.Round != 1 || l == nil {
			t.Fatalf("run %d = %s round %d (load %v), want %s round 1 with a load", i, run.Mode, run.Round, l != nil, mode)
		}
		if l.Pushed == 0 {
			t.Errorf("%s: nothing was pushed", mode)
		}
		if l.PushErrors != 0 || l.Missing != 0 || l.Duplicates != 0 || l.Unexpected != 0 || l.WrongTarget != 0 {
			t.Errorf("%s: push errors %d, missing %d, duplicates %d, unexpected %d, wrong target %d; want all 0",
				mode, l.PushErrors, l.Missing, l.Duplicates, l.Unexpected, l.WrongTarget)
		}
		if l.Delivered != l.Pushed || l.Kickouts != 0 || l.Ended != 0 {
			t.Errorf("%s: delivered %d of %d pushed, kickouts %d, streams ended %d", mode, l.Delivered, l.Pushed, l.Kickouts, l.Ended)
		}
	}
	if len(rep.TLSCost) != 1 {
		t.Fatalf("tls cost = %+v, want one session count", rep.TLSCost)
	}
	c := rep.TLSCost[0]
	if c.Sessions != 50 || c.Rounds != 1 || c.Plain.DeliveriesPerSec != rep.Runs[0].Load.DeliveriesPerSec ||
		c.TLS.DeliveriesPerSec != rep.Runs[1].Load.DeliveriesPerSec || c.TLS.CPUPerMsgUS <= 0 {
		t.Errorf("tls cost = %+v, runs %+v %+v", c, rep.Runs[0].Load, rep.Runs[1].Load)
	}
	if md := rep.Markdown(); !strings.Contains(md, "| 50 sessions, mean of 1 round(s) | plaintext | TLS | TLS ÷ plaintext |") ||
		!strings.Contains(md, "| throughput tls #1 | 50 |") {
		t.Errorf("markdown lacks the comparison:\n%s", md)
	}
}

// refusesPlaintext checks that c's client stream and Push API do not serve
// a plaintext client.
func refusesPlaintext(t *testing.T, c *Cluster) {
	t.Helper()
	if c.ClientTLS == nil {
		t.Error("the TLS cluster has no client TLS configuration")
	}
	for _, probe := range []struct{ transport, addr string }{{TransportGRPC, c.ClientAddr}, {TransportWS, c.WSAddr}} {
		p, err := openSessions(t.Context(), openConfig{Transport: probe.transport, ClientAddr: probe.addr, Secret: c.Secret, Platform: c.Platform,
			UIDPrefix: "plaintext-probe-", N: 1, Timeout: 3 * time.Second, WaitReady: true})
		if err == nil {
			p.close()
			t.Errorf("a plaintext session opened over %s on the TLS cluster (%s)", probe.transport, probe.addr)
		}
	}
	req := &pushpb.PushRequest{Uids: []string{"plaintext-probe-0"},
		PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{c.Platform}},
		MsgBodies:      []*anypb.Any{encodeBody(0, 0)}}
	push := func(tc *tls.Config) error {
		conn, err := grpc.NewClient("passthrough:///"+c.PushAddr, grpc.WithTransportCredentials(transport(tc)), auth.BearerDialOption(c.APIKey))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err = pushpb.NewPushClient(conn).Push(ctx, req)
		return err
	}
	if err := push(nil); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext Push on the TLS cluster: %v, want Unavailable", err)
	}
	if err := push(c.ClientTLS); err != nil {
		t.Errorf("the same Push over TLS: %v", err)
	}
}

// TestCompareTLSMeans checks the side-by-side means over rounds.
func TestCompareTLSMeans(t *testing.T) {
	t.Parallel()
	load := func(v float64) *LoadResult {
		return &LoadResult{DeliveriesPerSec: v, CPUPerMsgUS: v / 100, Latency: Percentiles{P50: v / 1000, P99: v / 500}}
	}
	runs := []RunResult{
		{Mode: ModePlain, Round: 1, Sessions: 10, Load: load(1000)},
		{Mode: ModeTLS, Round: 1, Sessions: 10, Load: load(800)},
		{Mode: ModePlain, Round: 2, Sessions: 10, Load: load(3000)},
		{Mode: ModeTLS, Round: 2, Sessions: 10, Load: load(1200)},
		{Mode: ModeTLS, Round: 1, Sessions: 20, Memory: &MemorySample{RSSPerSession: 4096, HeapPerSession: 2048}},
		{Label: "not compared", Sessions: 10, Load: load(1e9)},
	}
	got := compareTLS(runs)
	if len(got) != 2 {
		t.Fatalf("got %+v, want session counts 10 and 20", got)
	}
	a := got[0]
	if a.Sessions != 10 || a.Rounds != 2 || a.Plain.DeliveriesPerSec != 2000 || a.TLS.DeliveriesPerSec != 1000 ||
		a.Plain.P99MS != 4 || a.TLS.CPUPerMsgUS != 10 {
		t.Errorf("10 sessions: %+v", a)
	}
	b := got[1]
	if b.Sessions != 20 || b.Rounds != 0 || b.TLS.RSSPerSession != 4096 || b.TLS.HeapPerSession != 2048 || b.Plain != (CostFigures{}) {
		t.Errorf("20 sessions: %+v", b)
	}
	var sb strings.Builder
	a.markdown(&sb)
	if !strings.Contains(sb.String(), "| acked deliveries/s | 2000 | 1000 | 0.50× |") {
		t.Errorf("markdown:\n%s", sb.String())
	}
}
