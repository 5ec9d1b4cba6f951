package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// Scenarios the tool runs.
const (
	ScenarioThroughput = "throughput" // as fast as it can
	ScenarioLatency    = "latency"    // fixed rate, half of saturation
	ScenarioIdle       = "idle"       // memory per idle session, boat and floor
	ScenarioScaling    = "scaling"    // throughput, p99 and memory at several sizes
	ScenarioFanout     = "fanout"     // room broadcasts to rooms × members
	ScenarioDisconnect = "disconnect" // every session of one boat leaves at once
)

// Options configure one scenario.
type Options struct {
	Scenario string
	// Transport the device sessions connect over: TransportGRPC (default)
	// or TransportWS (boat's WebSocket, Cluster.WSAddr). Over WebSocket
	// every session has its own connection (StreamsPerConn 1) and idle has
	// no floor (the floor server is bare gRPC).
	Transport string
	// Sessions: the session counts (one for throughput and latency).
	Sessions []int
	// StreamsPerConn > 1 shares one client connection among that many
	// session streams; real devices have one connection each.
	StreamsPerConn int
	SourceSpread   int
	Warmup         time.Duration
	Duration       time.Duration
	// BaselineDuration is each baseline's measured time; 0 skips baselines.
	BaselineDuration time.Duration
	Concurrency      int
	// Rate for the latency scenario; 0 measures saturation first and uses
	// half of it. For fanout: BroadcastRoom calls per second over all
	// rooms; 0 is each room's broadcaster as fast as its calls return.
	Rate float64
	// Fanout: the sizes (a fresh cluster each), the bodies per
	// BroadcastRoom call and, without a rate, the messages a room's
	// broadcaster lets be on their way.
	Fanout         []FanoutSize
	Bodies         int
	Window         int
	ConnectTimeout time.Duration
	// StuckClients (throughput and latency) is how many sessions read
	// their messages but never ACK them; the report gives the other
	// sessions' figures apart. StuckReconnect has a stuck session connect
	// again when boat kicks it out (as it does after ack_wait), so it stays
	// stuck for the whole run.
	StuckClients   int
	StuckReconnect bool
	// Offline pushes NEED_ACK|NEED_OFFLINE instead of NEED_ACK alone: the
	// guarantee of a broker's persistent session, for a like-for-like row.
	Offline bool
	// NewCluster returns a cluster to run against: a fresh one per call in
	// spawn mode, the given one otherwise. Fresh reports whether it is new
	// (memory is then measured from a clean process).
	NewCluster func(ctx context.Context) (c *Cluster, fresh bool, err error)
	// CompareTLS runs the scenario (throughput or idle) on NewCluster's
	// plaintext cluster and on TLSCluster's TLS one, alternating, Rounds
	// times, and reports both side by side (TLSCost).
	CompareTLS bool
	TLSCluster func(ctx context.Context) (c *Cluster, fresh bool, err error)
	Rounds     int
	// Disconnect configures the disconnect scenario.
	Disconnect DisconnectOptions
	// SpawnFloor starts a floor server; nil skips the floor.
	SpawnFloor func(ctx context.Context) (stop func(), addr string, svc Service, err error)
	ProfileDir string
	Command    string
	Progress   io.Writer
	Log        *zap.Logger
}

