package apikey

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"go.uber.org/zap"

	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/gomsg/gomsg/internal/outage"
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
	// Log, when set, gets a WARN line per refusal — the caller's address,
	// the key's name (or, for a key not configured, the start of its
	// SHA-256, never the key) — at most FailureLogBurst at once and one a
	// second after that, so that a flood of bad calls cannot flood the log;
	// the next line says how many were left out.
	Log *zap.Logger

	logOnce  sync.Once
	refusals *outage.Refusals
}

// FailureLogBurst is how many refusals Guard logs at once before it logs
// one a second.
const FailureLogBurst = outage.RefusalBurst

// refusal is what a failed check knows about the caller.
type refusal struct {
	name     string // gRPC method or HTTP path
	peer     string
	key      *Key   // the configured key or certificate line, if one matched
	hash     string // the start of the presented key's SHA-256, if one was sent
	certName string // a verified client certificate's first name
}

func (g *Guard) logRefusal(err error, r refusal) {
	if g.Log == nil {
		return
	}
	g.logOnce.Do(func() { g.refusals = outage.NewRefusals(g.Log, "Push API call refused") })
	fields := []zap.Field{zap.String("reason", Reason(err)), zap.String("method", r.name), zap.String("peer", r.peer), zap.Error(err)}
	switch {
	case r.key != nil && r.key.Name != "":
		fields = append(fields, zap.String("key", r.key.Name))
	case r.key != nil && r.key.Cert != "":
		fields = append(fields, zap.String("key", CertPrefix+r.key.Cert))
	case r.hash != "":
		fields = append(fields, zap.String("key_sha256_prefix", r.hash))
	}
	if r.certName != "" {
		fields = append(fields, zap.String("client_cert", r.certName))
	}
	g.refusals.Log(fields...)
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
// the key that admitted it. A refusal is counted and logged with peer.
func (g *Guard) check(authz []string, name string, certNames []string, peer string) (*Key, error) {
	scope, open := g.ScopeOf(name)
	if open {
		return nil, nil
	}
	var (
		err    error
		r      = refusal{name: name, peer: peer}
		bearer string // the key presented, hashed for the log only if refused
	)
	switch {
	case (len(authz) == 0 || authz[0] == "") && len(certNames) > 0 && g.Keys != nil:
		r.certName = certNames[0]
		r.key, err = g.Keys.CheckCert(certNames, scope)
	case len(authz) == 0 || authz[0] == "":
		err = ErrMissing
	case len(authz) > 1:
		err = ErrInvalid
	default:
		if key := Bearer(authz[0]); key == "" {
			err = ErrMissing
		} else {
			bearer = key
			if g.Keys == nil {
				err = ErrInvalid
			} else {
				r.key, err = g.Keys.Check(key, scope)
			}
		}
	}
	if err == nil {
		return r.key, nil
	}
	if bearer != "" {
		h := Hash(bearer)
		r.hash = hex.EncodeToString(h[:4])
	}
	if g.OnFail != nil {
		g.OnFail(Reason(err))
	}
	g.logRefusal(err, r)
	return nil, err
}

// Tap is a grpc.InTapHandle.
func (g *Guard) Tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	key, err := g.check(info.Header.Get("authorization"), info.FullMethodName, peerCertNames(ctx), addr)
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
		key, err := g.check(r.Header.Values("Authorization"), r.URL.Path, CertNames(r.TLS), r.RemoteAddr)
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
