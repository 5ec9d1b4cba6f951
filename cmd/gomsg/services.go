package main

import (
	"context"
	"flag"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/app"
)

// runService parses the flags of one service and runs it as a one-service
// cluster on external backends.
func runService(ctx context.Context, name string, args []string, register func(*flag.FlagSet, *app.ClusterConfig)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var c common
	c.register(fs, false)
	cfg := app.ClusterConfig{Services: []string{name}}
	register(fs, &cfg)
	if err := parse(fs, args); err != nil {
		return err
	}
	plat, err := c.finish()
	if err != nil {
		return err
	}
	c.defaultBackends()
	cfg.Backends = c.backends
	cfg.OpsAddr, cfg.Pprof = c.opsAddr, c.pprof
	cfg.Station.Station.Platforms, cfg.Carrier.Platforms, cfg.Horn.Platforms = plat, plat, plat
	log, err := c.logger()
	if err != nil {
		return err
	}
	if err := preflight(name, cfg); err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	stopTracing, err := c.tracing(ctx, name)
	if err != nil {
		return err
	}
	defer stopTracing()
	cl, err := app.StartCluster(ctx, cfg, log)
	if err != nil {
		return err
	}
	log.Info("gomsg started", zap.String("service", name), zap.String("version", version))
	go func() {
		<-ctx.Done()
		_ = cl.Stop()
	}()
	return cl.Wait()
}

// preflight validates the service's own configuration before any backend is
// dialed, so a bad value stops the binary at once with the setting's name
// rather than after connection timeouts. The services validate again in New.
func preflight(name string, cfg app.ClusterConfig) error {
	switch name {
	case "boat":
		b := cfg.Boat
		b.GRPC = cfg.GRPC
		b.Defaults()
		return b.Validate()
	case "station":
		s := cfg.Station.Station
		s.GRPC = cfg.GRPC
		s.Defaults()
		return s.Validate()
	case "carrier":
		c := cfg.Carrier
		c.Brokers = cfg.Backends.KafkaBrokers
		c.Defaults()
		return c.Validate()
	}
	return nil
}

func runBoat(ctx context.Context, args []string) error {
	return runService(ctx, "boat", args, func(fs *flag.FlagSet, cfg *app.ClusterConfig) {
		registerBoat(fs, &cfg.Boat, &cfg.StationAddr, "0.0.0.0")
		registerGRPCLimits(fs, &cfg.GRPC)
	})
}

func runStation(ctx context.Context, args []string) error {
	return runService(ctx, "station", args, func(fs *flag.FlagSet, cfg *app.ClusterConfig) {
		registerStation(fs, &cfg.Station, "0.0.0.0", false)
		registerGRPCLimits(fs, &cfg.GRPC)
	})
}

func runCarrier(ctx context.Context, args []string) error {
	return runService(ctx, "carrier", args, func(fs *flag.FlagSet, cfg *app.ClusterConfig) {
		registerCarrier(fs, &cfg.Carrier)
	})
}

func runHorn(ctx context.Context, args []string) error {
	return runService(ctx, "horn", args, func(fs *flag.FlagSet, cfg *app.ClusterConfig) {
		registerHorn(fs, &cfg.Horn, false)
	})
}
