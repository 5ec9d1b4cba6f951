package station

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pushgw "github.com/gomsg/gomsg/internal/pushgw/pushpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// The HTTP/JSON Push API: grpc-gateway's translation of the Push service
// (routes in pb/pushpb/push_http.yaml) and its OpenAPI document, behind a
// chain of handlers that hold HTTP's conventions.

// serveHTTP serves the HTTP/JSON Push API on httpLn until ctx ends.
func (s *Station) serveHTTP(ctx context.Context) error {
	h, err := s.httpHandler(ctx)
	if err != nil {
		return err
	}
	return s.serveOn(ctx, s.httpLn, h)
}

// serveOn serves h on ln with the HTTP limits until ctx ends, then shuts
// the server down within --shutdown-grace.
func (s *Station) serveOn(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := s.httpServer(h)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownGrace)
	defer cancel()
	_ = srv.Shutdown(shutCtx)
	<-errc
	return nil
}

// httpHandler builds the handler chain of the HTTP/JSON Push API. A request
// passes, outermost first:
//
//	allowMethods   405 with Allow for a known path and a method it does not take
//	requireJSON    415 for a body that is not JSON
//	mux            GET /openapi.json, and the gateway for /v1/…
//
// Layers that concern every request (authentication, limits) wrap h at the
// marked place.
func (s *Station) httpHandler(ctx context.Context) (http.Handler, error) {
	h, err := s.gatewayHandler(ctx)
	if err != nil {
		return nil, err
	}
	// Wrap h here in layers for every request (authentication, limits).
	h = s.limitBody(h)     // a body is read whole, at most --http-max-body-bytes, before anything decodes it
	h = s.requireAPIKey(h) // outermost: nothing is read or answered for a caller without a key
	return h, nil
}

// gatewayHandler is the HTTP/JSON Push API without its key check and body
// limit: the methods, the JSON check, the OpenAPI document and the gateway.
// The admin console serves some of its paths behind its own checks.
func (s *Station) gatewayHandler(ctx context.Context) (http.Handler, error) {
	routes, err := openAPIRoutes(pushpb.OpenAPI)
	if err != nil {
		return nil, err
	}
	gw := runtime.NewServeMux(
		// Unknown fields are an error (400 naming the field), not silently
		// dropped: a typo such as "msgOption" must not push without options.
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.HTTPBodyMarshaler{Marshaler: strictJSON{jsonCodec()}}),
		runtime.WithErrorHandler(gatewayError),
		runtime.WithRoutingErrorHandler(routingError),
	)
	if err := pushgw.RegisterPushHandlerServer(ctx, gw, &pushServer{s: s}); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	mux.Handle("/", requireJSON(gw))

	return allowMethods(routes, mux), nil
}

// openAPIRoutes reads the methods of every path of the OpenAPI document,
// with GET for /openapi.json itself.
func openAPIRoutes(doc []byte) (map[string][]string, error) {
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil {
		return nil, fmt.Errorf("openapi document: %w", err)
	}
	routes := map[string][]string{"/openapi.json": {http.MethodGet, http.MethodHead}}
	for path, ops := range spec.Paths {
		for m := range ops {
			routes[path] = append(routes[path], strings.ToUpper(m))
		}
		slices.Sort(routes[path])
	}
	return routes, nil
}

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(pushpb.OpenAPI)
}

// allowMethods answers a request for a known path with a method the path
// does not take: 405 with the Allow header (RFC 9110 §15.5.6).
func allowMethods(routes map[string][]string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allowed, ok := routes[r.URL.Path]
		if ok && !slices.Contains(allowed, r.Method) {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeHTTPError(w, http.StatusMethodNotAllowed, status.New(codes.Unimplemented,
				fmt.Sprintf("method %s not allowed on %s: use %s", r.Method, r.URL.Path, strings.Join(allowed, " or "))))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requireJSON answers a request that carries a body in anything but JSON
// with 415. A request without a body and without a Content-Type passes.
func requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if ct == "" && r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		if mt, _, err := mime.ParseMediaType(ct); err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			w.Header().Set("Accept-Post", "application/json")
			writeHTTPError(w, http.StatusUnsupportedMediaType, status.New(codes.InvalidArgument,
				fmt.Sprintf("Content-Type %q is not JSON: send the body as Content-Type: application/json", ct)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// routingError answers what the gateway's router refuses; a method the
// path does not take is 405 (the gateway's default says 501).
func routingError(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		writeHTTPError(w, httpStatus, status.Newf(codes.Unimplemented, "method %s not allowed on %s", r.Method, r.URL.Path))
	case http.StatusNotFound:
		writeHTTPError(w, httpStatus, status.Newf(codes.NotFound, "no such endpoint: %s %s (GET /openapi.json lists them)", r.Method, r.URL.Path))
	default:
		runtime.DefaultRoutingErrorHandler(ctx, mux, m, w, r, httpStatus)
	}
}

// gatewayError writes an error of a call through the gateway.
func gatewayError(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	httpStatus := 0
	var hs *runtime.HTTPStatusError
	if errors.As(err, &hs) {
		httpStatus, err = hs.HTTPStatus, hs.Err
	}
	st := status.Convert(err)
	if httpStatus == 0 {
		httpStatus = runtime.HTTPStatusFromCode(st.Code())
	}
	writeHTTPError(w, httpStatus, st)
}

// httpError is the body of every error answer: the gRPC status as JSON, its
// code as number and as name (google.rpc.Code), e.g.
//
//	{"code":3,"status":"INVALID_ARGUMENT","message":"uids: …","details":[{"@type":…}]}
type httpError struct {
	Code    int32             `json:"code"`
	Status  string            `json:"status"`
	Message string            `json:"message"`
	Details []json.RawMessage `json:"details,omitempty"`
}

func writeHTTPError(w http.ResponseWriter, httpStatus int, st *status.Status) {
	body := httpError{Code: int32(st.Code()), Status: rpccode.Code(st.Code()).String(), Message: st.Message()}
	for _, d := range st.Proto().GetDetails() {
		if b, err := protojson.Marshal(d); err == nil {
			body.Details = append(body.Details, b)
		}
	}
	h := w.Header()
	h.Del("Trailer")
	h.Del("Transfer-Encoding")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	if st.Code() == codes.Unauthenticated && h.Get("WWW-Authenticate") == "" {
		h.Set("WWW-Authenticate", "Bearer")
	}
	w.WriteHeader(httpStatus)
	_ = json.NewEncoder(w).Encode(body)
}

// jsonCodec is the HTTP/JSON API's codec: unknown fields are an error.
func jsonCodec() *runtime.JSONPb {
	return &runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}
}
