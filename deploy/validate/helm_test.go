package validate

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

const namespace = "messaging"

// kubeVersions: the chart's minimum and a current release.
var kubeVersions = []string{"v1.30.0", "v1.34.0"}

func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "deploy", "helm", "gomsg") }

func kubeVersion(t testing.TB, v string) *chartutil.KubeVersion {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	return &chartutil.KubeVersion{Version: v, Major: parts[0], Minor: parts[1]}
}

func readValues(t testing.TB, file string) map[string]any {
	t.Helper()
	if file == "" {
		return map[string]any{}
	}
	v, err := chartutil.ReadValuesFile(filepath.Join(chartDir(t), file))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// valueSets are the configurations every test renders.
var valueSets = []struct{ name, file, release string }{
	{"default", "", "gomsg"},
	{"production", "ci/production-values.yaml", "prod"},
	{"redis-cluster", "ci/redis-cluster-values.yaml", "cluster"},
}

func TestChartLintStrict(t *testing.T) {
	t.Parallel()
	for _, vs := range valueSets {
		for _, kv := range kubeVersions {
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = namespace
			lint.KubeVersion = kubeVersion(t, kv)
			res := lint.Run([]string{chartDir(t)}, readValues(t, vs.file))
			for _, m := range res.Messages {
				t.Logf("lint %s values, kube %s: %s", vs.name, kv, m)
			}
			if len(res.Errors) > 0 || res.TotalChartsLinted != 1 {
				t.Errorf("helm lint --strict with %s values, kube %s: %v", vs.name, kv, res.Errors)
			}
		}
	}
}

// render renders the chart like `helm template` (install, no cluster):
// values.schema.json is applied, and the chart's kubeVersion range checked.
func render(t testing.TB, release string, vals map[string]any, kv string) (map[string]string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kubeVersion(t, kv)
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, kv) {
		return nil, fmt.Errorf("chart requires kubeVersion %s, not %s", ch.Metadata.KubeVersion, kv)
	}
	rv, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: release, Namespace: namespace, IsInstall: true, Revision: 1}, caps)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, rv)
}

// objects are the rendered manifests, decoded strictly into their API types.
type objects struct {
	deployments  map[string]*appsv1.Deployment
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	pdbs         map[string]*policyv1.PodDisruptionBudget
	hpas         map[string]*autoscalingv2.HorizontalPodAutoscaler
	monitors     map[string]*monitoringv1.ServiceMonitor
	rules        map[string]*monitoringv1.PrometheusRule
	accounts     map[string]*corev1.ServiceAccount
	netpols      map[string]*networkingv1.NetworkPolicy
	count        int
	existingRefs map[string]bool // Secrets named in values, made outside the chart
}

