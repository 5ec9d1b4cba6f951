package main

import (
	"context"
	"flag"
	"runtime/debug"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/horn"
	"github.com/gomsg/gomsg/internal/metrics"
)

// serviceFlags defines the flags of service name; parsing them fills the
// returned settings.
func serviceFlags(name string) (*flag.FlagSet, *common, *app.ClusterConfig) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	c := new(common)
	c.register(fs, name)
	cfg := &app.ClusterConfig{Services: []string{name}}
	switch name {
	case "boat":
		registerBoat(fs, &cfg.Boat, &cfg.StationAddr, "0.0.0.0")
		registerGRPCLimits(fs, &cfg.GRPC)
	case "station":
		registerStation(fs, &cfg.Station, "0.0.0.0", false)
		registerGRPCLimits(fs, &cfg.GRPC)
	case "carrier":
		registerCarrier(fs, &cfg.Carrier)
		registerConsumer(fs, &cfg.Carrier.Consumer)
	case "horn":
		registerHorn(fs, &cfg.Horn, false)
		registerConsumer(fs, &cfg.Horn.Consumer)
	}
	if name != "horn" {
		registerInternal(fs, &cfg.Internal)
	}
	return fs, c, cfg
}

// serviceConfig parses the settings of service name from args and the
// environment and checks them; no backend is dialed.
func serviceConfig(name string, args []string) (*common, app.ClusterConfig, error) {
	fs, c, cfg := serviceFlags(name)
	if err := parse(fs, args); err != nil {
		return nil, app.ClusterConfig{}, err
	}
	plat, err := c.finish()
	if err != nil {
		return nil, app.ClusterConfig{}, err
	}
	c.defaultBackends()
	cfg.Backends = c.backends
	cfg.OpsAddr, cfg.Pprof, cfg.OpsTLS = c.opsAddr, c.pprof, c.opsTLS
	cfg.TLS = c.tls
	cfg.Station.Station.Platforms, cfg.Carrier.Platforms, cfg.Horn.Platforms = plat, plat, plat
	if err := preflight(name, *cfg); err != nil {
		return nil, app.ClusterConfig{}, err
	}
	return c, *cfg, nil
}

// runService runs one service as a one-service cluster on external
// backends. Bad settings are reported before any backend is dialed.
func runService(ctx context.Context, name string, args []string) error {
	c, cfg, err := serviceConfig(name, args)
	if err != nil {
		return err
	}
	debug.SetGCPercent(c.gcPercent)
	log, err := c.logger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	app.SetRedisLogger(log)
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
		if err := s.Validate(); err != nil {
			return err
		}
		if cfg.Station.AuthAddr != "" {
			return nil
		}
		// The same rule station applies when it starts: the secret may
		// come from --jwt-secret, GOMSG_JWT_SECRET or --jwt-secret-file.
		_, err := auth.JWTSecret(cfg.Station.JWTSecret, cfg.Station.JWTSecretFile, cfg.Dev)
		return err
	case "carrier":
		c := cfg.Carrier
		c.Brokers = cfg.Backends.KafkaBrokers
		c.Defaults()
		return c.Validate()
	case "horn":
		// New reads and checks the providers' credentials; it dials nothing.
		h := cfg.Horn
		h.Brokers = cfg.Backends.KafkaBrokers
		_, err := horn.New(h, zap.NewNop(), metrics.New(), nil, nil)
		return err
	}
	return nil
}

func runBoat(ctx context.Context, args []string) error    { return runService(ctx, "boat", args) }
func runStation(ctx context.Context, args []string) error { return runService(ctx, "station", args) }
func runCarrier(ctx context.Context, args []string) error { return runService(ctx, "carrier", args) }
func runHorn(ctx context.Context, args []string) error    { return runService(ctx, "horn", args) }
