package app

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/internal/tlsx"
)

const redisPassword = "s3cret-redis-password"

func dialT(t *testing.T, b Backends) (*Clients, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if b.StartTimeout == 0 {
		b.StartTimeout = time.Second // refusals are retried until then
	}
	need := Needs{Redis: len(b.RedisAddrs) > 0, Kafka: len(b.KafkaBrokers) > 0, Etcd: len(b.EtcdEndpoints) > 0}
	c, err := Dial(ctx, b, need, zaptest.NewLogger(t))
	if err == nil {
		t.Cleanup(c.Close)
	}
	return c, err
}

func TestRedisPasswordAndTLS(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	addr := testutil.StartRedisSecure(t, ca, redisPassword)
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(redisPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsOn := tlsx.Client{Enabled: true, CAFile: ca.CertFile}
	clientCert, clientKey := ca.Issue(t, "gomsg-redis-client")
	for _, tc := range []struct {
		name string
		b    Backends
		ok   bool
	}{
		{"right password over TLS", Backends{RedisAuth: Credentials{Password: redisPassword}, RedisTLS: tlsOn}, true},
		{"password file", Backends{RedisAuth: Credentials{PasswordFile: pwFile}, RedisTLS: tlsOn}, true},
		{"default user and client certificate", Backends{RedisAuth: Credentials{Username: "default", Password: redisPassword},
			RedisTLS: tlsx.Client{Enabled: true, CAFile: ca.CertFile, CertFile: clientCert, KeyFile: clientKey}}, true},
		{"wrong password", Backends{RedisAuth: Credentials{Password: "wrong-password"}, RedisTLS: tlsOn}, false},
		{"no password", Backends{RedisTLS: tlsOn}, false},
		{"plaintext", Backends{RedisAuth: Credentials{Password: redisPassword}}, false},
		{"unknown CA", Backends{RedisAuth: Credentials{Password: redisPassword}, RedisTLS: tlsx.Client{Enabled: true}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.b.RedisAddrs = []string{addr}
			// Dial waits until Redis answers: a refused login fails it.
			c, err := dialT(t, tc.b)
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				err = c.Redis.Set(ctx, "k", "v", 0).Err()
				cancel()
			}
			if tc.ok && err != nil {
				t.Fatalf("SET: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatal("SET succeeded")
			}
			if err != nil && strings.Contains(err.Error(), redisPassword) {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}

func TestEtcdAuthAndTLS(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	ep := testutil.StartEtcdSecure(t, ca)
	tlsOn := tlsx.Client{Enabled: true, CAFile: ca.CertFile}
	root := Credentials{Username: testutil.EtcdRootUser, Password: testutil.EtcdRootPassword}
	for _, tc := range []struct {
		name string
		b    Backends
		ok   bool
	}{
		{"credentials over TLS", Backends{EtcdAuth: root, EtcdTLS: tlsOn}, true},
		{"no credentials", Backends{EtcdTLS: tlsOn}, false},
		{"wrong password", Backends{EtcdAuth: Credentials{Username: testutil.EtcdRootUser, Password: "wrong"}, EtcdTLS: tlsOn}, false},
		{"plaintext", Backends{EtcdAuth: root}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.b.EtcdEndpoints = []string{ep}
			c, err := dialT(t, tc.b)
			if err == nil {
				// etcd checks the password with bcrypt: slow on a busy machine.
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				_, err = c.Etcd.Put(ctx, "/gomsg/probe", tc.name)
				cancel()
			}
			if tc.ok && err != nil {
				t.Fatalf("put: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatal("put succeeded")
			}
			if err != nil && strings.Contains(err.Error(), testutil.EtcdRootPassword) {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}

func TestSecretsAreResolvedOnceAndNeverPrinted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("from-file\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Backends{KafkaSASLMechanism: "plain", KafkaAuth: Credentials{Username: "u", PasswordFile: pw},
		EtcdAuth: Credentials{Username: "e", PasswordFile: pw}}.resolveSecurity()
	if err != nil {
		t.Fatal(err)
	}
	if s.etcd.Password != "from-file" || s.kafka.SASL == nil {
		t.Fatalf("resolved %+v / sasl %v", s.etcd, s.kafka.SASL)
	}
	for _, tc := range []struct {
		b    Backends
		want string
	}{
		{Backends{RedisAuth: Credentials{Password: "p", PasswordFile: pw}}, "--redis-password and --redis-password-file"},
		{Backends{EtcdAuth: Credentials{Username: "e", PasswordFile: filepath.Join(dir, "missing")}}, "--etcd-password-file:"},
		{Backends{KafkaSASLMechanism: "plain", KafkaAuth: Credentials{Username: "u", PasswordFile: empty}}, "--kafka-password-file:"},
		{Backends{EtcdAuth: Credentials{Password: "p"}}, "--etcd-username"},
		{Backends{KafkaAuth: Credentials{Username: "u", Password: "p"}}, "--kafka-sasl-mechanism: must be set"},
		{Backends{KafkaSASLMechanism: "gssapi", KafkaAuth: Credentials{Username: "u", Password: "p"}}, "--kafka-sasl-mechanism:"},
		{Backends{KafkaSASLMechanism: "scram-sha-512", KafkaAuth: Credentials{Username: "u"}}, "--kafka-username and --kafka-password"},
		{Backends{KafkaTLS: tlsx.Client{CAFile: pw}}, "--kafka-tls: must be set"},
		{Backends{EtcdTLS: tlsx.Client{Enabled: true, CAFile: pw}}, "--etcd-ca-file:"},
	} {
		_, err := tc.b.resolveSecurity()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.b, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "from-file") {
			t.Errorf("error shows the password: %v", err)
		}
	}
	b := Backends{RedisAuth: Credentials{Username: "u", Password: "hunter2-secret"}, KafkaAuth: Credentials{Password: "hunter2-secret"},
		EtcdAuth: Credentials{Password: "hunter2-secret"}}
	js, _ := json.Marshal(b)
	for _, out := range []string{fmt.Sprintf("%v", b), fmt.Sprintf("%+v", b), fmt.Sprintf("%#v", b), string(js)} {
		if strings.Contains(out, "hunter2") {
			t.Errorf("password printed: %s", out)
		}
		if !strings.Contains(out, "redacted") {
			t.Errorf("no sign of the password in %s", out)
		}
	}
}

func TestAuthAddrPlaintextRefusedOutsideLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o    StationOptions
		want string // empty: accepted
	}{
		{StationOptions{AuthAddr: "auth.internal:9000"}, "--auth-addr \"auth.internal:9000\": plaintext"},
		{StationOptions{AuthAddr: "10.0.0.5:9000"}, "plaintext"},
		{StationOptions{AuthAddr: "10.0.0.5:9000", AuthInsecure: true}, ""},
		{StationOptions{AuthAddr: "127.0.0.1:9000"}, ""},
		{StationOptions{AuthAddr: "localhost:9000"}, ""},
		{StationOptions{AuthAddr: "[::1]:9000"}, ""},
		{StationOptions{AuthAddr: "auth.internal:9000", AuthTLS: true}, ""},
		{StationOptions{AuthAddr: "auth.internal:9000", AuthCAFile: "/x"}, "--auth-tls: must be set"},
		{StationOptions{AuthAddr: "auth.internal:9000", AuthTLS: true, AuthCAFile: "/nonexistent"}, "--auth-ca-file:"},
	} {
		conf, err := tc.o.authTransport(nil)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.o, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one containing %q", tc.o, err, tc.want)
		case err == nil && tc.o.AuthTLS && (conf == nil || conf.MinVersion < tlsx.MinVersion):
			t.Errorf("%+v: TLS config %v", tc.o, conf)
		}
	}
}

func TestPushClientTLS(t *testing.T) {
	ca := testutil.NewCA(t)
	if _, err := pushClientTLS(nil, ca.CertFile); err == nil || !strings.Contains(err.Error(), "--push-client-ca-file: needs --tls-cert-file") {
		t.Errorf("without a listener certificate: %v", err)
	}
	public := &tls.Config{MinVersion: tls.VersionTLS12}
	bad := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bad, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := pushClientTLS(public, bad); err == nil || !strings.Contains(err.Error(), "--push-client-ca-file: ") {
		t.Errorf("a file without a certificate: %v", err)
	}
	c, err := pushClientTLS(public, ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	// Asked for and verified when given, never required (keys still work),
	// and the shared public configuration is left as it was.
	if c.ClientAuth != tls.VerifyClientCertIfGiven || c.ClientCAs == nil || c.MinVersion != tls.VersionTLS12 {
		t.Errorf("config: auth %v, CAs %v, min version %x", c.ClientAuth, c.ClientCAs != nil, c.MinVersion)
	}
	if public.ClientAuth != tls.NoClientCert || public.ClientCAs != nil {
		t.Error("the public configuration was changed")
	}
}