// decode decodes every manifest strictly: unknown or duplicated fields fail.
func decode(t *testing.T, files map[string]string) *objects {
	t.Helper()
	o := &objects{deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, hpas: map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		monitors: map[string]*monitoringv1.ServiceMonitor{}, rules: map[string]*monitoringv1.PrometheusRule{}, accounts: map[string]*corev1.ServiceAccount{},
		netpols: map[string]*networkingv1.NetworkPolicy{}}
	for _, file := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(file, ".yaml") {
			continue
		}
		for _, doc := range releaseutil.SplitManifests(files[file]) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v\n%s", file, err, doc)
			}
			var (
				obj  any
				meta *metav1.ObjectMeta
				add  func(string)
			)
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 Deployment":
				v := &appsv1.Deployment{}
				obj, meta, add = v, &v.ObjectMeta, func(n string) { o.deployments[n] = v }
			case "v1 Service":
				v := &corev1.Service{}
				obj, meta, add = v, &v.ObjectMeta, func(n string) { o.services[n] = v }
			case "v1 ConfigMap":
				v := &corev1.ConfigMap{}
				obj, meta, add = v, &v.ObjectMeta, func(n string) { o.configMaps[n] = v }
			case "v1 Secret":
				v := &corev1.Secret{}
				obj, meta, add = v, &v.ObjectMeta, func(n string) { o.secrets[n] = v }
			case "v1 ServiceAccount":
				v := &corev1.ServiceAccount{}
				obj, meta, add = v, &v.ObjectMeta, func(n string) { o.accounts[n] = v }
			case "policy/v1 PodDisruptionBudget":
				v := &policyv1.PodDisruptionBudget{}
				obj, meta, add = v, &v.ObjectMeta, func(n string) { o.pdbs[n] = v }
			case "autoscaling/v2 HorizontalPodAutoscaler":
				v := &autoscalingv2.HorizontalPodAutoscaler{}
				obj, meta, add = v, &v.ObjectMeta, func(n string) { o.hpas[n] = v }
			case "networking.k8s.io/v1 NetworkPolicy":
				v := &networkingv1.NetworkPolicy{}
				obj, meta, add = v, &v.ObjectMeta, func(n string) { o.netpols[n] = v }
			case "monitoring.coreos.com/v1 ServiceMonitor":
				v := &monitoringv1.ServiceMonitor{}
				obj, meta, add = v, &v.ObjectMeta, func(n string) { o.monitors[n] = v }
			case "monitoring.coreos.com/v1 PrometheusRule":
				v := &monitoringv1.PrometheusRule{}
				obj, meta, add = v, &v.ObjectMeta, func(n string) { o.rules[n] = v }
			default:
				t.Errorf("%s: unexpected kind %s %s", file, tm.APIVersion, tm.Kind)
				continue
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s: %s does not decode strictly: %v\n%s", file, tm.Kind, err, doc)
				continue
			}
			checkMeta(t, file, tm.Kind, meta)
			add(meta.Name)
			o.count++
		}
	}
	return o
}

func checkMeta(t *testing.T, file, kind string, m *metav1.ObjectMeta) {
	t.Helper()
	errs := validation.IsDNS1123Subdomain(m.Name)
	if kind == "Service" {
		errs = validation.IsDNS1035Label(m.Name)
	}
	for _, e := range errs {
		t.Errorf("%s: %s name %q: %s", file, kind, m.Name, e)
	}
	for k, v := range m.Labels {
		for _, e := range append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...) {
			t.Errorf("%s: %s %s label %s=%q: %s", file, kind, m.Name, k, v, e)
		}
	}
	if m.Namespace != "" && m.Namespace != namespace {
		t.Errorf("%s: %s %s in namespace %q", file, kind, m.Name, m.Namespace)
	}
}

func renderObjects(t *testing.T, release, file, kv string) *objects {
	t.Helper()
	files, err := render(t, release, readValues(t, file), kv)
	if err != nil {
		t.Fatalf("render with %q values, kube %s: %v", file, kv, err)
	}
	o := decode(t, files)
	o.existingRefs = map[string]bool{}
	vals := readValues(t, file)
	for _, path := range [][]string{{"auth", "existingSecret"}, {"auth", "pushClientCASecret"}, {"horn", "apns", "existingSecret"}, {"horn", "fcm", "existingSecret"},
		{"backendCredentials", "redis", "existingSecret"}, {"backendCredentials", "kafka", "existingSecret"}, {"backendCredentials", "etcd", "existingSecret"},
		{"backendCredentials", "nats", "existingSecret"}} {
		if s, ok := dig(vals, path...).(string); ok && s != "" {
			o.existingRefs[s] = true
		}
	}
	return o
}

