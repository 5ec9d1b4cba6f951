package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/carrier"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/ops"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/tlsx"
)

// Services gomsg runs.
var Services = []string{"boat", "station", "carrier", "horn"}

// ClusterConfig configures several services in one process (`gomsg dev`,
// tests).
type ClusterConfig struct {
	Backends Backends
	// Services to run; nil means all.
	Services []string
	Station  StationOptions
	Boat     boat.Config
	// StationAddr is station's internal address for a boat running without
	// a station in the same process.
	StationAddr string
	Carrier     carrier.Config
	Horn        horn.Config
	// GRPC are the limits of boat's and station's gRPC servers (unless
	// their own configs set them).
	GRPC grpcx.Limits
	// OpsAddr serves /metrics, /healthz, /readyz (and /debug/pprof/ with
	// Pprof); empty: no ops server.
	OpsAddr string
	Pprof   bool
	// OpsTLS serves OpsAddr over TLS with the process's certificate.
	OpsTLS bool
	// TLS is the services' own TLS: listeners and internal calls.
	TLS tlsx.Settings
	// Dev is `gomsg dev`: the dev API key and JWT secret are accepted and
	// the internal token is random when not given.
	Dev bool
	// Internal is the internal APIs' shared token.
	Internal InternalAuth
}

// Cluster is services running in one process.
type Cluster struct {
	Station *station.Station
	Boat    *boat.Boat
	Carrier *Carrier
	Horn    *horn.Horn
	Ops     *ops.Server
	Metrics *metrics.Metrics

	clients *Clients
	// stops end the services in order: boats first (their disconnects
	// reach station), then carrier, horn, then station.
	stops    []context.CancelFunc
	group    *errgroup.Group
	stopOnce sync.Once
	err      error
	// stopping is closed when the services are told to stop (Stop, or one
	// failed): Wait returns only after that, even when no service runs.
	stopping     chan struct{}
	stoppingOnce sync.Once
}

