package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made for one test; its files live in the
// test's temporary directory.
type CA struct {
	Cert     *x509.Certificate
	CertFile string
	Pool     *x509.CertPool
	key      *ecdsa.PrivateKey
	dir      string
}

var serial atomic.Int64

// NewCA makes a CA and writes its certificate to <tempdir>/ca.pem.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: "gomsg test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, dir: tb.TempDir(), Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.CertFile = filepath.Join(ca.dir, "ca.pem")
	writePEM(tb, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate for name, valid as server and client
// certificate for hosts (DNS names or IPs; default localhost and
// 127.0.0.1), and writes it to <dir>/<name>.pem and <name>-key.pem.
func (ca *CA) Issue(tb testing.TB, name string, hosts ...string) (certFile, keyFile string) {
	tb.Helper()
	certFile = filepath.Join(ca.dir, name+".pem")
	keyFile = filepath.Join(ca.dir, name+"-key.pem")
	ca.IssueTo(tb, certFile, keyFile, name, hosts...)
	return certFile, keyFile
}

// IssueTo writes a new certificate for cn to certFile and keyFile,
// replacing what they held (a rotation). It returns the certificate.
func (ca *CA) IssueTo(tb testing.TB, certFile, keyFile, cn string, hosts ...string) *x509.Certificate {
	tb.Helper()
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1"}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	// Key first, then certificate: each file is replaced by a rename, as
	// a Kubernetes Secret volume update is.
	writePEM(tb, keyFile, "PRIVATE KEY", kder)
	writePEM(tb, certFile, "CERTIFICATE", der)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return cert
}

func writePEM(tb testing.TB, file, typ string, der []byte) {
	tb.Helper()
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		tb.Fatal(err)
	}
}
