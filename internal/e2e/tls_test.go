package e2e

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/boat"
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
	}, withWebSocket())
	st := e.gomsg.Station
	trusting := tlsx.ClientConfig(ca.Pool, nil, "")
	// The WebSocket transport is wss on a TLS boat; plain ws is refused.
	wsURL := e.gomsg.Boat.WSURL()
	if !strings.HasPrefix(wsURL, "wss://") {
		t.Fatalf("websocket URL %q on a TLS boat, want wss://", wsURL)
	}
	wsToken, _ := auth.Mint(secret, "wsbob", "web", time.Hour)
	wsOpts := func(tc *tls.Config) *websocket.DialOptions {
		return &websocket.DialOptions{Subprotocols: []string{boat.WSProto, boat.WSBearerPrefix + wsToken},
			HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}}
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	wc, _, err := websocket.Dial(wctx, wsURL, wsOpts(trusting.Clone()))
	if err != nil {
		t.Fatalf("wss dial: %v", err)
	}
	if _, data, err := wc.Read(wctx); err != nil || !strings.Contains(string(data), "wsbob") {
		t.Fatalf("wss first frame %q %v, want Connected for wsbob", data, err)
	}
	_ = wc.CloseNow()
	if c, _, err := websocket.Dial(wctx, strings.Replace(wsURL, "wss://", "ws://", 1), wsOpts(nil)); err == nil {
		_ = c.CloseNow()
		t.Fatal("plain ws accepted by a TLS boat")
	}
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
	_, err = boatpb.NewBoatClient(plain(e.gomsg.Boat.InternalAddr())).Kickout(ctx, &boatpb.KickoutRequest{Sid: d.Sid})
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
	_, err = boatpb.NewBoatClient(noCert(e.gomsg.Boat.InternalAddr())).Kickout(ctx, &boatpb.KickoutRequest{Sid: d.Sid})
	unavailable("boat internal without a client certificate", err)
	d.mu.Lock()
	kicked := d.kickout
	d.mu.Unlock()
	if kicked != nil || len(d.received()) != 2 {
		t.Fatalf("device after the refused calls: kickout %v, %d messages", kicked, len(d.received()))
	}

	// Rotation: new files are served on new connections, no restart.
	rotated := ca.IssueTo(t, certFile, keyFile, "gomsg-rotated")
	for _, addr := range []string{st.PushAddr(), st.PushHTTPAddr(), st.InternalAddr(), e.gomsg.Boat.ClientAddr()} {
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

// TestPushAPIClientCertificates: with --push-client-ca-file, a backend
// presenting a client certificate the CA signed, named by a `cert:` line, may
// call the Push API without a key, within that line's scopes, over gRPC and
// HTTP/JSON; a signed certificate no line names, no credential at all, or a
// certificate from another CA are refused and write nothing; keys still work.
func TestPushAPIClientCertificates(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	certFile, keyFile := ca.Issue(t, "gomsg")
	e := start(t, func(c *app.ClusterConfig) {
		c.TLS = tlsx.Settings{CertFile: certFile, KeyFile: keyFile, InternalCAFile: ca.CertFile}
		c.Station.PushClientCAFile = ca.CertFile
		c.OpsAddr, c.OpsTLS = "127.0.0.1:0", true
	}, withAPIKeys("cert:backend-1 push,online backend-1"))
	st := e.gomsg.Station
	trusting := tlsx.ClientConfig(ca.Pool, nil, "")
	e.deviceDial = append(e.deviceDial, grpcx.WithTLS(trusting))
	withCert := func(ca *testutil.CA, name string) *tls.Config {
		cf, kf := ca.Issue(t, name)
		r, err := tlsx.NewReloader(cf, kf, 0)
		if err != nil {
			t.Fatal(err)
		}
		return tlsx.ClientConfig(trusting.RootCAs, r, "")
	}
	backend := withCert(ca, "backend-1")
	stranger := withCert(ca, "stranger")
	foreign := withCert(testutil.NewCA(t), "backend-1") // same name, another CA
	dial := func(conf *tls.Config) pushpb.PushClient {
		c, err := grpcx.Dial(st.PushAddr(), grpcx.WithTLS(conf))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return pushpb.NewPushClient(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := e.connect("alice", "ios", true)

	// The named certificate pushes without a key; the message arrives.
	res, err := dial(backend).Push(ctx, &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: []*anypb.Any{text("by certificate")}})
	if err != nil {
		t.Fatalf("push with the client certificate: %v", err)
	}
	got := d.waitCount(t, 1)
	if got[0].GetSeq() != res.GetSeqs()[0] || bodyText(t, got[0]) != "by certificate" {
		t.Fatalf("received seq %d %q, want %d 'by certificate'", got[0].GetSeq(), bodyText(t, got[0]), res.GetSeqs()[0])
	}

	keysBefore, recsBefore := e.writes()
	if _, err := dial(backend).Kickout(ctx, &pushpb.KickoutRequest{Uid: "alice"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Kickout with a push,online certificate: %v, want PermissionDenied", err)
	}
	if _, err := dial(backend).Online(ctx, &pushpb.OnlineRequest{Uids: []string{"alice"}}); err != nil {
		t.Errorf("Online with a push,online certificate: %v", err)
	}
	forged := &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: []*anypb.Any{text("forged")}}
	if _, err := dial(stranger).Push(ctx, forged); status.Code(err) != codes.Unauthenticated {
		t.Errorf("push with a signed certificate no line names: %v, want Unauthenticated", err)
	}
	if _, err := dial(trusting).Push(ctx, forged); status.Code(err) != codes.Unauthenticated {
		t.Errorf("push with neither key nor certificate: %v, want Unauthenticated", err)
	}
	if _, err := dial(foreign).Push(ctx, forged); status.Code(err) != codes.Unavailable {
		t.Errorf("push with another CA's certificate: %v, want Unavailable (refused at the handshake)", err)
	}

	// HTTP/JSON: the same answers.
	post := func(conf *tls.Config, path, body string) int {
		t.Helper()
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: conf.Clone()}}
		req, err := http.NewRequest(http.MethodPost, "https://"+st.PushHTTPAddr()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0 // refused at the handshake
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	forgedJSON := `{"uids":["alice"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"forged"}]}`
	for _, c := range []struct {
		name string
		conf *tls.Config
		path string
		want int
	}{
		{"kickout with a push,online certificate", backend, "/v1/kickout", http.StatusForbidden},
		{"a certificate no line names", stranger, "/v1/push", http.StatusUnauthorized},
		{"no credential", trusting, "/v1/push", http.StatusUnauthorized},
		{"another CA's certificate", foreign, "/v1/push", 0},
	} {
		body := forgedJSON
		if c.path == "/v1/kickout" {
			body = `{"uid":"alice"}`
		}
		if got := post(c.conf, c.path, body); got != c.want {
			t.Errorf("HTTP %s: status %d, want %d", c.name, got, c.want)
		}
	}
	if k, r := e.writes(); k != keysBefore || r != recsBefore {
		t.Fatalf("refused calls wrote: redis keys %d → %d, task records %d → %d", keysBefore, k, recsBefore, r)
	}
	if n := len(d.received()); n != 1 {
		t.Fatalf("device got %d messages after the refused calls, want 1", n)
	}
	if code := post(backend, "/v1/push", `{"uids":["alice"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"https by certificate"}]}`); code != http.StatusOK {
		t.Fatalf("HTTP push with the client certificate: status %d", code)
	}
	if got := d.waitCount(t, 2); bodyText(t, got[1]) != "https by certificate" {
		t.Fatalf("second message %q", bodyText(t, got[1]))
	}

	// --ops-tls: the ops endpoint answers https only, with the process's
	// certificate.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: trusting.Clone()}}
	resp, err := hc.Get("https://" + e.gomsg.Ops.Addr() + "/healthz")
	if err != nil {
		t.Fatalf("https /healthz: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("https /healthz: %d", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + e.gomsg.Ops.Addr() + "/healthz"); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain http /healthz answered 200 with --ops-tls")
		}
	}

	// A key still works on a connection without a certificate.
	if _, err := pushpb.NewPushClient(auth.WithBearer(dialConn(t, st.PushAddr(), trusting), apiKey)).Online(ctx, &pushpb.OnlineRequest{Uids: []string{"alice"}}); err != nil {
		t.Fatalf("Online with a key: %v", err)
	}
}

func dialConn(t *testing.T, addr string, conf *tls.Config) *grpc.ClientConn {
	t.Helper()
	c, err := grpcx.Dial(addr, grpcx.WithTLS(conf))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
