package docgen

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// root is the repository's root, seen from this package.
const root = "../.."

// The committed pages hold what the generators make now.

func TestGeneratedSectionsAreCurrent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		page, section string
		generate      func() (string, error)
	}{
		{"docs/push-api.md", PushAPISection, func() (string, error) { return PushAPI(pushpb.OpenAPI) }},
		{"docs/operations.md", MetricsSection, func() (string, error) { return Metrics(metrics.New().Registry) }},
	} {
		want, err := c.generate()
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckSection(filepath.Join(root, filepath.FromSlash(c.page)), c.page, c.section, want); err != nil {
			t.Error(err)
		}
	}
}

// TestLinks follows every relative link and #anchor of README.md and docs/.
func TestLinks(t *testing.T) {
	t.Parallel()
	pages, err := Pages(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 15 {
		t.Fatalf("only %d pages found: %v", len(pages), pages)
	}
	broken, err := CheckLinks(root, pages)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range broken {
		t.Errorf("broken link: %s", b)
	}
}

// The generators and the checks themselves.

func TestPushAPICoversEveryMethod(t *testing.T) {
	t.Parallel()
	ref, err := PushAPI(pushpb.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	methods := pushpb.File_pushpb_push_proto.Services().ByName("Push").Methods()
	if methods.Len() < 10 {
		t.Fatalf("only %d methods in the Push service", methods.Len())
	}
	for i := 0; i < methods.Len(); i++ {
		if m := "gRPC `gomsg.push.Push/" + string(methods.Get(i).Name()) + "`."; !strings.Contains(ref, m) {
			t.Errorf("reference lacks %q", m)
		}
	}
	wantLines(t, ref,
		"### `POST /v1/push`",
		"| `idempotencyKey` | string | Optional idempotency key",
		"| `seqs` | list of int64 (a JSON string) |",
		"| `notification` | [Notification](#notification) |",
		"| `exclusiveMsgOptions` | map of string to int64 |",
		"| `DROPPED` | Nobody on the platform took it",
		"#### receipt.State")
	// Every type linked to is described.
	anchors := Anchors(ref)
	for _, l := range links(ref) {
		if frag, ok := strings.CutPrefix(l.target, "#"); ok && !anchors[frag] {
			t.Errorf("the reference links to #%s, which it does not describe", frag)
		}
	}
}

func TestMetricsListsEveryMetricAndRefusesAnUnknownService(t *testing.T) {
	t.Parallel()
	ref, err := Metrics(metrics.New().Registry)
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.Count(ref, "\n| `gomsg_")
	if rows < 40 {
		t.Fatalf("%d metrics listed", rows)
	}
	wantLines(t, ref,
		"| `gomsg_boat_sessions_online{boat}` | boat | Client sessions a boat holds. |",
		"| `gomsg_consumer_lag{topic}` | carrier, horn |",
		"| `gomsg_backend_errors_total{backend,op}` | all |")
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "gomsg_mystery_total", Help: "?"}))
	if _, err := Metrics(reg); err == nil || !strings.Contains(err.Error(), "gomsg_mystery_total") {
		t.Fatalf("a metric of no known service: %v", err)
	}
}

