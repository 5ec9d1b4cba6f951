package validate

import (
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
)

// The console is off by default; console.enabled adds station's listener,
// its container port, its own Service and a NetworkPolicy rule, and points
// its lag figures at the carriers' consumer group.
func TestChartConsole(t *testing.T) {
	t.Parallel()
	kv := kubeVersions[len(kubeVersions)-1]
	off, err := render(t, "gomsg", map[string]any{}, kv)
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, off)
	if _, ok := o.services["gomsg-station-console"]; ok {
		t.Error("console Service rendered although console.enabled is false")
	}
	if v, ok := o.configMaps["gomsg-station"].Data["GOMSG_CONSOLE_ADDR"]; ok {
		t.Errorf("GOMSG_CONSOLE_ADDR=%q although console.enabled is false", v)
	}
	for _, p := range o.deployments["gomsg-station"].Spec.Template.Spec.Containers[0].Ports {
		if p.Name == "console" {
			t.Error("console container port although console.enabled is false")
		}
	}

	on, err := render(t, "gomsg", map[string]any{
		"console": map[string]any{"enabled": true, "port": 9288},
		"carrier": map[string]any{"groupId": "ops-carrier"},
		"networkPolicy": map[string]any{"consoleFrom": []any{
			map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": "ops"}}}}},
	}, kv)
	if err != nil {
		t.Fatal(err)
	}
	o = decode(t, on)
	cm := o.configMaps["gomsg-station"].Data
	if cm["GOMSG_CONSOLE_ADDR"] != "0.0.0.0:9288" || cm["GOMSG_CONSOLE_CARRIER_GROUP"] != "ops-carrier" {
		t.Errorf("station ConfigMap: GOMSG_CONSOLE_ADDR=%q GOMSG_CONSOLE_CARRIER_GROUP=%q, want 0.0.0.0:9288 and ops-carrier",
			cm["GOMSG_CONSOLE_ADDR"], cm["GOMSG_CONSOLE_CARRIER_GROUP"])
	}
	var port int32
	for _, p := range o.deployments["gomsg-station"].Spec.Template.Spec.Containers[0].Ports {
		if p.Name == "console" {
			port = p.ContainerPort
		}
	}
	if port != 9288 {
		t.Errorf("station's console container port %d, want 9288", port)
	}
	svc := o.services["gomsg-station-console"]
	if svc == nil {
		t.Fatal("no gomsg-station-console Service")
	}
	if svc.Spec.Type != "ClusterIP" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9288 || svc.Spec.Ports[0].TargetPort.StrVal != "console" ||
		svc.Spec.Selector["app.kubernetes.io/component"] != "station" {
		t.Errorf("console Service %+v, want ClusterIP port 9288 to station's console port", svc.Spec)
	}
	np := o.netpols["gomsg-station"]
	if np == nil {
		t.Fatal("no station NetworkPolicy")
	}
	found := false
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) == 1 && r.Ports[0].Port.StrVal == "console" {
			found = true
			if len(r.From) != 1 || r.From[0].NamespaceSelector == nil || r.From[0].NamespaceSelector.MatchLabels["team"] != "ops" {
				t.Errorf("console ingress from %+v, want networkPolicy.consoleFrom", r.From)
			}
		}
	}
	if !found {
		t.Error("station NetworkPolicy lets nobody reach the console port")
	}

	// Outside the cluster only over TLS.
	_, err = render(t, "gomsg", map[string]any{"console": map[string]any{"enabled": true, "port": 7288,
		"service": map[string]any{"type": "LoadBalancer"}}}, kv)
	if err == nil || !strings.Contains(err.Error(), "console.service.type LoadBalancer exposes API keys") {
		t.Errorf("console LoadBalancer without TLS: %v, want refused", err)
	}
	_, err = render(t, "gomsg", map[string]any{"console": map[string]any{"enabled": true, "port": 70000}}, kv)
	if err == nil || !strings.Contains(err.Error(), "port") {
		t.Errorf("console port 70000: %v, want refused", err)
	}
}

// docker-compose.yml serves station's console and publishes it on the
// host's loopback only.
func TestComposeConsole(t *testing.T) {
	t.Parallel()
	eachComposeVariant(t, func(t *testing.T, v composeVariant, p *types.Project) {
		s := p.Services["station"]
		if got := composeEnv(s)["GOMSG_CONSOLE_ADDR"]; got != "0.0.0.0:7288" {
			t.Errorf("station GOMSG_CONSOLE_ADDR=%q, want 0.0.0.0:7288", got)
		}
		published := false
		for _, port := range s.Ports {
			if port.Target == 7288 {
				published = port.HostIP == "127.0.0.1" && port.Published == "7288"
			}
		}
		if !published {
			t.Errorf("station ports %+v: want the console's 7288 published on 127.0.0.1:7288", s.Ports)
		}
	})
}
