package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// MinInternalToken is the shortest internal token accepted outside dev.
const MinInternalToken = 16

// InternalServerOption makes an internal gRPC server (boat's, station's)
// refuse every call that does not carry `authorization: Bearer <token>`,
// with Unauthenticated, in a tap: before the request message is read.
// Health and reflection stay open. An empty token accepts every caller
// (--insecure-internal). onFail counts and logs a refusal (reason missing
// or invalid; ctx carries the caller's peer.Peer and info the method).
func InternalServerOption(token string, onFail func(ctx context.Context, info *tap.Info, reason string)) grpc.ServerOption {
	if token == "" {
		return grpc.EmptyServerOption{}
	}
	want := sha256.Sum256([]byte(token))
	return grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.Health/") || strings.HasPrefix(info.FullMethodName, "/grpc.reflection.") {
			return ctx, nil
		}
		v := info.Header.Get("authorization")
		reason := ""
		switch {
		case len(v) == 0 || v[0] == "":
			reason = "missing"
		case len(v) > 1 || !strings.HasPrefix(v[0], "Bearer "):
			reason = "invalid"
		default:
			got := sha256.Sum256([]byte(v[0][len("Bearer "):]))
			if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				reason = "invalid"
			}
		}
		if reason == "" {
			return ctx, nil
		}
		if onFail != nil {
			onFail(ctx, info, reason)
		}
		return nil, status.Error(codes.Unauthenticated, "internal API: "+reason+" internal token (--internal-token-file / GOMSG_INTERNAL_TOKEN must match across the cluster)")
	})
}

// RefusalFields are the log fields of a refused internal call: who called
// what, and why — never what it sent.
func RefusalFields(ctx context.Context, info *tap.Info, reason string) []zap.Field {
	caller := "unknown"
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		caller = p.Addr.String()
	}
	return []zap.Field{zap.String("reason", reason), zap.String("method", info.FullMethodName), zap.String("peer", caller)}
}

// tokenConn adds a bearer token to every call made on a connection.
type tokenConn struct {
	grpc.ClientConnInterface
	value string
}

// WithBearer makes calls on conn carry `authorization: Bearer <token>` (the
// internal token, or a Push API key); an empty token leaves conn as is.
func WithBearer(conn grpc.ClientConnInterface, token string) grpc.ClientConnInterface {
	if token == "" {
		return conn
	}
	return &tokenConn{ClientConnInterface: conn, value: "Bearer " + token}
}

func (c *tokenConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.ClientConnInterface.Invoke(metadata.AppendToOutgoingContext(ctx, "authorization", c.value), method, args, reply, opts...)
}

func (c *tokenConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.ClientConnInterface.NewStream(metadata.AppendToOutgoingContext(ctx, "authorization", c.value), desc, method, opts...)
}

// bearerCreds are per-RPC credentials carrying a bearer token.
type bearerCreds struct{ value string }

func (c bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": c.value}, nil
}

// RequireTransportSecurity is false: the token also guards plaintext
// internal hops (TLS, where configured, protects it on the wire).
func (bearerCreds) RequireTransportSecurity() bool { return false }

// BearerDialOption makes every call on a connection carry `authorization:
// Bearer <token>`; an empty token adds nothing.
func BearerDialOption(token string) grpc.DialOption {
	if token == "" {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithPerRPCCredentials(bearerCreds{value: "Bearer " + token})
}
