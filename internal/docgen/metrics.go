package docgen

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricsSection is the name of the generated section of
// docs/operations.md.
const MetricsSection = "metrics"

// sharedMetrics names the services of the metrics whose name does not
// start with gomsg_<service>_.
var sharedMetrics = map[string]string{
	"gomsg_auth_failures_total":         "boat, station",
	"gomsg_backend_errors_total":        "all",
	"gomsg_consumer_buffered_bytes":     "carrier, horn",
	"gomsg_consumer_lag":                "carrier, horn",
	"gomsg_limit_rejections_total":      "boat, station",
	"gomsg_presence_dropped_total":      "station",
	"gomsg_presence_events_total":       "station",
	"gomsg_receipts_applied_total":      "carrier",
	"gomsg_receipts_skipped_total":      "carrier",
	"gomsg_receipts_store_errors_total": "carrier",
	"gomsg_unwritable_records_total":    "carrier, horn",
}

var serviceOrder = []string{"boat", "station", "carrier", "horn", "all"}

// desc matches prometheus.Desc's String form.
var desc = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), constLabels: \{[^}]*\}, variableLabels: \{([^}]*)\}\}$`)

type metricDoc struct{ name, labels, service, help string }

// Metrics renders the gomsg_* metrics of collector (internal/metrics'
// registry) as a Markdown table: name with its labels, the services that
// export it, its help text.
func Metrics(collector prometheus.Collector) (string, error) {
	ch := make(chan *prometheus.Desc)
	go func() { collector.Describe(ch); close(ch) }()
	var docs []metricDoc
	var err error
	for d := range ch {
		m := desc.FindStringSubmatch(d.String())
		if m == nil {
			err = fmt.Errorf("cannot read the metric description %s", d)
			continue
		}
		name, _ := strconv.Unquote(m[1])
		help, _ := strconv.Unquote(m[2])
		if !strings.HasPrefix(name, "gomsg_") {
			continue
		}
		md := metricDoc{name: name, help: help, service: sharedMetrics[name]}
		if labels := strings.TrimSpace(m[3]); labels != "" {
			md.labels = "{" + strings.ReplaceAll(labels, " ", "") + "}"
		}
		if md.service == "" {
			for _, s := range serviceOrder {
				if strings.HasPrefix(name, "gomsg_"+s+"_") {
					md.service = s
				}
			}
		}
		if md.service == "" && err == nil {
			err = fmt.Errorf("metric %s: no service known: name it gomsg_<service>_… or add it to docgen's sharedMetrics", name)
		}
		docs = append(docs, md)
	}
	if err != nil {
		return "", err
	}
	rank := func(s string) int {
		first, _, _ := strings.Cut(s, ",")
		for i, o := range serviceOrder {
			if o == first {
				return i
			}
		}
		return len(serviceOrder)
	}
	sort.Slice(docs, func(i, j int) bool {
		ri, rj := rank(docs[i].service), rank(docs[j].service)
		return ri < rj || ri == rj && docs[i].name < docs[j].name
	})
	var b strings.Builder
	b.WriteString("| metric | service | what it counts |\n|---|---|---|\n")
	for _, d := range docs {
		fmt.Fprintf(&b, "| `%s%s` | %s | %s |\n", d.name, d.labels, d.service, Cell(d.help))
	}
	return b.String(), nil
}
