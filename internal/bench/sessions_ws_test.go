package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestIdleWS measures boat's memory over idle WebSocket sessions on an
// in-process cluster (its one process stands in for boat): every session is
// one connection, open and ready, holding at least one goroutine in boat;
// the bare gRPC floor is not started for WebSocket sessions; the report
// names the transport.
func TestIdleWS(t *testing.T) {
	c := startCluster(t)
	ops := c.Services[0].OpsAddr
	c.Services = []Service{{Name: "boat", OpsAddr: ops}}
	const sessions = 200
	floors := 0
	rep, err := Run(t.Context(), Options{
		Scenario: ScenarioIdle, Transport: TransportWS, Sessions: []int{sessions}, SourceSpread: 4,
		ConnectTimeout: 20 * time.Second,
		NewCluster:     func(context.Context) (*Cluster, bool, error) { return c, false, nil },
		SpawnFloor: func(context.Context) (func(), string, Service, error) {
			floors++
			return nil, "", Service{}, errors.New("the floor is bare gRPC: not for WebSocket sessions")
		},
		Command: "go test ./internal/bench -run TestIdleWS",
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if floors != 0 {
		t.Errorf("floor started %d times, want 0", floors)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Memory == nil {
		t.Fatalf("runs = %+v, want one memory run", rep.Runs)
	}
	run := rep.Runs[0]
	ms := run.Memory
	if run.Floor != nil || ms.Sessions != sessions || ms.Conns != sessions || ms.Process != "boat" {
		t.Errorf("memory = %+v, floor %+v; want %d sessions on as many connections of boat, no floor", ms, run.Floor, sessions)
	}
	if ms.Goroutines < sessions || ms.RSSAfter <= 0 || ms.HeapAfter <= 0 {
		t.Errorf("goroutines added %v, RSS after %v, heap after %v; want ≥ %d goroutines (one handler a session) and sizes",
			ms.Goroutines, ms.RSSAfter, ms.HeapAfter, sessions)
	}
	if md := rep.Markdown(); rep.Transport != TransportWS || !strings.Contains(md, "device sessions over ws,") {
		t.Errorf("report transport %q, markdown:\n%s", rep.Transport, md)
	}
	// The sessions were WebSockets, each closed once when the tool let go.
	waitWSCloses(t, ops, sessions)
}

// TestTransportOptions checks the refusals of transport settings that
// cannot work, before any cluster is started or session opened.
func TestTransportOptions(t *testing.T) {
	t.Parallel()
	noCluster := func(context.Context) (*Cluster, bool, error) {
		return nil, false, errors.New("no cluster should be asked for")
	}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"unknown transport", Options{Scenario: ScenarioThroughput, Transport: "quic", Sessions: []int{1}, NewCluster: noCluster},
			`transport: "quic"`},
		{"streams shared over ws", Options{Scenario: ScenarioIdle, Transport: TransportWS, StreamsPerConn: 2, Sessions: []int{1}, NewCluster: noCluster},
			"streams-per-conn: 2, want 1 over WebSocket"},
		{"cluster without ws", Options{Scenario: ScenarioThroughput, Transport: TransportWS, Sessions: []int{1},
			NewCluster: func(context.Context) (*Cluster, bool, error) { return &Cluster{ClientAddr: "127.0.0.1:1"}, false, nil }},
			"no WebSocket address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Run(t.Context(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run: %v, want an error with %q", err, tc.want)
			}
		})
	}
	_, err := openSessions(t.Context(), openConfig{Transport: TransportWS, ClientAddr: "127.0.0.1:1", StreamsPerConn: 3, N: 1})
	if err == nil || !strings.Contains(err.Error(), "want 1 over WebSocket") {
		t.Errorf("open ws sessions 3 a connection: %v, want refused", err)
	}
}