func dig(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func TestChartRendersAndDecodesStrictly(t *testing.T) {
	t.Parallel()
	for _, vs := range valueSets {
		for _, kv := range kubeVersions {
			t.Run(vs.name+"/"+kv, func(t *testing.T) {
				o := renderObjects(t, vs.release, vs.file, kv)
				if len(o.deployments) != 4 {
					t.Errorf("%d Deployments, want 4 (boat, station, carrier, horn)", len(o.deployments))
				}
				if len(o.pdbs) != 4 {
					t.Errorf("%d PodDisruptionBudgets, want 4", len(o.pdbs))
				}
				checkRules(t, o, vs.name == "production")
				t.Logf("%d objects", o.count)
			})
		}
	}
	if _, err := render(t, "gomsg", map[string]any{}, "v1.29.0"); err == nil {
		t.Error("the chart renders for Kubernetes 1.29, below its kubeVersion")
	}
}

// TestChartRejectsBadValues: values.schema.json and the templates' checks
// stop a bad configuration at render time.
func TestChartRejectsBadValues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		vals string
		want string
	}{
		{"unknown top-level key", "replicaCount: 3", "replicaCount"},
		{"unknown service key", "boat: {replica: 3}", "replica"},
		{"bad log level", "log: {level: loud}", "level"},
		{"bad probe", "carrier: {probe: grpc}", "probe"},
		{"bad duration", "carrier: {ackWait: soon}", "ackWait"},
		{"zero delivery retention", "carrier: {deliveryRetention: 0s}", "deliveryRetention"},
		{"port out of range", "boat: {clientPort: 70000}", "clientPort"},
		{"no kafka", "backends: {kafkaBrokers: []}", "kafkaBrokers"},
		{"unknown queue", "queue: {kind: rabbitmq}", "kind"},
		{"nats without a url", "queue: {kind: nats}", "queue.natsUrl: must be set"},
		{"nats url without scheme", "queue: {kind: nats, natsUrl: 'nats-1:4222'}", "natsUrl"},
		{"no redis", "backends: {redisAddrs: []}", "at '/backends/redisAddrs': minItems"},
		{"redis addresses in a string", "backends: {redisAddrs: 'a:6379,b:6379'}", "at '/backends/redisAddrs': got string, want array"},
		{"redis address without port", "backends: {redisAddrs: ['redis']}", "at '/backends/redisAddrs/0'"},
		{"redis cluster not a bool", "backends: {redisCluster: 'yes'}", "at '/backends/redisCluster': got string, want boolean"},
		{"deprecated redisAddr without port", "backends: {redisAddr: 'redis'}", "at '/backends/redisAddr'"},
		{"two redis servers", "backends: {redisAddrs: [a:6379, b:6379]}", "backends.redisAddrs has 2 addresses (a:6379,b:6379) without backends.redisCluster"},
		{"deprecated redisAddr in a cluster", "backends: {redisAddr: 'a:6379', redisAddrs: ['a:6379', 'b:6379'], redisCluster: true}",
			"backends.redisAddr a:6379 is the deprecated one-server setting"},
		{"deprecated redisAddr beside redisAddrs", "backends: {redisAddr: 'a:6379', redisAddrs: ['b:6379']}",
			"backends.redisAddr a:6379 and backends.redisAddrs b:6379 are both set"},
		{"bad kick policy", "station: {kickPolicy: kick-newer}", "kickPolicy"},
		{"apns without key", "horn: {apns: {enabled: true}}", "keyP8"},
		{"client CA without TLS", "auth: {pushClientCASecret: backend-ca}", "auth.pushClientCASecret needs tls.secretName"},
		{"public boat without TLS", "boat: {service: {type: LoadBalancer}}", "boat.service.allowPlaintext=true"},
		{"node port boat without TLS", "boat: {service: {type: NodePort}}", "boat.service.type NodePort exposes device tokens and messages outside the cluster in plaintext: set tls.secretName"},
		{"public station without TLS", "station: {service: {type: LoadBalancer}}", "station.service.type LoadBalancer exposes Push API keys and pushes"},
		{"allowPlaintext not a bool", "boat: {service: {type: LoadBalancer, allowPlaintext: 'yes'}}", "allowPlaintext"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var vals map[string]any
			if err := yaml.Unmarshal([]byte(tc.vals), &vals); err != nil {
				t.Fatal(err)
			}
			_, err := render(t, "gomsg", vals, kubeVersions[1])
			if err == nil {
				t.Fatalf("values %q render without error", tc.vals)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("values %q: error does not name %q: %v", tc.vals, tc.want, err)
			}
		})
	}
}

