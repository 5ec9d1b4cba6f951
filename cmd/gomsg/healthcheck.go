package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

func healthcheckFlags() (fs *flag.FlagSet, url *string, timeout *time.Duration) {
	fs = flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	url = fs.String("url", "http://127.0.0.1:9090/readyz", "URL to GET; healthy when it answers 200")
	timeout = fs.Duration("timeout", 3*time.Second, "time limit of the request")
	return fs, url, timeout
}

// runHealthcheck asks an ops endpoint (by default this container's /readyz)
// whether the process is ready, and fails unless it answers 200. It exists
// for container health checks: the image is distroless, with no shell, curl
// or wget, so `docker compose` and others run `gomsg healthcheck` instead.
func runHealthcheck(ctx context.Context, args []string) error {
	fs, url, timeout := healthcheckFlags()
	if err := parse(fs, args); err != nil {
		return err
	}
	if *timeout <= 0 {
		return fmt.Errorf("timeout: %s, must be positive", *timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", *url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
