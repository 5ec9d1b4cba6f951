package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	c := &Cluster{}
	var err error
	if c.clients, err = Dial(ctx, cfg.Backends, log); err != nil {
		return nil, err
	}
	fail := func(err error) (*Cluster, error) {
		c.clients.Close()
		return nil, err
	}
	runs := map[string]func(context.Context) error{}
	if slices.Contains(cfg.Services, "station") {
		if c.Station, err = NewStation(cfg.Station, cfg.Backends, c.clients, log); err != nil {
			return fail(err)
		}
		if err := c.Station.Listen(); err != nil {
			return fail(err)
		}
		runs["station"] = c.Station.Run
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
		c.addChecks()
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

// Wait blocks until every service has returned (after Stop, or when one
// fails) and returns the first failure.
func (c *Cluster) Wait() error {
	err := c.group.Wait()
	c.stopOnce.Do(func() { c.clients.Close() })
	return err
}

// Stop ends the services in order and waits for them.
func (c *Cluster) Stop() error {
	c.stopAll()
	return c.Wait()
}

// addChecks makes /readyz depend on the backends being reachable.
func (c *Cluster) addChecks() {
	if r := c.clients.Redis; r != nil {
		c.Ops.AddCheck("redis", func(ctx context.Context) error { return r.Ping(ctx).Err() })
	}
	if e := c.clients.Etcd; e != nil {
		c.Ops.AddCheck("etcd", func(ctx context.Context) error {
			_, err := e.Get(ctx, "health-probe")
			return err
		})
	}
}

func (c *Cluster) stopAll() {
	if c.Ops != nil {
		c.Ops.SetDraining()
	}
	for _, stop := range c.stops {
		stop()
	}
}
