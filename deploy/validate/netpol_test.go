package validate

import (
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestChartNetworkPolicies: by default every service has a NetworkPolicy;
// an internal port admits only the gomsg service that calls it, and every
// port a policy names is a port of the pod it selects.
func TestChartNetworkPolicies(t *testing.T) {
	t.Parallel()
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			o := renderObjects(t, vs.release, vs.file, kubeVersions[1])
			if len(o.netpols) != len(o.deployments) {
				t.Fatalf("%d NetworkPolicies for %d Deployments", len(o.netpols), len(o.deployments))
			}
			// callers of each internal port: boat's from carrier, station's from boat.
			internalFrom := map[string]string{"boat": "carrier", "station": "boat"}
			for name, np := range o.netpols {
				sel := labels.Set(np.Spec.PodSelector.MatchLabels)
				var pod *corev1.PodSpec
				var comp string
				for _, d := range o.deployments {
					if labels.SelectorFromSet(sel).Matches(labels.Set(d.Spec.Template.Labels)) {
						if pod != nil {
							t.Fatalf("%s selects more than one Deployment", name)
						}
						pod, comp = &d.Spec.Template.Spec, d.Spec.Template.Labels["app.kubernetes.io/component"]
					}
				}
				if pod == nil {
					t.Fatalf("%s selects no Deployment", name)
				}
				if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
					t.Errorf("%s: policy types %v, want [Ingress]", name, np.Spec.PolicyTypes)
				}
				var ports []string
				for _, rule := range np.Spec.Ingress {
					for _, p := range rule.Ports {
						port := p.Port.String()
						ports = append(ports, port)
						if _, ok := containerPort(pod.Containers[0], port); !ok {
							t.Errorf("%s: port %q is not a port of %s's container", name, port, comp)
						}
						if port != "internal" {
							continue
						}
						caller := internalFrom[comp]
						if len(rule.From) != 1 || rule.From[0].PodSelector == nil || rule.From[0].NamespaceSelector != nil ||
							rule.From[0].PodSelector.MatchLabels["app.kubernetes.io/component"] != caller ||
							rule.From[0].PodSelector.MatchLabels["app.kubernetes.io/instance"] != vs.release {
							t.Errorf("%s: internal port admits %+v, want only this release's %s pods", name, rule.From, caller)
						}
					}
				}
				sort.Strings(ports)
				want := map[string][]string{
					"boat":    {"client", "internal", "ops"},
					"station": {"internal", "ops", "push-grpc", "push-http"},
					"carrier": {"ops"},
					"horn":    {"ops"},
				}[comp]
				if _, ok := containerPort(pod.Containers[0], "console"); ok && comp == "station" {
					// console.enabled (the production values) adds its port.
					want = []string{"console", "internal", "ops", "push-grpc", "push-http"}
				}
				if !slices.Equal(ports, want) {
					t.Errorf("%s (%s): ingress ports %v, want %v", name, comp, ports, want)
				}
			}
		})
	}
	off := readValues(t, "")
	off["networkPolicy"] = map[string]any{"enabled": false}
	files, err := render(t, "gomsg", off, kubeVersions[1])
	if err != nil {
		t.Fatal(err)
	}
	if n := len(decode(t, files).netpols); n != 0 {
		t.Errorf("networkPolicy.enabled=false still renders %d NetworkPolicies", n)
	}
}
