// Package tlsx builds gomsg's TLS configurations: server certificates loaded
// from PEM files and reloaded when the files change (cert-manager rotates
// them in place), CA pools, and client configurations for the internal hops
// and the backends. Every configuration requires TLS 1.2 or later.
package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// MinVersion is the oldest TLS version gomsg speaks.
const MinVersion = tls.VersionTLS12

// DefaultCheckInterval is how often a Reloader looks at its files.
const DefaultCheckInterval = 5 * time.Second

// Reloader serves a certificate and key from PEM files. It re-reads them when
// their modification time or size changed, looking at most once per
// interval, on the next handshake. A pair that fails to load (a rotation
// caught half-written) keeps the previous certificate in use until a later
// check loads the new one.
type Reloader struct {
	certFile, keyFile string
	interval          time.Duration
	now               func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
	lastErr error
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// NewReloader loads the pair at once; an error names the file at fault.
// interval 0 takes DefaultCheckInterval.
func NewReloader(certFile, keyFile string, interval time.Duration) (*Reloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("both a certificate file and a key file are needed")
	}
	if interval <= 0 {
		interval = DefaultCheckInterval
	}
	r := &Reloader{certFile: certFile, keyFile: keyFile, interval: interval, now: time.Now}
	st, err := r.stamps()
	if err != nil {
		return nil, err
	}
	if err := r.load(st); err != nil {
		return nil, err
	}
	r.checked = r.now()
	return r, nil
}

func (r *Reloader) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return out, nil
}

func (r *Reloader) load(st [2]fileStamp) error {
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("load %s and %s: %w", r.certFile, r.keyFile, err)
	}
	if c.Leaf == nil && len(c.Certificate) > 0 {
		c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	r.cert, r.stamp = &c, st
	return nil
}

// Certificate returns the current certificate, reloading it first when the
// files changed since the last check.
func (r *Reloader) Certificate() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checked) < r.interval {
		return r.cert
	}
	r.checked = now
	st, err := r.stamps()
	if err != nil {
		r.lastErr = err
		return r.cert
	}
	if st == r.stamp {
		return r.cert
	}
	r.lastErr = r.load(st)
	return r.cert
}

// Err is the error of the last failed reload, nil when the last one worked.
func (r *Reloader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// GetCertificate is for tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// GetClientCertificate is for tls.Config.GetClientCertificate.
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// LoadCAPool reads a PEM bundle of CA certificates.
func LoadCAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate found", file)
	}
	return pool, nil
}

// ServerConfig serves cert; with clientCAs, clients must present a
// certificate signed by one of them.
func ServerConfig(cert *Reloader, clientCAs *x509.CertPool) *tls.Config {
	c := &tls.Config{MinVersion: MinVersion, GetCertificate: cert.GetCertificate}
	if clientCAs != nil {
		c.ClientCAs = clientCAs
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// Client describes TLS towards one server: Enabled turns it on; CAFile
// (empty: the system roots) verifies the server; CertFile and KeyFile, both
// or neither, are the client certificate; ServerName, when set, is the name
// verified instead of the dialed host.
type Client struct {
	Enabled    bool
	CAFile     string
	CertFile   string
	KeyFile    string
	ServerName string
}

// Config builds the client configuration; nil when TLS is off. flag prefixes
// the errors, e.g. "--redis" gives "--redis-ca-file: ...".
func (c Client) Config(flag string) (*tls.Config, error) {
	if !c.Enabled {
		if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" {
			return nil, fmt.Errorf("%s-tls: must be set to use %s-ca-file, %s-cert-file or %s-key-file", flag, flag, flag, flag)
		}
		return nil, nil
	}
	var cert *Reloader
	if c.CertFile != "" || c.KeyFile != "" {
		if c.CertFile == "" || c.KeyFile == "" {
			return nil, fmt.Errorf("%s-cert-file and %s-key-file: set both or neither", flag, flag)
		}
		var err error
		if cert, err = NewReloader(c.CertFile, c.KeyFile, 0); err != nil {
			return nil, fmt.Errorf("%s-cert-file: %w", flag, err)
		}
	}
	var roots *x509.CertPool
	if c.CAFile != "" {
		var err error
		if roots, err = LoadCAPool(c.CAFile); err != nil {
			return nil, fmt.Errorf("%s-ca-file: %w", flag, err)
		}
	}
	return ClientConfig(roots, cert, c.ServerName), nil
}

// ClientConfig verifies the server against roots (nil: the system roots) and,
// with cert, presents it as the client certificate.
func ClientConfig(roots *x509.CertPool, cert *Reloader, serverName string) *tls.Config {
	c := &tls.Config{MinVersion: MinVersion, RootCAs: roots, ServerName: serverName}
	if cert != nil {
		c.GetClientCertificate = cert.GetClientCertificate
	}
	return c
}