// containerEnv collects a container's variables: envFrom ConfigMaps first,
// then env (which wins). Values from fieldRef/secretKeyRef are "<ref>".
func containerEnv(t *testing.T, o *objects, where string, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			t.Errorf("%s: envFrom other than a ConfigMap: %+v", where, ef)
			continue
		}
		cm, ok := o.configMaps[ef.ConfigMapRef.Name]
		if !ok {
			t.Errorf("%s: envFrom ConfigMap %s is not rendered", where, ef.ConfigMapRef.Name)
			continue
		}
		maps.Copy(env, cm.Data)
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			env[e.Name] = "<ref>"
		} else {
			// $(VAR) must name a variable defined earlier in env.
			for _, ref := range depVars(e.Value) {
				if !seen[ref] {
					t.Errorf("%s: %s refers to $(%s), not defined before it", where, e.Name, ref)
				}
			}
			env[e.Name] = e.Value
		}
		seen[e.Name] = true
	}
	return env
}

func depVars(v string) []string {
	var out []string
	for {
		i := strings.Index(v, "$(")
		if i < 0 {
			return out
		}
		j := strings.Index(v[i:], ")")
		if j < 0 {
			return out
		}
		out = append(out, v[i+2:i+j])
		v = v[i+j+1:]
	}
}

