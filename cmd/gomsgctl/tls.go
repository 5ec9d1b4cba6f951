package main

import (
	"flag"

	"google.golang.org/grpc"

	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/tlsx"
)

// transport holds --tls and --ca-file of a command.
type transport struct {
	tls    bool
	caFile string
}

// addTLSFlags registers --tls and --ca-file on fs (GOMSG_TLS and
// GOMSG_CA_FILE in the environment).
func addTLSFlags(fs *flag.FlagSet) *transport {
	t := &transport{}
	fs.BoolVar(&t.tls, "tls", false, "connect over TLS")
	fs.StringVar(&t.caFile, "ca-file", "", "PEM CA bundle verifying the server (implies --tls; default the system roots)")
	return t
}

// option is the dial option: TLS, or plaintext.
func (t *transport) option() (grpc.DialOption, error) {
	c := tlsx.Client{Enabled: t.tls || t.caFile != "", CAFile: t.caFile}
	conf, err := c.Config("-") // errors name --ca-file
	if err != nil {
		return nil, err
	}
	return grpcx.WithTLS(conf), nil
}