func (o *Options) defaults() {
	if o.Transport == "" {
		o.Transport = TransportGRPC
	}
	if o.StreamsPerConn < 1 {
		o.StreamsPerConn = 1
	}
	if o.SourceSpread < 1 {
		o.SourceSpread = 16
	}
	if o.Warmup <= 0 {
		o.Warmup = 2 * time.Second
	}
	if o.Duration <= 0 {
		o.Duration = 20 * time.Second
	}
	if o.Concurrency < 1 {
		o.Concurrency = 64
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 5 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
}

// Run runs one scenario and returns its report.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	switch o.Transport {
	case TransportGRPC:
	case TransportWS, TransportMQTT:
		if o.StreamsPerConn != 1 {
			over := map[string]string{TransportWS: "WebSocket", TransportMQTT: "MQTT"}[o.Transport]
			return nil, fmt.Errorf("streams-per-conn: %d, want 1 over %s (one session per connection)", o.StreamsPerConn, over)
		}
	default:
		return nil, fmt.Errorf("transport: %q, want %s, %s or %s", o.Transport, TransportGRPC, TransportWS, TransportMQTT)
	}
	if o.StuckClients != 0 {
		switch {
		case o.Scenario != ScenarioThroughput && o.Scenario != ScenarioLatency:
			return nil, fmt.Errorf("stuck-clients: only throughput and latency, not %s", o.Scenario)
		case o.CompareTLS:
			return nil, errors.New("stuck-clients: not with compare-tls")
		case o.StuckClients < 0 || len(o.Sessions) != 1 || o.StuckClients >= o.Sessions[0]:
			return nil, fmt.Errorf("stuck-clients: %d, want 0 to sessions-1 (sessions %v)", o.StuckClients, o.Sessions)
		}
	}
	if o.Offline && o.Scenario != ScenarioThroughput && o.Scenario != ScenarioLatency && o.Scenario != ScenarioScaling && o.Scenario != ScenarioDisconnect {
		// idle pushes nothing; room broadcasts are never stored offline.
		return nil, fmt.Errorf("offline: only throughput, latency, scaling and disconnect push to sessions, not %s", o.Scenario)
	}
	rep := &Report{Scenario: o.Scenario, Transport: o.Transport, Date: time.Now().UTC().Format(time.RFC3339), Command: o.Command,
		Machine: DescribeMachine(), StreamsPerConn: o.StreamsPerConn, Concurrency: o.Concurrency,
		WindowSeconds: o.Duration.Seconds()}
	if o.CompareTLS {
		return rep, runCompareTLS(ctx, o, rep)
	}
	var err error
	switch o.Scenario {
	case ScenarioThroughput, ScenarioLatency:
		if len(o.Sessions) != 1 {
			return nil, fmt.Errorf("%s: want one session count, got %v", o.Scenario, o.Sessions)
		}
		err = runLoadScenario(ctx, o, rep)
	case ScenarioIdle:
		err = runIdle(ctx, o, rep)
	case ScenarioScaling:
		err = runScaling(ctx, o, rep)
	case ScenarioFanout:
		err = runFanout(ctx, o, rep)
	case ScenarioDisconnect:
		err = runDisconnect(ctx, o, rep)
	default:
		return nil, fmt.Errorf("unknown scenario %q (throughput, latency, idle, scaling, fanout, disconnect)", o.Scenario)
	}
	if err != nil {
		return rep, err
	}
	rep.evaluate()
	return rep, nil
}

func (o *Options) logf(format string, args ...any) {
	fmt.Fprintf(o.Progress, format+"\n", args...)
}

func (o *Options) open(ctx context.Context, c *Cluster, n int, ready bool, runID string) (*sessions, error) {
	return o.openWith(ctx, c, n, ready, runID, nil)
}

// openWith is open with each session's room (fanout); member nil: none.
// The sessions go to c's client stream or, over WebSocket, to c's WSAddr.
func (o *Options) openWith(ctx context.Context, c *Cluster, n int, ready bool, runID string, member func(int) *member) (*sessions, error) {
	addr := c.ClientAddr
	if o.Transport == TransportWS {
		if c.WSAddr == "" {
			return nil, errors.New("transport ws: the cluster has no WebSocket address (boat's --ws-addr)")
		}
		addr = c.WSAddr
	}
	if o.Transport == TransportMQTT {
		if c.MQTTAddr == "" {
			return nil, errors.New("transport mqtt: the cluster has no MQTT address (boat's --mqtt-addr)")
		}
		addr = c.MQTTAddr
	}
	start := time.Now()
	p, err := openSessions(ctx, openConfig{
		Transport: o.Transport, ClientAddr: addr, TLS: c.ClientTLS, Secret: c.Secret, Platform: c.Platform, UIDPrefix: "bench-" + runID + "-",
		N: n, StreamsPerConn: o.StreamsPerConn, SourceSpread: o.SourceSpread, Timeout: o.ConnectTimeout,
		WaitReady: ready, Stuck: o.StuckClients, StuckReconnect: o.StuckReconnect, Member: member,
		Progress: func(k int) {
			o.logf("  opened %d/%d sessions (%.0f/s)", k, n, float64(k)/time.Since(start).Seconds())
		},
	})
	if err == nil {
		o.logf("  %d sessions open over %s in %s", n, o.Transport, time.Since(start).Round(time.Millisecond))
	}
	return p, err
}

func runID() string { return strconv.FormatInt(time.Now().UnixNano()%1e12, 36) }

// baselines measures the baselines (skipped when BaselineDuration is 0).
func (o *Options) baselines(ctx context.Context, c *Cluster, rep *Report, when string) error {
	if o.BaselineDuration <= 0 {
		return nil
	}
	o.logf("baselines (%s): kafka, grpc, redis, %s each", when, o.BaselineDuration)
	b, err := runBaselines(ctx, BaselineConfig{KafkaBrokers: c.KafkaBrokers, RedisAddr: c.RedisAddr,
		Concurrency: o.Concurrency, Duration: o.BaselineDuration, RunID: runID()}, o.Log)
	if err != nil {
		return err
	}
	o.logf("  kafka %.0f/s  grpc msg+ack %.0f/s  redis hgetall %.0f/s  evalsha %.0f/s  chained %.0f/s",
		b.KafkaPerSec, b.GRPCPerSec, b.RedisLookupPerSec, b.RedisEvalPerSec, b.ChainedPerSec)
	rep.BaselineRuns = append(rep.BaselineRuns, b)
	rep.Baselines = meanBaselines(rep.BaselineRuns)
	return nil
}