func containerPort(c corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// TestChartMatchesTheBinaries checks the rendered Deployments against what
// gomsg accepts and how it behaves: settings, ports, probes, drain time,
// secrets, and the Services, PDBs, HPAs and ServiceMonitor around them.
func TestChartMatchesTheBinaries(t *testing.T) {
	t.Parallel()
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			o := renderObjects(t, vs.release, vs.file, kubeVersions[1])
			settings := map[string]map[string]string{}
			podLabels := map[string]labels.Set{}
			for _, name := range slices.Sorted(maps.Keys(o.deployments)) {
				d := o.deployments[name]
				spec := d.Spec.Template.Spec
				if len(spec.Containers) != 1 {
					t.Fatalf("%s: %d containers", name, len(spec.Containers))
				}
				c := spec.Containers[0]
				if len(c.Args) != 1 || !slices.Contains(services, c.Args[0]) || len(c.Command) != 0 {
					t.Fatalf("%s: command %q args %q, want the image's entrypoint with one service", name, c.Command, c.Args)
				}
				svc := c.Args[0]
				where := fmt.Sprintf("Deployment %s (gomsg %s)", name, svc)
				podLabels[svc] = d.Spec.Template.Labels
				sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
				if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("%s: selector does not match its pods: %v", where, err)
				}
				env := containerEnv(t, o, where, c)
				eff := checkEnv(t, where, svc, env)
				settings[svc] = eff

				// Non-root, no privilege escalation, read-only root.
				psc, sc := spec.SecurityContext, c.SecurityContext
				if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || sc == nil ||
					sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("%s: not locked down (runAsNonRoot, allowPrivilegeEscalation false, readOnlyRootFilesystem)", where)
				}
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("%s: resources %+v lack cpu/memory requests or a memory limit", where, c.Resources)
				}

				// Every listener is a named container port; ops is "ops".
				for _, f := range listenFlags[svc] {
					if eff[f] == "" { // a listener that is off (the console by default)
						continue
					}
					p := port(t, where+" --"+f, eff[f])
					if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return int(cp.ContainerPort) == p }) {
						t.Errorf("%s: listens on %d (--%s) but declares no such container port", where, p, f)
					}
				}
				opsPort, ok := containerPort(c, "ops")
				if !ok || int(opsPort) != port(t, where, eff["ops-addr"]) {
					t.Errorf("%s: container port \"ops\" %d is not --ops-addr %s", where, opsPort, eff["ops-addr"])
				}

				// Probes: startup and liveness on /healthz, readiness on
				// /readyz or grpc.health.v1 where the service serves it.
				if c.StartupProbe == nil || c.LivenessProbe == nil || c.ReadinessProbe == nil {
					t.Fatalf("%s: startup, liveness and readiness probes are required", where)
				}
				for _, p := range []struct {
					what string
					pr   *corev1.Probe
					path string
				}{{"startup", c.StartupProbe, "/healthz"}, {"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
					switch {
					case p.pr.HTTPGet != nil && p.what == "readiness" && svc == "station":
						checkStationReadiness(t, where, p.pr.HTTPGet)
					case p.pr.HTTPGet != nil:
						if p.pr.HTTPGet.Path != p.path || p.pr.HTTPGet.Port.String() != "ops" {
							t.Errorf("%s: %s probe GET %s on %s, want %s on ops", where, p.what, p.pr.HTTPGet.Path, p.pr.HTTPGet.Port.String(), p.path)
						}
					case p.pr.GRPC != nil && p.what == "readiness":
						// station registers grpc.health.v1 on its Push API
						// server; boat and carrier do not serve it (yet).
						if svc != "station" || int(p.pr.GRPC.Port) != port(t, where, eff["push-grpc-addr"]) {
							t.Errorf("%s: gRPC readiness probe on port %d, which serves no grpc.health.v1", where, p.pr.GRPC.Port)
						}
					default:
						t.Errorf("%s: unexpected %s probe %+v", where, p.what, p.pr.ProbeHandler)
					}
				}
				if spec.TerminationGracePeriodSeconds == nil {
					t.Fatalf("%s: no terminationGracePeriodSeconds", where)
				}
				tgp := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second

				// Credentials come from Secrets: the internal token on every
				// service with an internal API, station's API keys.
				secretEnv := map[string][]string{"boat": {"GOMSG_INTERNAL_TOKEN"}, "carrier": {"GOMSG_INTERNAL_TOKEN"},
					"station": {"GOMSG_INTERNAL_TOKEN", "GOMSG_API_KEYS"}}
				for _, name := range secretEnv[svc] {
					i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
					if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil {
						t.Errorf("%s: %s does not come from a Secret", where, name)
						continue
					}
					checkSecretKey(t, o, where, c.Env[i].ValueFrom.SecretKeyRef.Name, c.Env[i].ValueFrom.SecretKeyRef.Key)
				}
				switch svc {
				case "boat":
					checkBoatPod(t, where, c, eff, tgp)
				case "station":
					jwt := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMSG_JWT_SECRET" })
					if _, viaAuth := env["GOMSG_AUTH_ADDR"]; !viaAuth {
						if jwt < 0 || c.Env[jwt].ValueFrom == nil || c.Env[jwt].ValueFrom.SecretKeyRef == nil {
							t.Errorf("%s: GOMSG_JWT_SECRET does not come from a Secret", where)
						} else {
							ref := c.Env[jwt].ValueFrom.SecretKeyRef
							checkSecretKey(t, o, where, ref.Name, ref.Key)
						}
					}
					if svc := checkServiceFor(t, o, "station-internal", eff["station-internal-addr"]); svc != "" {
						if got := settings["boat"]["station-addr"]; got != "" && !strings.HasPrefix(got, svc+":") {
							t.Errorf("boat --station-addr %s is not the Service %s", got, svc)
						}
					}
					if path := eff["push-client-ca-file"]; path != "" {
						checkMountedFile(t, o, where, spec, c, path)
					}
				case "horn":
					for _, f := range []string{"apns-key-file", "fcm-credentials-file"} {
						if path := eff[f]; path != "" {
							checkMountedFile(t, o, where, spec, c, path)
						}
					}
				}
				for _, v := range spec.Volumes {
					if v.Secret != nil {
						for _, it := range v.Secret.Items {
							checkSecretKey(t, o, where, v.Secret.SecretName, it.Key)
						}
					}
				}
				if hpa, ok := o.hpas[name]; ok {
					if d.Spec.Replicas != nil {
						t.Errorf("%s: sets replicas while an HPA scales it", where)
					}
					if hpa.Spec.ScaleTargetRef.Name != name || hpa.Spec.ScaleTargetRef.Kind != "Deployment" {
						t.Errorf("HPA %s scales %+v", hpa.Name, hpa.Spec.ScaleTargetRef)
					}
				}
				if pdb, ok := o.pdbs[name]; !ok {
					t.Errorf("%s: no PodDisruptionBudget", where)
				} else if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("PodDisruptionBudget %s does not select %s's pods", pdb.Name, name)
				}
			}
			if b := settings["boat"]; b != nil {
				if st := settings["station"]; st != nil && !strings.HasSuffix(b["station-addr"], ":"+strconv.Itoa(port(t, "station", st["station-internal-addr"]))) {
					t.Errorf("boat --station-addr %s is not station's internal port (%s)", b["station-addr"], st["station-internal-addr"])
				}
			}
			checkServices(t, o, podLabels, vs.name == "production")
			checkMonitors(t, o, vs.name == "production")
			for name := range o.hpas {
				if _, ok := o.deployments[name]; !ok {
					t.Errorf("HPA %s has no Deployment", name)
				}
			}
		})
	}
}

