package apikey

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// Guard checks the key of every call before the request is read: over gRPC
// in a tap (it runs when the headers arrive, before any message is decoded),
// over HTTP in a handler wrapper (before the body is read).
type Guard struct {
	Keys *Store
	// ScopeOf is the scope a gRPC method ("/pkg.Service/Method") or an HTTP
	// path needs; open means no key is needed (health, reflection).
	ScopeOf func(methodOrPath string) (scope Scope, open bool)
	// OnFail counts a refusal; reason is Reason(err).
	OnFail func(reason string)
	// WriteHTTPError writes an HTTP refusal in the API's error shape (nil:
	// {code, status, message}).
	WriteHTTPError func(w http.ResponseWriter, httpStatus int, st *status.Status)
}

type keyCtx struct{}

// FromContext is the key a call was admitted with (nil for an open method):
// what per-key quotas are counted against.
func FromContext(ctx context.Context) *Key {
	k, _ := ctx.Value(keyCtx{}).(*Key)
	return k
}

// withKey returns ctx carrying k.
func withKey(ctx context.Context, k *Key) context.Context {
	if k == nil {
		return ctx
	}
	return context.WithValue(ctx, keyCtx{}, k)
}

// check admits a call by its key, or, when it sends no authorization at all,
// by the names of its verified client certificate (certNames), and returns
// the key that admitted it.
func (g *Guard) check(authz []string, name string, certNames []string) (*Key, error) {
	scope, open := g.ScopeOf(name)
	if open {
		return nil, nil
	}
	var (
		key *Key
		err error
	)
	switch {
	case (len(authz) == 0 || authz[0] == "") && len(certNames) > 0 && g.Keys != nil:
		key, err = g.Keys.CheckCert(certNames, scope)
	case len(authz) == 0 || authz[0] == "":
		err = ErrMissing
	case len(authz) > 1:
		err = ErrInvalid
	default:
		if presented := Bearer(authz[0]); presented == "" {
			err = ErrMissing
		} else if g.Keys == nil {
			err = ErrInvalid
		} else {
			key, err = g.Keys.Check(presented, scope)
		}
	}
	if err != nil && g.OnFail != nil {
		g.OnFail(Reason(err))
	}
	return key, err
}

// Tap is a grpc.InTapHandle.
func (g *Guard) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	key, err := g.check(info.Header.Get("authorization"), info.FullMethodName, peerCertNames(ctx))
	if err != nil {
		return nil, GRPCError(err)
	}
	return withKey(ctx, key), nil
}

// ServerOption installs the tap on a gRPC server.
func (g *Guard) ServerOption() grpc.ServerOption { return grpc.InTapHandle(g.Tap) }

// CertNames are the names a line `cert:<name>` may give a client
// certificate: its subject common name, DNS names and URIs (a SPIFFE ID, for
// example). Only a certificate the TLS handshake verified has names; nil
// otherwise.
func CertNames(cs *tls.ConnectionState) []string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	leaf := cs.VerifiedChains[0][0]
	var names []string
	if leaf.Subject.CommonName != "" {
		names = append(names, leaf.Subject.CommonName)
	}
	names = append(names, leaf.DNSNames...)
	for _, u := range leaf.URIs {
		names = append(names, u.String())
	}
	return names
}

// peerCertNames are the CertNames of a gRPC call's connection.
func peerCertNames(ctx context.Context) []string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	return CertNames(&info.State)
}

// GRPCError is the status of a check's error: Unauthenticated for a missing
// or unknown key, PermissionDenied for a missing scope.
func GRPCError(err error) error {
	if errors.Is(err, ErrScope) {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return status.Error(codes.Unauthenticated, err.Error())
}

// HTTP wraps next: a call without a valid key gets 401 with
// `WWW-Authenticate: Bearer`, one whose key lacks the scope 403; the body is
// never read. The error body is written by WriteHTTPError.
func (g *Guard) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := g.check(r.Header.Values("Authorization"), r.URL.Path, CertNames(r.TLS))
		if err == nil {
			next.ServeHTTP(w, r.WithContext(withKey(r.Context(), key)))
			return
		}
		code, httpCode := codes.Unauthenticated, http.StatusUnauthorized
		if errors.Is(err, ErrScope) {
			code, httpCode = codes.PermissionDenied, http.StatusForbidden
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gomsg"`)
		}
		// The body is not read: close the connection rather than drain it.
		w.Header().Set("Connection", "close")
		write := g.WriteHTTPError
		if write == nil {
			write = writeHTTPError
		}
		write(w, httpCode, status.New(code, err.Error()))
	})
}

func writeHTTPError(w http.ResponseWriter, httpStatus int, st *status.Status) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": int(st.Code()), "status": rpccode.Code(st.Code()).String(), "message": st.Message()})
}
