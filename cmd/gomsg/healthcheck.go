package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gomsg/gomsg/internal/tlsx"
)

type healthcheckOpts struct {
	url     string
	timeout time.Duration
	caFile  string
}

func healthcheckFlags() (*flag.FlagSet, *healthcheckOpts) {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	o := &healthcheckOpts{}
	fs.StringVar(&o.url, "url", "http://127.0.0.1:9090/readyz", "URL to GET; healthy when it answers 200")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Second, "time limit of the request")
	fs.StringVar(&o.caFile, "ca-file", "", "PEM CA bundle verifying an https URL (an --ops-tls endpoint); default the system roots")
	return fs, o
}

// runHealthcheck asks an ops endpoint (by default this container's /readyz)
// whether the process is ready, and fails unless it answers 200. It exists
// for container health checks: the image is distroless, with no shell, curl
// or wget, so `docker compose` and others run `gomsg healthcheck` instead.
func runHealthcheck(ctx context.Context, args []string) error {
	fs, o := healthcheckFlags()
	if err := parse(fs, args); err != nil {
		return err
	}
	if o.timeout <= 0 {
		return fmt.Errorf("timeout: %s, must be positive", o.timeout)
	}
	client := http.DefaultClient
	if o.caFile != "" {
		pool, err := tlsx.LoadCAPool(o.caFile)
		if err != nil {
			return fmt.Errorf("ca-file: %w", err)
		}
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: tlsx.ClientConfig(pool, nil, "")}}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url, nil)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", o.url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