func checkBoatPod(t *testing.T, where string, c corev1.Container, eff map[string]string, tgp time.Duration) {
	t.Helper()
	fieldOf := func(name string) string {
		for _, e := range c.Env {
			if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				return e.ValueFrom.FieldRef.FieldPath
			}
		}
		return ""
	}
	// Unique boat id = pod name; carrier dials the pod's own IP.
	id := eff["boat-id"]
	if vars := depVars(id); len(vars) != 1 || id != "$("+vars[0]+")" || fieldOf(vars[0]) != "metadata.name" {
		t.Errorf("%s: --boat-id %q is not the pod name", where, id)
	}
	adv := eff["boat-advertise-addr"]
	internal := port(t, where, eff["boat-internal-addr"])
	if vars := depVars(adv); len(vars) != 1 || adv != fmt.Sprintf("$(%s):%d", vars[0], internal) || fieldOf(vars[0]) != "status.podIP" {
		t.Errorf("%s: --boat-advertise-addr %q is not <pod IP>:%d", where, adv, internal)
	}
	grace, err := time.ParseDuration(eff["shutdown-grace"])
	if err != nil {
		t.Fatalf("%s: shutdown-grace: %v", where, err)
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	if tgp < preStop+grace+5*time.Second {
		t.Errorf("%s: terminationGracePeriodSeconds %s leaves no margin over preStop %s + --shutdown-grace %s", where, tgp, preStop, grace)
	}
}

func checkSecretKey(t *testing.T, o *objects, where, name, key string) {
	t.Helper()
	if o.existingRefs[name] {
		return
	}
	s, ok := o.secrets[name]
	if !ok {
		t.Errorf("%s: Secret %s is neither rendered nor named as an existing Secret in values", where, name)
		return
	}
	if _, ok := s.Data[key]; !ok {
		t.Errorf("%s: Secret %s has no key %s (keys %v)", where, name, key, slices.Collect(maps.Keys(s.Data)))
	}
}

func checkMountedFile(t *testing.T, o *objects, where string, spec corev1.PodSpec, c corev1.Container, path string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				for _, it := range v.Secret.Items {
					if it.Path == rel {
						return
					}
				}
			}
		}
	}
	t.Errorf("%s: %s is not a file of a mounted Secret", where, path)
}

// checkServiceFor finds the Service named <fullname>-<suffix> and checks it
// exposes the port of addr; it returns the Service name.
func checkServiceFor(t *testing.T, o *objects, suffix, addr string) string {
	t.Helper()
	for name, s := range o.services {
		if strings.HasSuffix(name, "-"+suffix) {
			p := port(t, suffix, addr)
			if !slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool { return int(sp.Port) == p }) {
				t.Errorf("Service %s does not expose port %d", name, p)
			}
			return name
		}
	}
	t.Errorf("no Service *-%s", suffix)
	return ""
}

// checkServices checks that every Service selects one service's pods on
// named ports, and that boat's client stream has a Service: a LoadBalancer
// where wantLB, else the default ClusterIP.
func checkServices(t *testing.T, o *objects, podLabels map[string]labels.Set, wantLB bool) {
	t.Helper()
	var client *corev1.Service
	for _, name := range slices.Sorted(maps.Keys(o.services)) {
		s := o.services[name]
		var target string
		for svc, l := range podLabels {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(l) {
				if target != "" {
					t.Errorf("Service %s selects both %s and %s pods", name, target, svc)
				}
				target = svc
			}
		}
		if target == "" {
			t.Errorf("Service %s selects no gomsg pods", name)
			continue
		}
		d := findDeployment(o, target)
		for _, sp := range s.Spec.Ports {
			if _, ok := containerPort(d.Spec.Template.Spec.Containers[0], sp.TargetPort.String()); !ok {
				t.Errorf("Service %s port %s targets %q, not a named port of %s", name, sp.Name, sp.TargetPort.String(), target)
			}
		}
		if target == "boat" && slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.TargetPort.String() == "client" }) {
			client = s
		}
	}
	want := corev1.ServiceTypeClusterIP
	if wantLB {
		want = corev1.ServiceTypeLoadBalancer
	}
	switch {
	case client == nil:
		t.Error("no Service for boat's client stream")
	case client.Spec.Type != want:
		t.Errorf("boat's client stream Service %s is a %s, want %s", client.Name, client.Spec.Type, want)
	}
}

