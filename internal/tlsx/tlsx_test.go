//go:debug tls10server=1

package tlsx_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/internal/tlsx"
)

// serve accepts TLS connections with conf and answers each with "ok".
func serve(t *testing.T, conf *tls.Config) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", conf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				_, _ = c.Write([]byte("ok"))
			}()
		}
	}()
	return l.Addr().String()
}

// call connects with conf and returns the server's leaf certificate once
// the server answered.
func call(addr string, conf *tls.Config) (*x509.Certificate, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, conf)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

func TestReloaderServesRotatedCertificate(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	certFile, keyFile := ca.Issue(t, "server")
	r, err := tlsx.NewReloader(certFile, keyFile, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, tlsx.ServerConfig(r, nil))
	client := tlsx.ClientConfig(ca.Pool, nil, "")
	first, err := call(addr, client)
	if err != nil {
		t.Fatal(err)
	}
	if first.Subject.CommonName != "server" {
		t.Fatalf("first certificate CN %q, want server", first.Subject.CommonName)
	}
	rotated := ca.IssueTo(t, certFile, keyFile, "server-rotated")
	testutil.WaitFor(t, 5*time.Second, func() error {
		got, err := call(addr, client)
		if err != nil {
			return err
		}
		if got.SerialNumber.Cmp(rotated.SerialNumber) != 0 {
			return testutil.Errorf("still serving serial %v (CN %s), want the rotated %v", got.SerialNumber, got.Subject.CommonName, rotated.SerialNumber)
		}
		return nil
	})
}

func TestReloaderKeepsCertificateWhenFilesAreBroken(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	certFile, keyFile := ca.Issue(t, "server")
	r, err := tlsx.NewReloader(certFile, keyFile, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, tlsx.ServerConfig(r, nil))
	if err := os.WriteFile(certFile, []byte("half-written"), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if _, err := call(addr, tlsx.ClientConfig(ca.Pool, nil, "")); err != nil {
			t.Fatalf("handshake after a broken rotation: %v", err)
		}
		if r.Err() == nil {
			return testutil.Errorf("broken files not noticed yet")
		}
		return nil
	})
}

func TestServerRefusesOldTLSVersions(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	certFile, keyFile := ca.Issue(t, "server")
	r, err := tlsx.NewReloader(certFile, keyFile, 0)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, tlsx.ServerConfig(r, nil))
	old := tlsx.ClientConfig(ca.Pool, nil, "")
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if _, err := call(addr, old); err == nil {
		t.Fatal("a TLS 1.1 client was served")
	}
	if _, err := call(addr, tlsx.ClientConfig(ca.Pool, nil, "")); err != nil {
		t.Fatalf("a TLS 1.2+ client: %v", err)
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	other := testutil.NewCA(t)
	certFile, keyFile := ca.Issue(t, "server")
	conf, err := tlsx.Settings{CertFile: certFile, KeyFile: keyFile, InternalCAFile: ca.CertFile}.Build()
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, conf.Internal)
	if _, err := call(addr, conf.InternalClient); err != nil {
		t.Fatalf("a client with the cluster's certificate: %v", err)
	}
	if _, err := call(addr, tlsx.ClientConfig(ca.Pool, nil, "")); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	oc, ok := other.Issue(t, "intruder")
	or, err := tlsx.NewReloader(oc, ok, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call(addr, tlsx.ClientConfig(ca.Pool, or, "")); err == nil {
		t.Fatal("a client with a certificate of another CA was served")
	}
	// The public listeners do not ask for client certificates.
	if _, err := call(serve(t, conf.Public), tlsx.ClientConfig(ca.Pool, nil, "")); err != nil {
		t.Fatalf("public listener: %v", err)
	}
}

func TestSettingsErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	certFile, keyFile := ca.Issue(t, "server")
	for _, tc := range []struct {
		s    tlsx.Settings
		want string
	}{
		{tlsx.Settings{CertFile: certFile}, "--tls-cert-file and --tls-key-file"},
		{tlsx.Settings{KeyFile: keyFile}, "--tls-cert-file and --tls-key-file"},
		{tlsx.Settings{InternalCAFile: ca.CertFile}, "--internal-ca-file: needs --tls-cert-file"},
		{tlsx.Settings{CertFile: certFile, KeyFile: certFile}, "--tls-cert-file:"},
		{tlsx.Settings{CertFile: certFile, KeyFile: keyFile, InternalCAFile: keyFile}, "--internal-ca-file:"},
		{tlsx.Settings{CAFile: "/nonexistent"}, "--tls-ca-file:"},
	} {
		_, err := tc.s.Build()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.s, err, tc.want)
		}
	}
	c, err := tlsx.Settings{}.Build()
	if err != nil || c.Public != nil || c.Internal != nil || c.InternalClient != nil {
		t.Fatalf("no settings: %+v, %v; want plaintext", c, err)
	}
	c, err = tlsx.Settings{CAFile: ca.CertFile}.Build()
	if err != nil || c.InternalClient == nil || c.Public != nil {
		t.Fatalf("only a CA: %+v, %v; want TLS internal calls and plaintext listeners", c, err)
	}
}

func TestClientErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	certFile, _ := ca.Issue(t, "client")
	for _, tc := range []struct {
		c    tlsx.Client
		want string
	}{
		{tlsx.Client{CAFile: ca.CertFile}, "--redis-tls: must be set"},
		{tlsx.Client{Enabled: true, CertFile: certFile}, "--redis-cert-file and --redis-key-file"},
		{tlsx.Client{Enabled: true, CAFile: "/nonexistent"}, "--redis-ca-file:"},
	} {
		_, err := tc.c.Config("--redis")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.c, err, tc.want)
		}
	}
}
