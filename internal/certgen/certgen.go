// Package certgen makes a small certificate authority and certificates it
// signs, as PEM files: for the tests (internal/testutil) and for the load
// tool's TLS runs (internal/bench). Not for production certificates.
package certgen

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// CA is a certificate authority whose certificate is in CertFile.
type CA struct {
	Cert     *x509.Certificate
	CertFile string
	Pool     *x509.CertPool // holds Cert
	key      *ecdsa.PrivateKey
	validFor time.Duration
}

var serial atomic.Int64

// NewCA makes a P-256 CA named cn, valid for validFor (from an hour ago),
// and writes its certificate to dir/ca.pem.
func NewCA(dir, cn string, validFor time.Duration) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validFor),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, CertFile: filepath.Join(dir, "ca.pem"), Pool: x509.NewCertPool(), key: key, validFor: validFor}
	ca.Pool.AddCert(cert)
	if err := WritePEM(ca.CertFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// IssueTo writes a new certificate for cn, valid as server and client
// certificate for hosts (DNS names or IPs; default localhost and
// 127.0.0.1), to certFile and keyFile, replacing what they held (a
// rotation: key first, then certificate, each by a rename, as a Kubernetes
// Secret volume update does).
func (ca *CA) IssueTo(certFile, keyFile, cn string, hosts ...string) (*x509.Certificate, error) {
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1"}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ca.validFor),
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
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := WritePEM(keyFile, "PRIVATE KEY", kder); err != nil {
		return nil, err
	}
	if err := WritePEM(certFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

// WritePEM replaces file with one PEM block, through a rename so that a
// reader never sees half a file.
func WritePEM(file, typ string, der []byte) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return os.Rename(tmp, file)
}
