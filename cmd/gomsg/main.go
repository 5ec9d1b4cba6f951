// Command gomsg runs gomsg's services: boat, station, carrier and horn, each
// as its own process, or all of them on embedded backends with `gomsg dev`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gomsg/gomsg/internal/buildinfo"
)

// version is the module version from the build information (internal/buildinfo).
var version = buildinfo.Read().Version

const usage = `gomsg — a distributed push service

Usage:
  gomsg dev      [flags]   all services in one process on embedded etcd, Kafka and Redis
  gomsg boat     [flags]   holds client streams
  gomsg station  [flags]   sessions and the Push API
  gomsg carrier  [flags]   delivers, stores offline, repairs sessions
  gomsg horn     [flags]   mobile notifications (APNs / FCM)
  gomsg keygen   [--scopes S] [--name N]   a new Push API key and its --api-keys-file line
  gomsg healthcheck [--url URL]   exit 0 when URL (default the local /readyz) answers 200
  gomsg token --uid U --platform P [--room R] [--ttl D]   a device token signed with $GOMSG_JWT_SECRET
  gomsg version

Every flag can also be set as an environment variable: --redis-addrs is
GOMSG_REDIS_ADDRS. Run "gomsg <command> -h" for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "dev":
		err = runDev(ctx, args)
	case "boat":
		err = runBoat(ctx, args)
	case "station":
		err = runStation(ctx, args)
	case "carrier":
		err = runCarrier(ctx, args)
	case "horn":
		err = runHorn(ctx, args)
	case "keygen":
		err = runKeygen(args, os.Stdout)
	case "healthcheck":
		err = runHealthcheck(ctx, args)
	case "flags": // not in the usage: it writes docs/configuration.md (make docs)
		err = runFlags(args, os.Stdout)
	case "token":
		err = osToken(args)
	case "version", "-version", "--version":
		fmt.Println("gomsg", buildinfo.Read())
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "gomsg: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		if ctx.Err() != nil {
			// Stopped by a signal, maybe in the middle of start-up: that
			// is what was asked for.
			if !errors.Is(err, context.Canceled) {
				fmt.Fprintf(os.Stderr, "gomsg %s: while stopping: %v\n", cmd, err)
			}
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "gomsg %s: %v\n", cmd, err)
		os.Exit(1)
	}
}