func (o *Options) load(ctx context.Context, c *Cluster, p *sessions, rate float64, dur time.Duration, label string) (LoadResult, error) {
	if rate > 0 {
		o.logf("%s: %d sessions, %.0f pushes/s for %s", label, len(p.list), rate, dur)
	} else {
		o.logf("%s: %d sessions, as fast as %d callers can for %s", label, len(p.list), o.Concurrency, dur)
	}
	res, err := runLoad(ctx, p, LoadConfig{PushAddr: c.PushAddr, TLS: c.ClientTLS, APIKey: c.APIKey, Platform: c.Platform, Rate: rate, Offline: o.Offline,
		Concurrency: o.concurrencyFor(rate), Warmup: o.Warmup, Duration: dur, Services: c.Services,
		ProfileDir: o.ProfileDir, ProfileName: label, Progress: o.Progress})
	if err == nil {
		o.logf("  %.0f acked deliveries/s (%s)  p50 %.2fms p99 %.2fms p999 %.2fms  cpu %.1fµs/msg  missing %d dup %d wrong options %d",
			res.DeliveriesPerSec, res.MsgOptions, res.Latency.P50, res.Latency.P99, res.Latency.P999, res.CPUPerMsgUS, res.Missing, res.Duplicates, res.WrongOptions)
		if line := syscallsLine(res.SyscallsPerMsg); line != "" {
			o.logf("  read+write system calls per message: %s", line)
		}
		if ot, st := res.Others, res.Stuck; ot != nil && st != nil {
			o.logf("  others (%d): %.0f delivered/s  p50 %.2fms p99 %.2fms p999 %.2fms  missing %d dup %d;  stuck (%d): received %d of %d pushed, kicked %d, reconnected %d",
				ot.Sessions, ot.DeliveriesPerSec, ot.Latency.P50, ot.Latency.P99, ot.Latency.P999, ot.Missing, ot.Duplicates,
				st.Sessions, st.Delivered, st.Pushed, st.Kickouts, st.Reconnects)
		}
	}
	return res, err
}

// concurrencyFor: at a fixed rate callers only wait for their due time, so
// more of them keep the rate when single calls are slow.
func (o *Options) concurrencyFor(rate float64) int {
	if rate > 0 {
		return max(o.Concurrency, 256)
	}
	return o.Concurrency
}

func runLoadScenario(ctx context.Context, o Options, rep *Report) error {
	c, _, err := o.NewCluster(ctx)
	if err != nil {
		return err
	}
	defer c.Stop()
	n := o.Sessions[0]
	p, err := o.open(ctx, c, n, true, runID())
	if err != nil {
		return err
	}
	defer p.close()
	if err := o.baselines(ctx, c, rep, "before"); err != nil {
		return err
	}
	rate := o.Rate
	if o.Scenario == ScenarioLatency && rate == 0 {
		sat, err := o.load(ctx, c, p, 0, o.Duration/2, "saturation")
		if err != nil {
			return err
		}
		rep.Runs = append(rep.Runs, RunResult{Label: "saturation", Sessions: n, Load: &sat})
		rate = sat.DeliveriesPerSec / 2
	}
	res, err := o.load(ctx, c, p, rate, o.Duration, o.Scenario)
	if err != nil {
		return err
	}
	rep.Runs = append(rep.Runs, RunResult{Label: o.Scenario, Sessions: n, Load: &res})
	if rate > 0 && o.BaselineDuration > 0 {
		// The Kafka hop alone at the same rate: its latency is part of
		// every push's.
		o.logf("baseline: kafka produce→consume at %.0f/s for %s", rate, o.BaselineDuration)
		perSec, p99, err := kafkaBaseline(ctx, BaselineConfig{KafkaBrokers: c.KafkaBrokers, Concurrency: o.concurrencyFor(rate),
			Duration: o.BaselineDuration, RunID: runID(), Rate: rate}, o.Log)
		if err != nil {
			return fmt.Errorf("kafka baseline at rate: %w", err)
		}
		o.logf("  %.0f/s, p99 %.1f ms", perSec, p99)
		rep.KafkaAtRate = &RateBaseline{Rate: rate, PerSec: perSec, P99MS: p99}
	}
	return o.baselines(ctx, c, rep, "after")
}

