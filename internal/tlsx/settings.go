package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// Settings are a process's own TLS settings (--tls-cert-file and friends).
type Settings struct {
	// CertFile and KeyFile are the PEM certificate and key every listener
	// serves, and the client certificate of internal calls under mTLS.
	CertFile string
	KeyFile  string
	// CAFile verifies the servers of internal calls when InternalCAFile is
	// not set (empty: the system roots).
	CAFile string
	// InternalCAFile turns on internal mTLS: internal listeners require a
	// client certificate signed by it, internal calls present CertFile and
	// verify the server against it.
	InternalCAFile string
	// ServerName is the name internal calls verify in the server's
	// certificate (empty: the dialed host).
	ServerName string
}

// Configs are the TLS configurations built from Settings; a nil field means
// plaintext.
type Configs struct {
	// Public serves the client stream and the Push API.
	Public *tls.Config
	// Internal serves boat's and station's internal APIs.
	Internal *tls.Config
	// InternalClient dials the internal APIs (boat → station, carrier →
	// boat).
	InternalClient *tls.Config
	// Cert is the reloaded certificate, nil without one.
	Cert *Reloader
}

// Build loads the files and checks that the settings fit together; errors
// name the flag.
func (s Settings) Build() (Configs, error) {
	var out Configs
	if (s.CertFile == "") != (s.KeyFile == "") {
		return out, errors.New("--tls-cert-file and --tls-key-file: set both or neither")
	}
	if s.CertFile != "" {
		r, err := NewReloader(s.CertFile, s.KeyFile, 0)
		if err != nil {
			return out, fmt.Errorf("--tls-cert-file: %w", err)
		}
		out.Cert = r
	}
	var internalCA, ca *x509.CertPool
	if s.InternalCAFile != "" {
		if out.Cert == nil {
			return out, errors.New("--internal-ca-file: needs --tls-cert-file and --tls-key-file (the certificate this service presents)")
		}
		var err error
		if internalCA, err = LoadCAPool(s.InternalCAFile); err != nil {
			return out, fmt.Errorf("--internal-ca-file: %w", err)
		}
	}
	if s.CAFile != "" {
		var err error
		if ca, err = LoadCAPool(s.CAFile); err != nil {
			return out, fmt.Errorf("--tls-ca-file: %w", err)
		}
	}
	if out.Cert != nil {
		out.Public = ServerConfig(out.Cert, nil)
		out.Internal = ServerConfig(out.Cert, internalCA)
	}
	switch {
	case internalCA != nil:
		out.InternalClient = ClientConfig(internalCA, out.Cert, s.ServerName)
	case out.Cert != nil || ca != nil:
		out.InternalClient = ClientConfig(ca, nil, s.ServerName)
	}
	return out, nil
}
