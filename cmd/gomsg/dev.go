package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/config"
	"github.com/gomsg/gomsg/internal/demo"
	"github.com/gomsg/gomsg/internal/embedded"
)

// devSettings are the settings of `gomsg dev`.
type devSettings struct {
	common
	cfg      app.ClusterConfig
	services config.List
	embRedis string
	embKafka string
	embEtcd  string
	embNATS  string
	dataDir  string
}

// devFlags defines the flags of `gomsg dev`: every service's and its own.
func devFlags() (*flag.FlagSet, *devSettings) {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	d := &devSettings{services: config.List{"boat", "station", "carrier", "horn"}}
	d.register(fs, "dev")
	d.cfg.Dev = true
	registerInternal(fs, &d.cfg.Internal)
	registerBoat(fs, &d.cfg.Boat, &d.cfg.StationAddr, "127.0.0.1")
	registerStation(fs, &d.cfg.Station, "127.0.0.1", true)
	registerGRPCLimits(fs, &d.cfg.GRPC)
	registerCarrier(fs, &d.cfg.Carrier)
	registerHorn(fs, &d.cfg.Horn, true)
	registerConsumer(fs, &d.cfg.Carrier.Consumer, &d.cfg.Horn.Consumer)
	fs.Var(&d.services, "services", "services to run in this process, comma-separated, or none (only the embedded backends)")
	fs.StringVar(&d.embRedis, "embedded-redis-addr", "127.0.0.1:7301", "listen address of the embedded Redis")
	fs.StringVar(&d.embKafka, "embedded-kafka-addr", "127.0.0.1:7302", "listen address of the embedded Kafka broker")
	fs.StringVar(&d.embEtcd, "embedded-etcd-addr", "127.0.0.1:7303", "client address of the embedded etcd (its peer port is the next one)")
	fs.StringVar(&d.embNATS, "embedded-nats-addr", "127.0.0.1:7305", "listen address of the embedded nats-server (--queue nats)")
	fs.StringVar(&d.dataDir, "data-dir", "", "embedded etcd's data directory, and with --queue nats the embedded nats-server's JetStream store in its nats/ (default: a temporary one, removed on exit)")
	return fs, d
}

