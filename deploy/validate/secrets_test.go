package validate

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynfake "k8s.io/client-go/dynamic/fake"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// fakeCluster answers the chart's lookup calls from a fake API server
// holding objs.
type fakeCluster struct{ client dynamic.Interface }

func (c fakeCluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, false, err
	}
	resource := strings.ToLower(kind) + "s"
	return c.client.Resource(gv.WithResource(resource)), kind != "Namespace", nil
}

// renderUpgrade renders the chart as `helm upgrade` does against a cluster
// that holds objs.
func renderUpgrade(t *testing.T, release string, vals map[string]any, objs ...runtime.Object) map[string]string {
	t.Helper()
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	sch := runtime.NewScheme()
	if err := corev1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsUpgrade: true, Revision: 2},
		chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	files, err := engine.RenderWithClientProvider(ch, rv, fakeCluster{dynfake.NewSimpleDynamicClient(sch, objs...)})
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return files
}

// jwtSecrets returns the Secrets with a jwt-secret key in the rendered files.
func jwtSecrets(t *testing.T, files map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, body := range files {
		for _, doc := range strings.Split(body, "\n---") {
			var s corev1.Secret
			if err := yaml.Unmarshal([]byte(doc), &s); err != nil || s.Kind != "Secret" {
				continue
			}
			if v, ok := s.Data["jwt-secret"]; ok {
				out[s.Name] = string(v)
			} else if _, ok := s.StringData["jwt-secret"]; ok {
				t.Errorf("%s: Secret %s has jwt-secret in stringData", name, s.Name)
			}
		}
	}
	return out
}

// TestJWTSecretKeptAcrossUpgrades: an upgrade keeps the generated JWT secret
// the cluster holds (re-generating it would log every device out), and
// auth.existingSecret makes the chart render no JWT Secret of its own.
func TestJWTSecretKeptAcrossUpgrades(t *testing.T) {
	t.Parallel()
	const release = "keep"
	fresh := jwtSecrets(t, renderUpgrade(t, release, map[string]any{}))
	if len(fresh) != 1 {
		t.Fatalf("JWT Secrets rendered on an empty cluster: %v, want 1", fresh)
	}
	var name string
	for n, v := range fresh {
		name = n
		if len(v) < 32 {
			t.Errorf("generated JWT secret is %d bytes, want at least 32", len(v))
		}
	}
	const kept = "the-secret-the-cluster-already-holds-0123456789"
	old := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Data:       map[string][]byte{"jwt-secret": []byte(kept)}}
	for i := 0; i < 2; i++ {
		got := jwtSecrets(t, renderUpgrade(t, release, map[string]any{}, old))
		if got[name] != kept {
			t.Fatalf("upgrade %d rendered Secret %s with %q, want the existing %q", i+1, name, got[name], kept)
		}
	}

	files := renderUpgrade(t, release, map[string]any{"auth": map[string]any{"existingSecret": "my-jwt"}}, old)
	if got := jwtSecrets(t, files); len(got) != 0 {
		t.Errorf("with auth.existingSecret the chart renders JWT Secrets %v, want none", keys(got))
	}
	if !strings.Contains(files["gomsg/templates/station.yaml"], "name: my-jwt") {
		t.Errorf("with auth.existingSecret station does not read the Secret my-jwt:\n%s", files["gomsg/templates/station.yaml"])
	}
}

// TestComposePublishesOnLoopback: the compose file publishes every port on
// 127.0.0.1 only, as the README says; a developer's stack is not reachable
// from the network.
func TestComposePublishesOnLoopback(t *testing.T) {
	t.Parallel()
	eachComposeVariant(t, func(t *testing.T, _ composeVariant, p *types.Project) {
		n := 0
		for name, s := range p.Services {
			for _, pc := range s.Ports {
				n++
				if pc.HostIP != "127.0.0.1" {
					t.Errorf("service %s publishes %s:%d on host address %q, want 127.0.0.1", name, pc.Published, pc.Target, pc.HostIP)
				}
			}
		}
		if n == 0 {
			t.Fatal("the compose file publishes no port")
		}
	})
}

// docPages are the pages that tell people which GOMSG_* variables to set:
// the README, the chart's README and every page under docs/ (the reference
// lives there; docs/pending holds sections not yet placed).
func docPages(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	pages := []string{"README.md", filepath.Join("deploy", "helm", "gomsg", "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "pending" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			pages = append(pages, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// pagesThatNameVariables are the pages whose job is to name settings: one
// that names none has lost its reference (or the pattern below stopped
// matching), and the test would pass for nothing.
var pagesThatNameVariables = []string{
	filepath.Join("docs", "configuration.md"),
	filepath.Join("docs", "getting-started.md"),
	filepath.Join("docs", "operations.md"),
	filepath.Join("docs", "security.md"),
	filepath.Join("deploy", "helm", "gomsg", "README.md"),
}

// TestReadmesNameRealVariables: every GOMSG_* variable the READMEs and the
// docs/ pages name is a setting of gomsg (a flag of one of its commands) or
// of gomsgctl.
func TestReadmesNameRealVariables(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, cmd := range append([]string{"dev"}, services...) {
		for name := range serviceFlags(t, cmd) {
			known[name] = true
		}
	}
	for _, sub := range [][]string{{"keygen"}, {"healthcheck"}, {"token"}} {
		fs, out, ok := helpFlags(t, binary(t, "gomsg"), sub...)
		if !ok {
			t.Fatalf("gomsg %v -h:\n%s", sub, out)
		}
		for name := range fs {
			known[name] = true
		}
	}
	for _, sub := range [][]string{{"listen"}, {"push"}, {"online"}, {"broadcast"}, {"rooms"}, {"status"},
		{"device", "register"}, {"device", "list"}} {
		fs, out, ok := helpFlags(t, binary(t, "gomsgctl"), sub...)
		if !ok {
			t.Fatalf("gomsgctl %v -h:\n%s", sub, out)
		}
		for name := range fs {
			known[name] = true
		}
	}
	re := regexp.MustCompile(`GOMSG_[A-Z0-9_]*[A-Z0-9]`)
	// A page's example of a mistyped variable is named on purpose.
	typo := regexp.MustCompile(`(GOMSG_[A-Z0-9_]+)` + "`?" + `\s*→\s*"did you mean`)
	pages := docPages(t)
	for _, must := range pagesThatNameVariables {
		if !slices.Contains(pages, must) {
			t.Errorf("%s is missing", must)
		}
	}
	for _, page := range pages {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), page))
		if err != nil {
			t.Fatal(err)
		}
		typos := map[string]bool{}
		for _, m := range typo.FindAllStringSubmatch(string(b), -1) {
			typos[m[1]] = true
		}
		var named []string
		for _, env := range re.FindAllString(string(b), -1) {
			if !slices.Contains(named, env) && !typos[env] {
				named = append(named, env)
			}
		}
		if len(named) == 0 && slices.Contains(pagesThatNameVariables, page) {
			t.Errorf("%s names no GOMSG_* variable", page)
		}
		for _, env := range named {
			if name, _ := flagOfEnv(env); !known[name] {
				t.Errorf("%s names %s, but no gomsg or gomsgctl command has a flag --%s", page, env, name)
			}
		}
	}
}
