package app

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/tlsx"
)

// Credentials are a username and password towards one backend. The password
// comes from Password (a flag or GOMSG_* variable) or is read from
// PasswordFile by Dial. Printing Credentials never shows the password.
type Credentials struct {
	Username     string
	Password     string
	PasswordFile string
}

// String hides the password from %v and %+v.
func (c Credentials) String() string {
	return fmt.Sprintf("{Username:%s Password:%s PasswordFile:%s}", c.Username, redact(c.Password), c.PasswordFile)
}

// GoString hides the password from %#v.
func (c Credentials) GoString() string { return "app.Credentials" + c.String() }

// MarshalJSON hides the password from JSON and reflection-based loggers.
func (c Credentials) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"username":%q,"password":%q,"password_file":%q}`, c.Username, redact(c.Password), c.PasswordFile), nil
}

func redact(s string) string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// resolve reads PasswordFile (trailing newlines dropped). flag is the
// settings' prefix, e.g. "--redis".
func (c *Credentials) resolve(flag string) error {
	if c.PasswordFile == "" {
		return nil
	}
	if c.Password != "" {
		return fmt.Errorf("%s-password and %s-password-file: set one, not both", flag, flag)
	}
	b, err := os.ReadFile(c.PasswordFile)
	if err != nil {
		return fmt.Errorf("%s-password-file: %w", flag, err)
	}
	c.Password = strings.TrimRight(string(b), "\r\n")
	if c.Password == "" {
		return fmt.Errorf("%s-password-file: %s is empty", flag, c.PasswordFile)
	}
	return nil
}

// security is the backends' credentials and TLS, with secrets read.
type security struct {
	redis, etcd       Credentials
	redisTLS, etcdTLS *tls.Config
	kafka             queue.Security
	nats              Credentials
	natsToken         string
	natsTLS           *tls.Config
}

// resolveSecurity reads the *-file secrets and builds the TLS and SASL
// settings of every backend: the one place they are resolved.
func (b Backends) resolveSecurity() (security, error) {
	s := security{redis: b.RedisAuth, etcd: b.EtcdAuth, nats: b.NATSAuth, natsToken: b.NATSToken}
	kafka := b.KafkaAuth
	for _, r := range []struct {
		flag string
		c    *Credentials
	}{{"--redis", &s.redis}, {"--etcd", &s.etcd}, {"--kafka", &kafka}, {"--nats", &s.nats}} {
		if err := r.c.resolve(r.flag); err != nil {
			return s, err
		}
	}
	if s.etcd.Username == "" && s.etcd.Password != "" {
		return s, errors.New("--etcd-username: must be set with --etcd-password")
	}
	var err error
	if s.redisTLS, err = b.RedisTLS.Config("--redis"); err != nil {
		return s, err
	}
	if s.etcdTLS, err = b.EtcdTLS.Config("--etcd"); err != nil {
		return s, err
	}
	if s.kafka.TLS, err = b.KafkaTLS.Config("--kafka"); err != nil {
		return s, err
	}
	if s.natsTLS, err = b.NATSTLS.Config("--nats"); err != nil {
		return s, err
	}
	if b.NATSTokenFile != "" {
		if s.natsToken != "" {
			return s, errors.New("GOMSG_NATS_TOKEN and --nats-token-file: set one, not both")
		}
		t, err := os.ReadFile(b.NATSTokenFile)
		if err != nil {
			return s, fmt.Errorf("--nats-token-file: %w", err)
		}
		if s.natsToken = strings.TrimRight(string(t), "\r\n"); s.natsToken == "" {
			return s, fmt.Errorf("--nats-token-file: %s is empty", b.NATSTokenFile)
		}
	}
	if s.kafka.SASL, err = queue.NewSASL(b.KafkaSASLMechanism, kafka.Username, kafka.Password); err != nil {
		return s, err
	}
	return s, nil
}

// authTransport is the TLS configuration towards --auth-addr, nil for
// plaintext. Plaintext to a host other than loopback is refused unless
// AuthInsecure is set (the default of `gomsg dev` only).
func (o StationOptions) authTransport(cert *tlsx.Reloader) (*tls.Config, error) {
	if !o.AuthTLS {
		if o.AuthCAFile != "" {
			return nil, errors.New("--auth-tls: must be set to use --auth-ca-file")
		}
		if !o.AuthInsecure && !isLoopback(o.AuthAddr) {
			return nil, fmt.Errorf("--auth-addr %q: plaintext to a non-loopback address; set --auth-tls (and --auth-ca-file), or --auth-insecure to accept it", o.AuthAddr)
		}
		return nil, nil
	}
	c := tlsx.Client{Enabled: true, CAFile: o.AuthCAFile}
	conf, err := c.Config("--auth")
	if err != nil {
		return nil, err
	}
	if cert != nil {
		conf.GetClientCertificate = cert.GetClientCertificate
	}
	return conf, nil
}

// isLoopback reports whether addr (host:port, or a gRPC target) names the
// local machine.
func isLoopback(addr string) bool {
	if strings.HasPrefix(addr, "unix:") {
		return true
	}
	addr = strings.TrimPrefix(addr, "dns:///")
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// pushClientTLS is the Push API's TLS configuration when backends may present
// client certificates signed by caFile: asked for, verified when given, not
// required (a backend may still send a key).
func pushClientTLS(public *tls.Config, caFile string) (*tls.Config, error) {
	if public == nil {
		return nil, errors.New("--push-client-ca-file: needs --tls-cert-file and --tls-key-file (client certificates are part of the TLS handshake)")
	}
	pool, err := tlsx.LoadCAPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("--push-client-ca-file: %w", err)
	}
	c := public.Clone()
	c.ClientCAs = pool
	c.ClientAuth = tls.VerifyClientCertIfGiven
	return c, nil
}
