package testutil

import (
	"crypto/x509"
	"path/filepath"
	"testing"
	"time"

	"github.com/gomsg/gomsg/internal/certgen"
)

// CA is a certificate authority made for one test; its files live in the
// test's temporary directory.
type CA struct {
	*certgen.CA
	dir string
}

// NewCA makes a CA and writes its certificate to <tempdir>/ca.pem.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	dir := tb.TempDir()
	c, err := certgen.NewCA(dir, "gomsg test CA", 24*time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return &CA{CA: c, dir: dir}
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
	cert, err := ca.CA.IssueTo(certFile, keyFile, cn, hosts...)
	if err != nil {
		tb.Fatal(err)
	}
	return cert
}
