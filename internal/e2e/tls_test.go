package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/internal/tlsx"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// TestTLSEverywhere runs station, boat and carrier with TLS on every
// listener and mTLS between them: a device and a backend that trust the CA
// push and receive; a plaintext client is refused; an internal client
// without a client certificate is refused; a rotated certificate is served
// without a restart.
func TestTLSEverywhere(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	certFile, keyFile := ca.Issue(t, "gomsg")
	e := start(t, func(c *app.ClusterConfig) {
		c.TLS = tlsx.Settings{CertFile: certFile, KeyFile: keyFile, InternalCAFile: ca.CertFile}
	})
	st := e.cluster.Station
	trusting := tlsx.ClientConfig(ca.Pool, nil, "")
	e.deviceDial = append(e.deviceDial, grpcx.WithTLS(trusting))
	conn, err := grpcx.Dial(st.PushAddr(), grpcx.WithTLS(trusting))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.push = pushpb.NewPushClient(auth.WithBearer(conn, apiKey))

	// Device over TLS → boat (mTLS) → station; push over TLS → Kafka →
	// carrier (mTLS) → boat → device.
	d := e.connect("alice", "ios", true)
	seq := e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}}, "over tls")
	got := d.waitCount(t, 1)
	if got[0].GetSeq() != seq || bodyText(t, got[0]) != "over tls" {
		t.Fatalf("received seq %d %q, want %d 'over tls'", got[0].GetSeq(), bodyText(t, got[0]), seq)
	}

	// HTTP/JSON over TLS; plain HTTP is not answered.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: trusting.Clone()}}
	body := `{"uids":["alice"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"via https"}]}`
	req, err := http.NewRequest(http.MethodPost, "https://"+st.PushHTTPAddr()+"/v1/push", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("https push: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("https push: status %d", resp.StatusCode)
	}
	d.waitCount(t, 2)
	if resp, err := httpPost("http://"+st.PushHTTPAddr()+"/v1/push", body); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP push accepted")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	unavailable := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.Unavailable {
			t.Errorf("%s: %v, want Unavailable (refused at the handshake)", what, err)
		}
	}
	// Plaintext clients are refused on every listener.
	plain := func(addr string) *grpc.ClientConn {
		c, err := grpcx.Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	_, err = pushpb.NewPushClient(plain(st.PushAddr())).Online(ctx, &pushpb.OnlineRequest{Uids: []string{"alice"}})
	unavailable("plaintext Push API", err)
	_, err = stationpb.NewStationClient(plain(st.InternalAddr())).ResetBoat(ctx, &stationpb.ResetBoatRequest{BoatId: "boat-1"})
	unavailable("plaintext station internal", err)
	_, err = boatpb.NewBoatClient(plain(e.cluster.Boat.InternalAddr())).Kickout(ctx, &boatpb.KickoutRequest{Sid: d.Sid})
	unavailable("plaintext boat internal", err)

	// Internal clients that trust the CA but present no certificate are
	// refused; the same client is served on the public listener.
	noCert := func(addr string) *grpc.ClientConn {
		c, err := grpcx.Dial(addr, grpcx.WithTLS(trusting))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	_, err = stationpb.NewStationClient(noCert(st.InternalAddr())).ResetBoat(ctx, &stationpb.ResetBoatRequest{BoatId: "boat-1"})
	unavailable("station internal without a client certificate", err)
	_, err = boatpb.NewBoatClient(noCert(e.cluster.Boat.InternalAddr())).Kickout(ctx, &boatpb.KickoutRequest{Sid: d.Sid})
	unavailable("boat internal without a client certificate", err)
	d.mu.Lock()
	kicked := d.kickout
	d.mu.Unlock()
	if kicked != nil || len(d.received()) != 2 {
		t.Fatalf("device after the refused calls: kickout %v, %d messages", kicked, len(d.received()))
	}

	// Rotation: new files are served on new connections, no restart.
	rotated := ca.IssueTo(t, certFile, keyFile, "gomsg-rotated")
	for _, addr := range []string{st.PushAddr(), st.PushHTTPAddr(), st.InternalAddr(), e.cluster.Boat.ClientAddr()} {
		testutil.WaitFor(t, 15*time.Second, func() error {
			c, err := tls.Dial("tcp", addr, trusting)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.Handshake()
			if got := c.ConnectionState().PeerCertificates[0]; got.SerialNumber.Cmp(rotated.SerialNumber) != 0 {
				return testutil.Errorf("%s serves %s, want the rotated certificate", addr, got.Subject.CommonName)
			}
			return nil
		})
	}
	// The cluster keeps working on the rotated certificate.
	d2 := e.connect("bob", "web", true)
	e.pushText(&pushpb.PushRequest{Uids: []string{"bob"}}, "after rotation")
	d2.waitCount(t, 1)
}
