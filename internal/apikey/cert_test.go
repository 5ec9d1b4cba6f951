package apikey

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestParseCertLines(t *testing.T) {
	keys, err := Parse("cert:backend-1 push,online b1; cert:spiffe://corp/ns/x/sa/y devices\n" + Line("k", []Scope{All}, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || keys[0].Cert != "backend-1" || keys[0].Name != "b1" || keys[1].Cert != "spiffe://corp/ns/x/sa/y" || keys[2].Cert != "" {
		t.Fatalf("parsed %+v", keys)
	}
	if keys[0].Hash != ([32]byte{}) {
		t.Fatal("a cert line has a key hash")
	}
	for _, bad := range []string{"cert: push", "cert:x", "cert:x pusj"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	if _, err := Parse("cert: push"); err == nil || !strings.Contains(err.Error(), "certificate's name") {
		t.Errorf("empty cert name: %v", err)
	}
}

func TestCheckCert(t *testing.T) {
	keys, err := Parse("cert:backend-1 push,online b1\ncert:ops.example.com * ops\n" + Line("secret-key", []Scope{Push}, "k"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewSet(keys)
	for _, c := range []struct {
		ids   []string
		scope Scope
		want  error
		name  string
	}{
		{[]string{"backend-1"}, Push, nil, "b1"},
		{[]string{"backend-1"}, Online, nil, "b1"},
		{[]string{"backend-1"}, Kickout, ErrScope, ""},
		{[]string{"stranger", "ops.example.com"}, Kickout, nil, "ops"}, // a DNS name among the names
		{[]string{"stranger"}, Push, ErrInvalid, ""},
		{nil, Push, ErrMissing, ""},
		{[]string{""}, Push, ErrInvalid, ""},
	} {
		k, err := s.CheckCert(c.ids, c.scope)
		if !errors.Is(err, c.want) || (c.want == nil && k.Name != c.name) {
			t.Errorf("CheckCert(%q, %s) = %v, %v; want %v %s", c.ids, c.scope, k, err, c.want, c.name)
		}
	}
	// A certificate line is not a key: its name (or an empty key) never
	// passes the key check.
	for _, presented := range []string{"backend-1", "cert:backend-1"} {
		if _, err := s.Check(presented, Push); !errors.Is(err, ErrInvalid) {
			t.Errorf("Check(%q) = %v, want ErrInvalid", presented, err)
		}
	}
	if _, err := NewSet(nil).CheckCert([]string{"backend-1"}, Push); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty set: %v", err)
	}
}

func TestCertNamesOnlyOfAVerifiedCertificate(t *testing.T) {
	u, _ := url.Parse("spiffe://corp/ns/x/sa/y")
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "backend-1"}, DNSNames: []string{"b1.example.com"}, URIs: []*url.URL{u}}
	got := CertNames(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}})
	if strings.Join(got, " ") != "backend-1 b1.example.com spiffe://corp/ns/x/sa/y" {
		t.Fatalf("names %q", got)
	}
	// Presented but not verified (no client CA configured): no names.
	if got := CertNames(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}); got != nil {
		t.Fatalf("unverified certificate has names %q", got)
	}
	if CertNames(nil) != nil {
		t.Fatal("plaintext has names")
	}
	noCN := &x509.Certificate{DNSNames: []string{"b1.example.com"}}
	if got := CertNames(&tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{noCN}}}); strings.Join(got, " ") != "b1.example.com" {
		t.Fatalf("no CN: %q", got)
	}
}