// stationReadyPath is station's readiness over HTTP: /readyz with every
// backend excluded, the answer grpc.health.v1 gives (serving, not draining)
// where TLS keeps the kubelet's gRPC probe away. A Redis blip must not take
// every station out of the Service.
const stationReadyPath = "/readyz?exclude=redis&exclude=kafka&exclude=nats&exclude=etcd"

func checkStationReadiness(t *testing.T, where string, g *corev1.HTTPGetAction) {
	t.Helper()
	if g.Path != stationReadyPath || g.Port.String() != "ops" {
		t.Errorf("%s: readiness GET %s on %s, want %s on ops: station's readiness follows draining, not the backends", where, g.Path, g.Port.String(), stationReadyPath)
	}
}

func findDeployment(o *objects, svc string) *appsv1.Deployment {
	for _, d := range o.deployments {
		if d.Spec.Template.Spec.Containers[0].Args[0] == svc {
			return d
		}
	}
	return nil
}

func checkMonitors(t *testing.T, o *objects, want bool) {
	t.Helper()
	if !want {
		if len(o.monitors) != 0 {
			t.Errorf("ServiceMonitor rendered although serviceMonitor.enabled is false")
		}
		return
	}
	if len(o.monitors) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(o.monitors))
	}
	for _, m := range o.monitors {
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		var scraped []string
		for name, s := range o.services {
			if !sel.Matches(labels.Set(s.Labels)) {
				continue
			}
			for _, ep := range m.Spec.Endpoints {
				if !slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == ep.Port }) {
					t.Errorf("ServiceMonitor endpoint port %q is not a port of Service %s", ep.Port, name)
				}
				if ep.Path != "/metrics" {
					t.Errorf("ServiceMonitor path %q, want /metrics", ep.Path)
				}
			}
			for svc, l := range map[string]bool{"boat": true, "station": true, "carrier": true, "horn": true} {
				if l && strings.HasSuffix(name, "-"+svc+"-ops") {
					scraped = append(scraped, svc)
				}
			}
		}
		sort.Strings(scraped)
		if want := []string{"boat", "carrier", "horn", "station"}; !slices.Equal(scraped, want) {
			t.Errorf("ServiceMonitor scrapes the ops Services of %v, want %v", scraped, want)
		}
	}
}

// queue.kind=nats with queue.natsUrl tells every service to use NATS
// JetStream there; the default stays Kafka.
func TestChartQueueNATS(t *testing.T) {
	t.Parallel()
	kv := kubeVersions[len(kubeVersions)-1]
	for _, tc := range []struct {
		vals      map[string]any
		queue, nc string
	}{
		{map[string]any{}, "kafka", ""},
		{map[string]any{"queue": map[string]any{"kind": "nats", "natsUrl": "nats://nats-1:4222,nats://nats-2:4222"}}, "nats", "nats://nats-1:4222,nats://nats-2:4222"},
	} {
		files, err := render(t, "gomsg", tc.vals, kv)
		if err != nil {
			t.Fatalf("render %v: %v", tc.vals, err)
		}
		cm := decode(t, files).configMaps["gomsg-common"]
		if cm == nil {
			t.Fatal("no gomsg-common ConfigMap")
		}
		if cm.Data["GOMSG_QUEUE"] != tc.queue || cm.Data["GOMSG_NATS_URL"] != tc.nc {
			t.Errorf("values %v: GOMSG_QUEUE=%q GOMSG_NATS_URL=%q, want %q %q", tc.vals, cm.Data["GOMSG_QUEUE"], cm.Data["GOMSG_NATS_URL"], tc.queue, tc.nc)
		}
	}
}

