package metrics_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gomsg/gomsg/internal/metrics"
)

// metricInfo is a metric as internal/metrics defines it.
type metricInfo struct {
	labels    []string
	histogram bool
}

// defined lists every metric metrics.New registers, with its label names.
func defined(t *testing.T) map[string]metricInfo {
	t.Helper()
	m := metrics.New()
	out := map[string]metricInfo{}
	re := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok || v.Type().Field(i).Name == "Registry" {
			continue
		}
		typ := v.Field(i).Type().String()
		ch := make(chan *prometheus.Desc, 4)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			mm := re.FindStringSubmatch(d.String())
			if mm == nil {
				t.Fatalf("cannot read %s", d)
			}
			var labels []string
			if mm[2] != "" {
				labels = strings.Split(mm[2], ",")
			}
			out[mm[1]] = metricInfo{labels: labels, histogram: strings.Contains(typ, "Histogram")}
		}
	}
	return out
}

type target struct {
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Datasource   struct {
		UID string `json:"uid"`
	} `json:"datasource"`
}

type panel struct {
	ID      int                      `json:"id"`
	Type    string                   `json:"type"`
	Title   string                   `json:"title"`
	Targets []target                 `json:"targets"`
	Panels  []panel                  `json:"panels"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
}

var (
	metricRE   = regexp.MustCompile(`\b(gomsg_[a-z0-9_]+)`)
	byRE       = regexp.MustCompile(`\bby \(([^)]*)\)`)
	matcherRE  = regexp.MustCompile(`(gomsg_[a-z0-9_]+)\{([^}]*)\}`)
	legendRE   = regexp.MustCompile(`\{\{\s*([a-z_]+)\s*\}\}`)
	quantileRE = regexp.MustCompile(`histogram_quantile\([0-9.]+, [^\n]*?rate\((gomsg_[a-z0-9_]+)`)
)

// TestGrafanaDashboard checks deploy/grafana/gomsg.json against the metrics
// gomsg defines: every query names real metrics and labels, quantiles are
// taken over histograms, and every metric is on the dashboard.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "gomsg.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string  `json:"uid"`
		Title      string  `json:"title"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct{ Name, Type string } `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("gomsg.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Error("dashboard without uid or title")
	}
	if !slices.ContainsFunc(dash.Templating.List, func(v struct{ Name, Type string }) bool {
		return v.Name == "datasource" && v.Type == "datasource"
	}) {
		t.Error("no $datasource variable")
	}
	defs := defined(t)
	used := map[string]bool{}
	ids := map[int]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 || p.GridPos.W == 0 || p.GridPos.H == 0 {
				t.Errorf("panel %q has no queries or no size", p.Title)
			}
			for _, tg := range p.Targets {
				checkQuery(t, p.Title, tg, defs, used)
			}
		}
	}
	walk(dash.Panels)
	for name := range defs {
		if !used[name] {
			t.Errorf("metric %s is not on the dashboard", name)
		}
	}
}

func checkQuery(t *testing.T, title string, tg target, defs map[string]metricInfo, used map[string]bool) {
	t.Helper()
	if tg.Datasource.UID != "${datasource}" {
		t.Errorf("%q: datasource %q, want ${datasource}", title, tg.Datasource.UID)
	}
	labels := map[string]bool{}
	base := func(series string) (string, bool) {
		if _, ok := defs[series]; ok {
			return series, true
		}
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(series, suf); ok && defs[b].histogram {
				if suf == "_bucket" {
					labels["le"] = true
				}
				return b, true
			}
		}
		return "", false
	}
	names := metricRE.FindAllString(tg.Expr, -1)
	if len(names) == 0 {
		t.Errorf("%q: query %q names no gomsg metric", title, tg.Expr)
	}
	for _, series := range names {
		b, ok := base(series)
		if !ok {
			t.Errorf("%q: %s is not a metric internal/metrics defines (query %q)", title, series, tg.Expr)
			continue
		}
		used[b] = true
		for _, l := range defs[b].labels {
			labels[l] = true
		}
	}
	for _, m := range byRE.FindAllStringSubmatch(tg.Expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); !labels[l] {
				t.Errorf("%q: groups by %q, not a label of %v (query %q)", title, l, names, tg.Expr)
			}
		}
	}
	for _, m := range matcherRE.FindAllStringSubmatch(tg.Expr, -1) {
		b, _ := base(m[1])
		for _, kv := range strings.Split(m[2], ",") {
			l := strings.TrimSpace(strings.FieldsFunc(kv, func(r rune) bool { return r == '=' || r == '!' || r == '~' })[0])
			if !slices.Contains(defs[b].labels, l) {
				t.Errorf("%q: matcher on %q, not a label of %s", title, l, b)
			}
		}
	}
	for _, m := range quantileRE.FindAllStringSubmatch(tg.Expr, -1) {
		if b, ok := strings.CutSuffix(m[1], "_bucket"); !ok || !defs[b].histogram {
			t.Errorf("%q: histogram_quantile over %s, not a histogram's _bucket", title, m[1])
		}
	}
	for _, m := range legendRE.FindAllStringSubmatch(tg.LegendFormat, -1) {
		if !labels[m[1]] || !strings.Contains(tg.Expr, "by (") {
			t.Errorf("%q: legend uses {{%s}}, which the query does not keep", title, m[1])
		}
	}
}
