package validate

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestChartPlaintextIsNeverQuiet: by default nothing is reachable from
// outside the cluster, and whatever runs without TLS is named in NOTES.txt,
// loudly, with where it can be reached from; a Service opened to the outside
// without TLS renders only when the values say TLS is terminated in front.
func TestChartPlaintextIsNeverQuiet(t *testing.T) {
	t.Parallel()
	const banner = "WARNING: TLS IS OFF"
	cases := []struct {
		name     string
		release  string
		vals     string
		file     string
		want     []string
		dontWant []string
	}{
		{name: "default", release: "gomsg",
			want: []string{banner, "Service gomsg-boat (ClusterIP)", "inside the cluster only",
				"boat's client stream :7100 and WebSocket :7180: device tokens and messages,\n##    inside the cluster (ClusterIP)",
				"station's Push API :7200 and :7280: API keys and pushes,\n##    inside the cluster (ClusterIP)",
				"the internal APIs (boat :7110, station :7210): the internal token",
				"http://gomsg-station.messaging:7280/v1/push"},
			dontWant: []string{"EXPOSED OUTSIDE", "EXTERNAL-IP"}},
		{name: "public boat, TLS terminated in front", release: "gomsg",
			vals: "boat: {service: {type: LoadBalancer, allowPlaintext: true}}",
			want: []string{banner, "EXTERNAL-IP",
				"device tokens and messages,\n##    EXPOSED OUTSIDE THE CLUSTER by the LoadBalancer Service",
				"API keys and pushes,\n##    inside the cluster (ClusterIP)"}},
		{name: "public station, TLS terminated in front", release: "gomsg",
			vals: "station: {service: {type: NodePort, allowPlaintext: true}}",
			want: []string{banner, "API keys and pushes,\n##    EXPOSED OUTSIDE THE CLUSTER by the NodePort Service"}},
		{name: "production", release: "prod", file: "ci/production-values.yaml",
			want:     []string{"Service prod-gomsg-boat (LoadBalancer)", "EXTERNAL-IP", "https://prod-gomsg-station.messaging:7280/v1/push"},
			dontWant: []string{banner, "EXPOSED OUTSIDE", "http://"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vals := readValues(t, tc.file)
			if tc.vals != "" {
				if err := yaml.Unmarshal([]byte(tc.vals), &vals); err != nil {
					t.Fatal(err)
				}
			}
			files, err := render(t, tc.release, vals, kubeVersions[1])
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			notes, ok := files["gomsg/templates/NOTES.txt"]
			if !ok {
				t.Fatal("no NOTES.txt rendered")
			}
			for _, w := range tc.want {
				if !strings.Contains(notes, w) {
					t.Errorf("NOTES.txt does not say %q:\n%s", w, notes)
				}
			}
			for _, w := range tc.dontWant {
				if strings.Contains(notes, w) {
					t.Errorf("NOTES.txt says %q:\n%s", w, notes)
				}
			}
			o := decode(t, files)
			for name, svc := range o.services {
				if svc.Spec.Type == "" || svc.Spec.Type == "ClusterIP" {
					continue
				}
				if tc.file == "" && !strings.Contains(tc.vals, "allowPlaintext: true") {
					t.Errorf("Service %s is a %s in plaintext", name, svc.Spec.Type)
				}
			}
		})
	}
}

// TestStationReadinessIsOneRule: station's readiness means the same with TLS
// on or off — serving and not draining — so a Redis blip takes no station
// out of the Service in either case; only station.probe=http opts into
// following every backend.
func TestStationReadinessIsOneRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, vals, wantPath string
		wantGRPC             bool
	}{
		{name: "plaintext", wantGRPC: true},
		{name: "tls", vals: "tls: {secretName: gomsg-tls}", wantPath: stationReadyPath},
		{name: "tls, mTLS off", vals: "tls: {secretName: gomsg-tls, internalMTLS: false}", wantPath: stationReadyPath},
		{name: "http probe", vals: "station: {probe: http}", wantPath: "/readyz"},
		{name: "http probe, tls", vals: "{station: {probe: http}, tls: {secretName: gomsg-tls}}", wantPath: "/readyz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			vals := map[string]any{}
			if err := yaml.Unmarshal([]byte(tc.vals), &vals); err != nil {
				t.Fatal(err)
			}
			files, err := render(t, "gomsg", vals, kubeVersions[1])
			if err != nil {
				t.Fatal(err)
			}
			d := decode(t, files).deployments["gomsg-station"]
			if d == nil {
				t.Fatal("no Deployment gomsg-station")
			}
			p := d.Spec.Template.Spec.Containers[0].ReadinessProbe
			switch {
			case p == nil:
				t.Fatal("station has no readiness probe")
			case tc.wantGRPC:
				if p.GRPC == nil || p.GRPC.Port != 7200 {
					t.Errorf("readiness %+v, want grpc.health.v1 on 7200", p.ProbeHandler)
				}
			case p.HTTPGet == nil || p.HTTPGet.Path != tc.wantPath || p.HTTPGet.Port.String() != "ops":
				t.Errorf("readiness %+v, want GET %s on ops", p.ProbeHandler, tc.wantPath)
			}
		})
	}
}
