package validate

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// checkRules: the PrometheusRule renders only when prometheusRule.enabled
// (the production values), in the release's namespace, with the alerts on
// dead letters, consumer lag and readiness, the thresholds from the values
// (production: 10 dead letters), and every gomsg metric it queries is one
// the services export.
func checkRules(t *testing.T, o *objects, want bool) {
	t.Helper()
	if !want {
		if len(o.rules) != 0 {
			t.Errorf("PrometheusRule rendered although prometheusRule.enabled is false")
		}
		return
	}
	if len(o.rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(o.rules))
	}
	exported := exportedMetrics(t)
	metric := regexp.MustCompile(`\bgomsg_[a-z0-9_]+`)
	for _, r := range o.rules {
		if r.Labels["release"] != "kube-prometheus-stack" {
			t.Errorf("PrometheusRule labels %v, want prometheusRule.labels' release", r.Labels)
		}
		exprs := map[string]string{}
		for _, g := range r.Spec.Groups {
			for _, rule := range g.Rules {
				exprs[rule.Alert] = rule.Expr.String()
			}
		}
		for _, a := range []string{"GomsgDeadLettersWaiting", "GomsgDeadLettersOld", "GomsgConsumerLag", "GomsgNotReady"} {
			e, ok := exprs[a]
			if !ok {
				t.Errorf("PrometheusRule has no alert %s (has %v)", a, exprs)
				continue
			}
			if !strings.Contains(e, `namespace="`+namespace+`"`) {
				t.Errorf("alert %s: %q is not limited to namespace %s", a, e, namespace)
			}
			for _, m := range metric.FindAllString(e, -1) {
				if !slices.Contains(exported, m) {
					t.Errorf("alert %s queries %s, which no service exports", a, m)
				}
			}
		}
		if e := exprs["GomsgDeadLettersWaiting"]; !strings.HasSuffix(e, "gomsg_station_dlq_records{namespace=\""+namespace+"\"}) > 10") {
			t.Errorf("GomsgDeadLettersWaiting: %q, want max of gomsg_station_dlq_records above the values' 10", e)
		}
		if e := exprs["GomsgNotReady"]; !strings.Contains(e, "prod-gomsg-(boat|station|carrier|horn)-") && !strings.Contains(e, "prod-(boat|station|carrier|horn)-") {
			t.Errorf("GomsgNotReady: %q does not select the release's pods", e)
		}
	}
}

// exportedMetrics are the names of the metrics gomsg's services define
// (this module cannot import the server's: it reads its source).
func exportedMetrics(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "internal", "metrics", "metrics.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`Name: "(gomsg_[a-z0-9_]+)"`).FindAllStringSubmatch(string(src), -1) {
		names = append(names, m[1])
	}
	if len(names) < 10 {
		t.Fatalf("found %d metric names in internal/metrics/metrics.go", len(names))
	}
	return names
}
