package main

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/internal/tlsx"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// seenPush records what reached the Push API: the authorization header and
// the client certificate's names.
type seenPush struct {
	pushpb.UnimplementedPushServer
	mu    sync.Mutex
	authz []string
	names []string
}

func (s *seenPush) Online(ctx context.Context, _ *pushpb.OnlineRequest) (*pushpb.OnlineResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var names []string
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			names = apikey.CertNames(&info.State)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.authz, s.names = md.Get("authorization"), names
	return &pushpb.OnlineResponse{}, nil
}

// --cert-file presents the certificate and, without --api-key, sends no key;
// with --api-key it sends that key too.
func TestClientCertificate(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	srvCert, srvKey := ca.Issue(t, "station")
	cliCert, cliKey := ca.Issue(t, "backend-1")
	r, err := tlsx.NewReloader(srvCert, srvKey, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := tlsx.ServerConfig(r, nil)
	conf.ClientCAs, conf.ClientAuth = ca.Pool, tls.VerifyClientCertIfGiven
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := &seenPush{}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(conf)))
	pushpb.RegisterPushServer(srv, seen)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	for _, c := range []struct {
		args      []string
		authz     string
		certNamed bool
	}{
		{[]string{"--cert-file", cliCert, "--key-file", cliKey}, "", true},
		{[]string{"--cert-file", cliCert, "--key-file", cliKey, "--api-key", "k1"}, "Bearer k1", true},
		{nil, "Bearer " + apikey.DevKey, false},
	} {
		args := append([]string{"online", "--push-addr", ln.Addr().String(), "--ca-file", ca.CertFile, "--uid", "alice"}, c.args...)
		if code, _, stderr := ctl(t, "", args...); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
		seen.mu.Lock()
		authz, names := strings.Join(seen.authz, ","), seen.names
		seen.mu.Unlock()
		if authz != c.authz || (len(names) > 0 && names[0] == "backend-1") != c.certNamed {
			t.Errorf("%q: authorization %q, certificate names %q; want %q, certificate %v", c.args, authz, names, c.authz, c.certNamed)
		}
	}
	if code, _, stderr := ctl(t, "", "online", "--push-addr", ln.Addr().String(), "--uid", "alice", "--cert-file", cliCert); code == 0 || !strings.Contains(stderr, "--key-file") {
		t.Errorf("--cert-file without --key-file: exit %d, %q", code, stderr)
	}
}
