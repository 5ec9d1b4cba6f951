package main

import (
	"crypto/tls"
	"flag"

	"google.golang.org/grpc"

	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/tlsx"
)

// transport holds --tls, --ca-file, --cert-file and --key-file of a command.
type transport struct {
	tls      bool
	caFile   string
	certFile string
	keyFile  string
}

// addTLSFlags registers --tls, --ca-file, --cert-file and --key-file on fs
// (GOMSG_TLS, GOMSG_CA_FILE, GOMSG_CERT_FILE, GOMSG_KEY_FILE in the
// environment).
func addTLSFlags(fs *flag.FlagSet) *transport {
	t := &transport{}
	fs.BoolVar(&t.tls, "tls", false, "connect over TLS")
	fs.StringVar(&t.caFile, "ca-file", "", "PEM CA bundle verifying the server (implies --tls; default the system roots)")
	fs.StringVar(&t.certFile, "cert-file", "", "PEM client certificate to present (implies --tls; with --key-file): a Push API call made with it and no --api-key sends no key")
	fs.StringVar(&t.keyFile, "key-file", "", "PEM key of --cert-file")
	return t
}

// hasCert reports whether a client certificate is presented.
func (t *transport) hasCert() bool { return t.certFile != "" }

// option is the dial option: TLS, or plaintext.
func (t *transport) option() (grpc.DialOption, error) {
	conf, err := t.config()
	if err != nil {
		return nil, err
	}
	return grpcx.WithTLS(conf), nil
}

// config is the TLS configuration; nil for plaintext.
func (t *transport) config() (*tls.Config, error) {
	c := tlsx.Client{Enabled: t.tls || t.caFile != "" || t.certFile != "" || t.keyFile != "", CAFile: t.caFile, CertFile: t.certFile, KeyFile: t.keyFile}
	return c.Config("-") // errors name --ca-file, --cert-file, --key-file
}
