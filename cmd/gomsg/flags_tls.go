package main

import (
	"flag"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/config"
	"github.com/gomsg/gomsg/internal/tlsx"
)

// registerTLS adds the flags of the services' own TLS and of the credentials
// and TLS towards Redis, Kafka and etcd. Passwords are best given as
// GOMSG_* variables or *-password-file: a command line is visible to every
// local user and in /debug/pprof/cmdline.
func registerTLS(fs *flag.FlagSet, s *tlsx.Settings, b *app.Backends) {
	fs.StringVar(&s.CertFile, "tls-cert-file", "", "PEM certificate of every listener (reloaded when the file changes); empty: plaintext")
	fs.StringVar(&s.KeyFile, "tls-key-file", "", "PEM private key of tls-cert-file")
	fs.StringVar(&s.CAFile, "tls-ca-file", "", "PEM CA bundle internal calls verify servers with, without internal-ca-file (default the system roots)")
	fs.StringVar(&s.InternalCAFile, "internal-ca-file", "", "PEM CA of the cluster: internal listeners require client certificates it signed, internal calls present tls-cert-file")
	fs.StringVar(&s.ServerName, "tls-server-name", "", "name internal calls verify in the server certificate (default the dialed host)")

	creds := func(name string, c *app.Credentials) {
		fs.StringVar(&c.Username, name+"-username", "", name+" username")
		fs.StringVar(&c.Password, name+"-password", "", name+" password (prefer "+config.EnvName(name+"-password")+" or "+name+"-password-file)")
		fs.StringVar(&c.PasswordFile, name+"-password-file", "", "file holding the "+name+" password")
	}
	tlsClient := func(name string, c *tlsx.Client) {
		fs.BoolVar(&c.Enabled, name+"-tls", false, "talk to "+name+" over TLS")
		fs.StringVar(&c.CAFile, name+"-ca-file", "", "PEM CA bundle verifying "+name+" (default the system roots)")
		fs.StringVar(&c.CertFile, name+"-cert-file", "", "PEM client certificate towards "+name+" (optional)")
		fs.StringVar(&c.KeyFile, name+"-key-file", "", "PEM key of "+name+"-cert-file")
	}
	creds("redis", &b.RedisAuth)
	tlsClient("redis", &b.RedisTLS)
	fs.StringVar(&b.KafkaSASLMechanism, "kafka-sasl-mechanism", "", "Kafka SASL mechanism: plain, scram-sha-256 or scram-sha-512; empty: no SASL")
	creds("kafka", &b.KafkaAuth)
	tlsClient("kafka", &b.KafkaTLS)
	creds("etcd", &b.EtcdAuth)
	tlsClient("etcd", &b.EtcdTLS)
	registerNATS(fs, b, tlsClient)
}

// The NATS secrets' variables: their flags are refused on a command line
// (finish), which every local user can read.
const (
	natsPasswordEnv = "GOMSG_NATS_PASSWORD"
	natsTokenEnv    = "GOMSG_NATS_TOKEN"
)

// registerNATS adds the flags of the credentials, TLS and stream settings
// towards NATS (--queue nats).
func registerNATS(fs *flag.FlagSet, b *app.Backends, tlsClient func(string, *tlsx.Client)) {
	var d app.Backends
	d.Defaults()
	fs.StringVar(&b.NATSAuth.Username, "nats-user", "", "NATS user; its password in "+natsPasswordEnv+" or nats-password-file")
	fs.StringVar(&b.NATSAuth.Password, "nats-password", "", "NATS password: only as "+natsPasswordEnv+" (refused on the command line), or nats-password-file")
	fs.StringVar(&b.NATSToken, "nats-token", "", "NATS token: only as "+natsTokenEnv+" (refused on the command line), or nats-token-file")
	fs.StringVar(&b.NATSAuth.PasswordFile, "nats-password-file", "", "file holding the NATS password")
	fs.StringVar(&b.NATSTokenFile, "nats-token-file", "", "file holding a NATS token (or "+natsTokenEnv+")")
	fs.StringVar(&b.NATSNKeySeedFile, "nats-nkey-seed-file", "", "file holding the NKey seed gomsg authenticates to NATS with")
	fs.StringVar(&b.NATSCredsFile, "nats-creds-file", "", "NATS .creds file (user JWT and NKey seed)")
	tlsClient("nats", &b.NATSTLS)
	fs.IntVar(&b.NATSReplicas, "nats-replicas", d.NATSReplicas, "replicas of the JetStream streams and buckets gomsg creates (1, 3 or 5)")
	fs.DurationVar(&b.NATSMaxAge, "nats-max-age", d.NATSMaxAge, "how long the streams gomsg creates keep a record (`duration`)")
}

// registerAuthTLS adds the flags of the connection to --auth-addr.
func registerAuthTLS(fs *flag.FlagSet, o *app.StationOptions, devMode bool) {
	fs.BoolVar(&o.AuthTLS, "auth-tls", false, "dial auth-addr over TLS")
	fs.StringVar(&o.AuthCAFile, "auth-ca-file", "", "PEM CA bundle verifying auth-addr (default the system roots)")
	fs.BoolVar(&o.AuthInsecure, "auth-insecure", devMode, "accept a plaintext auth-addr that is not loopback")
}
