package bench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/gomsg/gomsg/internal/tlsx"
)

// Certs are the files of a CA and of one certificate it signed, valid as
// server and client certificate for 127.0.0.1 and localhost: every spawned
// service serves it and presents it on internal calls (mTLS).
type Certs struct {
	CAFile, CertFile, KeyFile string
	pool                      *x509.CertPool
}

// MakeCerts writes ca.pem, cert.pem and key.pem into dir.
func MakeCerts(dir string) (*Certs, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gomsg-bench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "gomsg-bench"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &Certs{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"),
		KeyFile: filepath.Join(dir, "key.pem"), pool: x509.NewCertPool()}
	c.pool.AddCert(ca)
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{c.CAFile, "CERTIFICATE", caDER}, {c.CertFile, "CERTIFICATE", der}, {c.KeyFile, "PRIVATE KEY", kder}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return c, nil
}

// ClientConfig is what the tool's sessions and Push callers dial with: the
// server verified against the CA, no client certificate (the client stream
// and the Push API do not ask for one).
func (c *Certs) ClientConfig() *tls.Config {
	return &tls.Config{MinVersion: tlsx.MinVersion, RootCAs: c.pool}
}

// ServiceArgs are the flags that give a spawned service TLS on every
// listener and mTLS on the internal APIs.
func (c *Certs) ServiceArgs() []string {
	return []string{"--tls-cert-file", c.CertFile, "--tls-key-file", c.KeyFile, "--internal-ca-file", c.CAFile}
}
