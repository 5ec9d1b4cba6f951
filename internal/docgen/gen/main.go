// Command gen writes the generated sections of the docs/ pages that come
// from code outside cmd/gomsg: the Push API reference (docs/push-api.md, from
// pb/pushpb's OpenAPI document) and the metrics (docs/operations.md, from
// internal/metrics). `make docs` runs it from the repository's root, after
// `gomsg flags --markdown --write docs/configuration.md`.
package main

import (
	"fmt"
	"os"

	"github.com/gomsg/gomsg/internal/docgen"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/pb/pushpb"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func run() error {
	api, err := docgen.PushAPI(pushpb.OpenAPI)
	if err != nil {
		return err
	}
	if err := docgen.WriteSection("docs/push-api.md", docgen.PushAPISection, api); err != nil {
		return err
	}
	m, err := docgen.Metrics(metrics.New().Registry)
	if err != nil {
		return err
	}
	return docgen.WriteSection("docs/operations.md", docgen.MetricsSection, m)
}