// memory measures RSS and heap of svc before and after opening n sessions.
func (o *Options) memory(ctx context.Context, c *Cluster, svc Service, n int, ready bool) (MemorySample, *sessions, error) {
	ms := MemorySample{Process: svc.Name, Sessions: n, Conns: (n + o.StreamsPerConn - 1) / o.StreamsPerConn}
	before, err := settle(ctx, svc)
	if err != nil {
		return ms, nil, err
	}
	p, err := o.open(ctx, c, n, ready, runID())
	if err != nil {
		return ms, nil, err
	}
	after, err := settle(ctx, svc)
	if err != nil {
		p.close()
		return ms, nil, err
	}
	ms.RSSBefore, ms.RSSAfter = before.RSSBytes, after.RSSBytes
	ms.HeapBefore, ms.HeapAfter = before.HeapInuse, after.HeapInuse
	ms.Goroutines = after.Goroutines - before.Goroutines
	ms.RSSPerSession = (after.RSSBytes - before.RSSBytes) / float64(n)
	ms.HeapPerSession = (after.HeapInuse - before.HeapInuse) / float64(n)
	ms.StackPerSession = (after.StackInuse - before.StackInuse) / float64(n)
	if o.ProfileDir != "" {
		ms.Profiles = captureHeaps(ctx, []Service{svc}, filepath.Join(o.ProfileDir, fmt.Sprintf("idle-%d", n)))
	}
	o.logf("  %s: %.0f B RSS and %.0f B heap per session (%d sessions, %d conns, %.1f goroutines each)",
		svc.Name, ms.RSSPerSession, ms.HeapPerSession, n, ms.Conns, ms.Goroutines/float64(n))
	return ms, p, nil
}

// settle collects svc's garbage, lets it settle for two seconds and samples
// its memory.
func settle(ctx context.Context, svc Service) (Sample, error) {
	gcRemote(ctx, svc)
	sleepUntil(ctx, time.Now().Add(2*time.Second))
	return Scrape(ctx, svc)
}

// gcRemote asks a Go service to collect garbage: /debug/pprof/heap?gc=1
// runs runtime.GC first. Without pprof it does nothing.
func gcRemote(ctx context.Context, s Service) {
	if s.OpsAddr == "" {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.OpsAddr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return
	}
	if resp, err := httpClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func (o *Options) floor(ctx context.Context, n int) (*MemorySample, error) {
	if o.SpawnFloor == nil {
		return nil, nil
	}
	if o.Transport != TransportGRPC {
		o.logf("floor: skipped (the floor server is bare gRPC; sessions go over %s)", o.Transport)
		return nil, nil
	}
	stop, addr, svc, err := o.SpawnFloor(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	o.logf("floor: bare grpc-go server, %d idle streams", n)
	ms, p, err := o.memory(ctx, &Cluster{ClientAddr: addr, Secret: "floor", Platform: "ios"}, svc, n, false)
	if err != nil {
		return nil, err
	}
	p.close()
	return &ms, nil
}

func (o *Options) boatMemory(ctx context.Context, c *Cluster, n int) (MemorySample, *sessions, error) {
	boat, ok := c.Boat()
	if !ok {
		return MemorySample{}, nil, fmt.Errorf("no service named boat to measure")
	}
	o.logf("boat: %d idle sessions over %s", n, o.Transport)
	return o.memory(ctx, c, boat, n, true)
}

func runIdle(ctx context.Context, o Options, rep *Report) error {
	for _, n := range o.Sessions {
		fl, err := o.floor(ctx, n)
		if err != nil {
			return err
		}
		c, fresh, err := o.NewCluster(ctx)
		if err != nil {
			return err
		}
		ms, p, err := o.boatMemory(ctx, c, n)
		if err == nil {
			p.close()
		}
		c.Stop()
		if err != nil {
			return err
		}
		ms.FreshProcess = fresh
		rep.Runs = append(rep.Runs, RunResult{Label: fmt.Sprintf("idle %d", n), Sessions: n, Memory: &ms, Floor: fl})
	}
	return nil
}

func runScaling(ctx context.Context, o Options, rep *Report) error {
	for _, n := range o.Sessions {
		c, fresh, err := o.NewCluster(ctx)
		if err != nil {
			return err
		}
		err = func() error {
			defer c.Stop()
			ms, p, err := o.boatMemory(ctx, c, n)
			if err != nil {
				return err
			}
			defer p.close()
			ms.FreshProcess = fresh
			if err := o.baselines(ctx, c, rep, fmt.Sprintf("before %d", n)); err != nil {
				return err
			}
			res, err := o.load(ctx, c, p, 0, o.Duration, fmt.Sprintf("scaling-%d", n))
			if err != nil {
				return err
			}
			rep.Runs = append(rep.Runs, RunResult{Label: fmt.Sprintf("scaling %d", n), Sessions: n, Memory: &ms, Load: &res})
			return o.baselines(ctx, c, rep, fmt.Sprintf("after %d", n))
		}()
		if err != nil {
			return err
		}
	}
	return nil
}