// StartCluster dials the backends, binds every listener and starts the
// services; Stop ends them. Addresses are known when it returns.
func StartCluster(ctx context.Context, cfg ClusterConfig, log *zap.Logger) (*Cluster, error) {
	if cfg.Services == nil {
		cfg.Services = Services
	}
	for _, s := range cfg.Services {
		if !slices.Contains(Services, s) {
			return nil, fmt.Errorf("services: unknown service %q (known: boat, station, carrier, horn, or none)", s)
		}
	}
	cfg.Backends.Defaults()
	if cfg.Station.Station.GRPC == (grpcx.Limits{}) {
		cfg.Station.Station.GRPC = cfg.GRPC
	}
	if cfg.Boat.GRPC == (grpcx.Limits{}) {
		cfg.Boat.GRPC = cfg.GRPC
	}
	tlsConfigs, err := cfg.TLS.Build()
	if err != nil {
		return nil, err
	}
	if cfg.OpsTLS && (cfg.OpsAddr == "" || tlsConfigs.Public == nil) {
		return nil, errors.New("--ops-tls: needs --ops-addr and --tls-cert-file with --tls-key-file")
	}
	if err := cfg.secure(tlsConfigs.Cert, log); err != nil {
		return nil, err
	}
	c := &Cluster{stopping: make(chan struct{})}
	if c.clients, err = Dial(ctx, cfg.Backends, NeedsOf(cfg.Services), log); err != nil {
		return nil, err
	}
	c.clients.TLS = tlsConfigs
	fail := func(err error) (*Cluster, error) {
		c.clients.Close()
		return nil, err
	}
	runs := map[string]func(context.Context) error{}
	if slices.Contains(cfg.Services, "station") {
		var run func(context.Context) error
		so := cfg.Station
		if slices.Contains(cfg.Services, "carrier") {
			// The console shows this carrier's groups, and its delivery
			// rates from the metrics both share.
			cc := cfg.Carrier
			cc.Defaults()
			so.CarrierGroup, so.Station.ConsoleDeliveries = cc.GroupID, true
		}
		if c.Station, run, err = NewStation(so, cfg.Backends, c.clients, log); err != nil {
			return fail(err)
		}
		if err := c.Station.Listen(); err != nil {
			return fail(err)
		}
		runs["station"] = run
	}
	if slices.Contains(cfg.Services, "boat") {
		stationAddr := cfg.StationAddr
		if c.Station != nil {
			stationAddr = c.Station.InternalAddr()
		}
		if c.Boat, err = NewBoat(cfg.Boat, stationAddr, cfg.Backends, c.clients, log); err != nil {
			return fail(err)
		}
		if err := c.Boat.Listen(); err != nil {
			return fail(err)
		}
		runs["boat"] = c.Boat.Run
	}
	if slices.Contains(cfg.Services, "carrier") {
		if c.Carrier, err = NewCarrier(cfg.Carrier, cfg.Backends, c.clients, log); err != nil {
			return fail(err)
		}
		runs["carrier"] = c.Carrier.Run
	}
	if slices.Contains(cfg.Services, "horn") {
		if c.Horn, err = NewHorn(cfg.Horn, cfg.Backends, c.clients, log); err != nil {
			return fail(err)
		}
		runs["horn"] = c.Horn.Run
	}
	c.Metrics = c.clients.Metrics
	if cfg.OpsAddr != "" {
		if c.Ops, err = ops.Listen(cfg.OpsAddr, c.Metrics.Registry, cfg.Pprof); err != nil {
			return fail(fmt.Errorf("ops-addr: %w", err))
		}
		if cfg.OpsTLS {
			c.Ops.UseTLS(tlsConfigs.Public.Clone())
		}
		c.addChecks(cfg.Backends)
		runs["ops"] = c.Ops.Run
	}
	type started struct {
		name string
		run  func(context.Context) error
		ctx  context.Context
		done chan struct{}
	}
	var list []started
	for _, name := range []string{"boat", "carrier", "horn", "station", "ops"} {
		run, ok := runs[name]
		if !ok {
			continue
		}
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		c.stops = append(c.stops, func() { cancel(); <-done })
		list = append(list, started{name, run, sctx, done})
	}
	g := new(errgroup.Group)
	for _, s := range list {
		g.Go(func() error {
			defer close(s.done)
			if err := s.run(s.ctx); err != nil && !errors.Is(err, context.Canceled) {
				// One service failing stops the others.
				go c.stopAll()
				return fmt.Errorf("%s: %w", s.name, err)
			}
			return nil
		})
	}
	c.group = g
	return c, nil
}

// Wait blocks until Stop is called or a service fails, then until every
// service has returned, and returns the first failure. A cluster of no
// services (only backends, `gomsg dev --services none`) waits for Stop.
func (c *Cluster) Wait() error {
	<-c.stopping
	err := c.group.Wait()
	c.stopOnce.Do(func() { c.clients.Close() })
	return err
}

// Stop ends the services in order and waits for them.
func (c *Cluster) Stop() error {
	c.stopAll()
	return c.Wait()
}

// addChecks makes /readyz depend on the backends the services use (those
// Dial opened) being reachable, and on a boat serving sessions.
func (c *Cluster) addChecks(b Backends) {
	if r := c.clients.Redis; r != nil {
		c.Ops.AddCheck("redis "+strings.Join(b.RedisAddrs, ","), redisProbe(r))
	}
	if e := c.clients.Etcd; e != nil {
		c.Ops.AddCheck("etcd "+strings.Join(b.EtcdEndpoints, ","), etcdProbe(e, b.EtcdPrefix))
	}
	if j := c.clients.NATS; j != nil {
		c.Ops.AddCheck("nats "+strings.Join(b.NATSURLs, ","), j.Ping)
	} else if c.clients.Producer != nil {
		c.Ops.AddCheck("kafka "+strings.Join(b.KafkaBrokers, ","), kafkaProbe(c.clients.Kafka, b.KafkaBrokers))
	}
	if c.Boat != nil {
		// Not a backend: the chart's ?exclude= list leaves it in.
		c.Ops.AddCheck("boat serving", func(context.Context) error { return c.Boat.Serving() })
	}
}

func (c *Cluster) stopAll() {
	defer c.stoppingOnce.Do(func() { close(c.stopping) })
	if c.Ops != nil {
		c.Ops.SetDraining()
	}
	for _, stop := range c.stops {
		stop()
	}
}