// runDev runs the cluster in one process. Backends whose addresses are not
// given run embedded: etcd, a Kafka-protocol broker (kfake) and Redis
// (miniredis).
func runDev(ctx context.Context, args []string) error {
	fs, d := devFlags()
	c, cfg, services := &d.common, &d.cfg, d.services
	embRedis, embKafka, embEtcd, dataDir := &d.embRedis, &d.embKafka, &d.embEtcd, &d.dataDir
	if err := parse(fs, args); err != nil {
		return err
	}
	services = d.services
	plat, err := c.finish()
	if err != nil {
		return err
	}
	debug.SetGCPercent(c.gcPercent)
	cfg.Station.Station.Platforms, cfg.Carrier.Platforms, cfg.Horn.Platforms = plat, plat, plat
	if len(services) == 1 && services[0] == "none" {
		services = config.List{}
	}
	cfg.Services = services
	for _, name := range services {
		pre := *cfg
		if len(pre.Backends.KafkaBrokers) == 0 {
			pre.Backends.KafkaBrokers = []string{*embKafka}
		}
		if len(pre.Backends.NATSURLs) == 0 {
			pre.Backends.NATSURLs = []string{"nats://" + d.embNATS}
		}
		if err := preflight(name, pre); err != nil {
			return err
		}
	}
	log, err := c.logger()
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	app.SetRedisLogger(log)
	stopTracing, err := c.tracing(ctx, "dev")
	if err != nil {
		return err
	}
	defer stopTracing()

	var lines []string
	b := &c.backends
	// External backends are named once they answered (StartCluster waits).
	var external []string
	need := app.NeedsOf(services)
	if len(b.RedisAddrs) > 0 && need.Redis {
		mode := ""
		if b.RedisCluster {
			mode = " (cluster)"
		}
		external = append(external, "redis                   "+strings.Join(b.RedisAddrs, ",")+mode)
	}
	nats := b.Queue == app.QueueNATS
	if len(b.NATSURLs) > 0 && need.Kafka && nats {
		external = append(external, "nats                    "+strings.Join(b.NATSURLs, ","))
	}
	if len(b.KafkaBrokers) > 0 && need.Kafka && !nats {
		external = append(external, "kafka                   "+strings.Join(b.KafkaBrokers, ","))
	}
	if len(b.EtcdEndpoints) > 0 && need.Etcd {
		external = append(external, "etcd                    "+strings.Join(b.EtcdEndpoints, ","))
	}
	if len(b.RedisAddrs) == 0 {
		r, err := embedded.StartRedis(*embRedis)
		if err != nil {
			return fmt.Errorf("embedded-redis-addr: %w", err)
		}
		defer r.Close()
		b.RedisAddrs = []string{r.Addr}
		lines = append(lines, "redis (embedded)        "+r.Addr)
	}
	if nats && len(b.NATSURLs) == 0 {
		dir := filepath.Join(*dataDir, "nats")
		if *dataDir == "" {
			if dir, err = os.MkdirTemp("", "gomsg-dev-nats-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		}
		n, err := embedded.StartNATS(d.embNATS, dir)
		if err != nil {
			return fmt.Errorf("embedded-nats-addr: %w", err)
		}
		defer n.Close()
		b.NATSURLs = []string{n.URL}
		b.CreateTopics = true
		lines = append(lines, "nats (embedded)         "+n.URL+" (JetStream in "+dir+")")
	}
	if len(b.KafkaBrokers) == 0 && !nats {
		topics := []string{b.TaskTopic, b.NotifyTopic, b.NotifyRetryTopic, b.NotifyDeadTopic, b.BroadcastTopic}
		for _, t := range []string{b.PresenceTopic, b.ReceiptsTopic} {
			if t != "" {
				topics = append(topics, t)
			}
		}
		k, err := embedded.StartKafka(*embKafka, b.TaskPartitions, topics...)
		if err != nil {
			return fmt.Errorf("embedded-kafka-addr: %w", err)
		}
		defer k.Close()
		b.KafkaBrokers = []string{k.Addr}
		lines = append(lines, "kafka (embedded)        "+k.Addr)
	}
	if len(b.EtcdEndpoints) == 0 {
		peer, err := nextPort(*embEtcd)
		if err != nil {
			return fmt.Errorf("embedded-etcd-addr: %w", err)
		}
		dir := *dataDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "gomsg-dev-etcd-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		}
		e, err := embedded.StartEtcd(dir, *embEtcd, peer)
		if err != nil {
			return fmt.Errorf("embedded-etcd-addr: %w", err)
		}
		defer e.Close()
		b.EtcdEndpoints = []string{e.Addr}
		lines = append(lines, "etcd (embedded)         "+e.Addr)
	}
	cfg.Backends = *b
	cfg.OpsAddr, cfg.Pprof, cfg.OpsTLS = c.opsAddr, c.pprof, c.opsTLS
	cfg.TLS = c.tls

	// The demo page mints tokens with the public dev secret: mounted only
	// when device tokens are JWTs checked with that secret.
	devSecret := checksDevSecret(cfg.Station)
	demoPage := devSecret
	if demoPage {
		cfg.Boat.WSHandler = demo.Handler(cfg.Station.JWTSecret)
	} else if slices.Contains(services, "boat") {
		// Otherwise its address answers 404 and nobody would know why.
		log.Info("demo page off: it mints device tokens with the public dev secret, which station does not accept here",
			zap.String("reason", demoOff(cfg.Station)))
	}
	cl, err := app.StartCluster(ctx, *cfg, log)
	if err != nil {
		return err
	}
	lines = append(lines, external...)
	if cl.Station != nil {
		lines = append(lines,
			"push api (grpc)         "+cl.Station.PushAddr(),
			"push api (http/json)    http://"+cl.Station.PushHTTPAddr()+"/v1/push",
			"station (internal)      "+cl.Station.InternalAddr(),
			"admin console           "+orOff(consoleURL(cl.Station.ConsoleAddr())))
	}
	if cl.Ops != nil {
		lines = append(lines, "metrics, health         http://"+cl.Ops.Addr()+"/metrics /healthz /readyz")
	}
	if cl.Boat != nil {
		lines = append(lines,
			"client stream (boat)    "+cl.Boat.ClientAddr(),
			"client websocket (boat) "+orOff(cl.Boat.WSURL()),
			"client mqtt (boat)      "+orOff(cl.Boat.MQTTAddr()),
			"boat (internal)         "+cl.Boat.InternalAddr())
		if demoPage && cl.Boat.WSAddr() != "" {
			lines = append(lines, "demo page (dev only)    "+strings.Replace(strings.TrimSuffix(cl.Boat.WSURL(), boat.WSPath), "ws", "http", 1)+"/")
		}
	}
	if devSecret {
		lines = append(lines, "jwt secret (dev only)   "+app.DevJWTSecret)
	}
	if cl.Station != nil {
		lines = append(lines, "api key (dev only)      "+app.DevAPIKey)
	}
	fmt.Printf("gomsg dev %s is up (services: %s). Ctrl-C stops it.\n  %s\n", version,
		strings.Join(orNone(services), ","), strings.Join(lines, "\n  "))
	go func() {
		<-ctx.Done()
		_ = cl.Stop()
	}()
	return cl.Wait()
}

// consoleURL is the console's address as a URL; "" when it is off.
func consoleURL(addr string) string {
	if addr == "" {
		return ""
	}
	return "http://" + addr + "/"
}

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

func orNone(s []string) []string {
	if len(s) == 0 {
		return []string{"none"}
	}
	return s
}

func nextPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65534 {
		return "", fmt.Errorf("%q: port must be 1-65534", addr)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

// checksDevSecret reports whether station checks device tokens as JWTs
// signed with the public dev secret: not when a secret file or an external
// auth service replaces it (the flag keeps its dev default then).
func checksDevSecret(o app.StationOptions) bool { return demoOff(o) == "" }

// demoOff says why station does not check device tokens with the public dev
// secret (so the demo page, which mints with it, is off); "" when it does.
func demoOff(o app.StationOptions) string {
	switch {
	case o.AuthAddr != "":
		return "device tokens are checked by --auth-addr"
	case o.JWTSecretFile != "":
		return "device tokens are checked with the secret of --jwt-secret-file"
	case o.JWTSecret != app.DevJWTSecret:
		return "device tokens are checked with the secret of GOMSG_JWT_SECRET / --jwt-secret"
	}
	return ""
}