func TestSectionSpliceAndCheck(t *testing.T) {
	t.Parallel()
	const name = "thing"
	doc := "# Page\n\nprose\n\n" + beginMarker(name) + "\nold 1\nold 2\n" + endMarker(name) + "\n\nmore prose\n"
	got, err := Section([]byte(doc), name)
	if err != nil || got != "old 1\nold 2\n" {
		t.Fatalf("Section = %q, %v", got, err)
	}
	out, err := Splice([]byte(doc), name, "new")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(doc, "old 1\nold 2\n", "new\n", 1); string(out) != want {
		t.Fatalf("Splice:\n%s", out)
	}
	empty, err := Splice([]byte(doc), name, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Section(empty, name); got != "" {
		t.Fatalf("an emptied section holds %q", got)
	}
	if _, err := Section([]byte("# no markers\n"), name); !errors.Is(err, ErrNoSection) {
		t.Fatalf("no markers: %v", err)
	}
	if _, err := Section([]byte(beginMarker(name)+"\nx\n"), name); !errors.Is(err, ErrNoSection) {
		t.Fatalf("no end marker: %v", err)
	}

	page := filepath.Join(t.TempDir(), "page.md")
	if err := os.WriteFile(page, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckSection(page, "docs/page.md", name, "old 1\nold 2"); err != nil {
		t.Fatalf("a current section: %v", err)
	}
	err = CheckSection(page, "docs/page.md", name, "old 1\nnew 2\n")
	if err == nil {
		t.Fatal("a stale section passed the check")
	}
	for _, want := range []string{"docs/page.md", "run `make docs`", `line 2 of the section is "old 2", generated "new 2"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %q", err, want)
		}
	}
	if err := WriteSection(page, name, "new 1\n"); err != nil {
		t.Fatal(err)
	}
	if err := CheckSection(page, "docs/page.md", name, "new 1\n"); err != nil {
		t.Fatalf("after WriteSection: %v", err)
	}
}

func TestCheckLinksFindsBrokenLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		p = filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\n"+
		"[ok](docs/a.md) [ok anchor](docs/a.md#the-httpjson-api) [dir](docs/) [self](#top)\n"+ // 3
		"[gone](docs/missing.md) [bad anchor](docs/a.md#nope) ![img](docs/pic.png)\n"+ // 4
		"[web](https://example.com/x#y) [mail](mailto:a@b.c) `[code](nowhere.md)`\n"+ // 5
		"```sh\n[fenced](nowhere.md)\n```\n"+ // 6-8
		"[up](../outside.md) [anchor on dir](docs/#x) [anchor on go](main.go#L1)\n") // 9
	write("main.go", "package main\n")
	write("docs/a.md", "# A\n\n## The HTTP/JSON API\n\n## Repeat\n\n## Repeat\n\n"+
		"[second repeat](#repeat-1) [third](#repeat-2) [back](../README.md#top)\n") // 9
	write("docs/pending/draft.md", "[never checked](nowhere.md)\n")
	pages, err := Pages(dir)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(pages)
	if want := []string{"README.md", "docs/a.md"}; !reflect.DeepEqual(pages, want) {
		t.Fatalf("pages %v, want %v (docs/pending is left out)", pages, want)
	}
	broken, err := CheckLinks(dir, pages)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range broken {
		got = append(got, b.Page+":"+strconv.Itoa(b.Line)+" "+b.Target)
	}
	want := []string{
		"README.md:4 docs/missing.md",
		"README.md:4 docs/a.md#nope",
		"README.md:4 docs/pic.png",
		"README.md:9 ../outside.md",
		"README.md:9 docs/#x",
		"README.md:9 main.go#L1",
		"docs/a.md:9 #repeat-2",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("broken links\n got %q\nwant %q", got, want)
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]string{
		"Quick start":            "quick-start",
		"The HTTP/JSON Push API": "the-httpjson-push-api",
		"What `gomsg dev` runs":  "what-gomsg-dev-runs",
		"Consumer: partitions, per-key order, back-pressure": "consumer-partitions-per-key-order-back-pressure",
		"Kubernetes (Helm)":                     "kubernetes-helm",
		"Step 17: receipts (2026-11-27)":        "step-17-receipts-2026-11-27",
		"receipt.State":                         "receiptstate",
		"A [link](x.md) and ![img](y.png) here": "a-link-and--here",
		"carrier ↔ boat — cut":                  "carrier--boat--cut",
		"snake_case stays":                      "snake_case-stays",
	} {
		if got := Slug(h); got != want {
			t.Errorf("Slug(%q) = %q, want %q", h, got, want)
		}
	}
}

func TestCell(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                               "–",
		"a\n  b":                         "a b",
		"x | y":                          `x \| y`,
		"<task-topic>.dlq":               "&lt;task-topic&gt;.dlq",
		"scopes push, *":                 `scopes push, \*`,
		"one `<sha> <scope>` a line, * ": "one `<sha> <scope>` a line, \\*",
		"`a|b`":                          "`a\\|b`",
	} {
		if got := Cell(in); got != want {
			t.Errorf("Cell(%q) = %q, want %q", in, got, want)
		}
	}
}

// wantLines fails t for each of wants that ref does not contain.
func wantLines(t *testing.T, ref string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(ref, want) {
			t.Errorf("reference lacks %q", want)
		}
	}
}