// backendCredentials.nats: the credential of each kind is mounted from the
// Secret under its own key and read by the flag for that kind's file; a
// user goes with a password only, and a password needs its user.
func TestChartNATSCredentials(t *testing.T) {
	t.Parallel()
	kv := kubeVersions[len(kubeVersions)-1]
	natsVals := func(creds map[string]any) map[string]any {
		return map[string]any{"queue": map[string]any{"kind": "nats", "natsUrl": "nats://nats:4222"},
			"backendCredentials": map[string]any{"nats": creds}}
	}
	for _, tc := range []struct {
		creds map[string]any
		env   string
		file  string
	}{
		{map[string]any{"user": "gomsg", "existingSecret": "nats-gomsg"}, "GOMSG_NATS_PASSWORD_FILE", "/etc/gomsg/nats/password"},
		{map[string]any{"credential": "token", "existingSecret": "nats-gomsg"}, "GOMSG_NATS_TOKEN_FILE", "/etc/gomsg/nats/token"},
		{map[string]any{"credential": "nkey", "existingSecret": "nats-gomsg"}, "GOMSG_NATS_NKEY_SEED_FILE", "/etc/gomsg/nats/nkey"},
		{map[string]any{"credential": "creds", "existingSecret": "nats-gomsg", "tls": true}, "GOMSG_NATS_CREDS_FILE", "/etc/gomsg/nats/creds"},
	} {
		files, err := render(t, "gomsg", natsVals(tc.creds), kv)
		if err != nil {
			t.Fatalf("render %v: %v", tc.creds, err)
		}
		o := decode(t, files)
		cm := o.configMaps["gomsg-common"]
		if cm == nil {
			t.Fatal("no gomsg-common ConfigMap")
		}
		if got := cm.Data[tc.env]; got != tc.file {
			t.Errorf("%v: %s=%q, want %q", tc.creds, tc.env, got, tc.file)
		}
		for k, v := range cm.Data {
			if strings.HasPrefix(k, "GOMSG_NATS_") && strings.HasSuffix(k, "_FILE") && k != tc.env && k != "GOMSG_NATS_CA_FILE" {
				t.Errorf("%v: %s=%q set as well; one credential at a time", tc.creds, k, v)
			}
		}
		if _, user := tc.creds["user"]; user != (cm.Data["GOMSG_NATS_USER"] == "gomsg") {
			t.Errorf("%v: GOMSG_NATS_USER=%q", tc.creds, cm.Data["GOMSG_NATS_USER"])
		}
		if tls, _ := tc.creds["tls"].(bool); tls != (cm.Data["GOMSG_NATS_TLS"] == "true") {
			t.Errorf("%v: GOMSG_NATS_TLS=%q", tc.creds, cm.Data["GOMSG_NATS_TLS"])
		}
		for _, svc := range []string{"station", "carrier", "horn"} {
			d := findDeployment(o, svc)
			if d == nil {
				t.Fatalf("no %s Deployment", svc)
			}
			spec := d.Spec.Template.Spec
			checkMountedFile(t, o, tc.env+" in "+svc, spec, spec.Containers[0], tc.file)
			found := false
			for _, v := range spec.Volumes {
				found = found || (v.Secret != nil && v.Secret.SecretName == "nats-gomsg")
			}
			if !found {
				t.Errorf("%v: %s mounts no volume of the Secret nats-gomsg", tc.creds, svc)
			}
		}
	}
	for _, bad := range []struct {
		creds map[string]any
		want  string
	}{
		{map[string]any{"existingSecret": "nats-gomsg"}, "set backendCredentials.nats.user too"},
		{map[string]any{"credential": "token", "user": "gomsg", "existingSecret": "nats-gomsg"}, "a user goes with a password only"},
	} {
		_, err := render(t, "gomsg", natsVals(bad.creds), kv)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("values %v: %v, want an error saying %q", bad.creds, err, bad.want)
		}
	}
}
