package bench

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"time"

	"github.com/gomsg/gomsg/internal/certgen"
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
	ca, err := certgen.NewCA(dir, "gomsg-bench CA", 7*24*time.Hour)
	if err != nil {
		return nil, err
	}
	c := &Certs{CAFile: ca.CertFile, CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"), pool: ca.Pool}
	if _, err := ca.IssueTo(c.CertFile, c.KeyFile, "gomsg-bench", "localhost", "127.0.0.1"); err != nil {
		return nil, err
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
