package station

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const (
	allKey  = "gmk_test_all_scopes"
	pushKey = "gmk_test_push_only"
	okPush  = `{"uids":["ann"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"hi"}]}`
)

func apiKeys(t testing.TB) *apikey.Store {
	t.Helper()
	keys, err := apikey.NewStore(apikey.Config{Keys: apikey.Line(allKey, []apikey.Scope{apikey.All}, "all") + "\n" +
		apikey.Line(pushKey, []apikey.Scope{apikey.Push}, "push")}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// httpRig serves the HTTP/JSON API of a rig's station (bodies of at most
// 300 bytes); change, when given, changes its configuration further.
func httpRig(t testing.TB, change ...func(*Config)) (*rig, *httptest.Server) {
	t.Helper()
	r := newRig(t, func(c *Config) {
		c.HTTP.MaxBodyBytes = 300
		c.APIKeys = apiKeys(t)
		for _, f := range change {
			f(c)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h, err := r.s.httpHandler(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return r, srv
}

type answer struct {
	status int
	header http.Header
	body   []byte
	err    httpError
	close  bool // the server closes the connection
}

func call(t testing.TB, srv *httptest.Server, method, path, contentType, key string, body io.Reader) answer {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header, close: resp.Close}
	if a.body, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 400 {
		if err := json.Unmarshal(a.body, &a.err); err != nil {
			t.Fatalf("%s %s: error body %q: %v", method, path, a.body, err)
		}
	}
	return a
}

// wantError fails unless a is the API's error answer: httpStatus, the gRPC
// code as number and name, and the exact message.
func (a answer) wantError(t testing.TB, what string, httpStatus int, code int32, name, msg string) {
	t.Helper()
	if a.status != httpStatus || a.err.Code != code || a.err.Status != name || a.err.Message != msg {
		t.Fatalf("%s: %d %+v, want %d {%d %s %q}", what, a.status, a.err, httpStatus, code, name, msg)
	}
	if a.header.Get("Content-Type") != "application/json" || a.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("%s: headers %v", what, a.header)
	}
	if code != 16 && a.header.Get("WWW-Authenticate") != "" {
		t.Fatalf("%s: WWW-Authenticate %q on a %s", what, a.header.Get("WWW-Authenticate"), name)
	}
}

// The HTTP/JSON API answers each kind of refusal with its HTTP status and
// the gRPC status as JSON, and a good push with its seqs.
func TestHTTPAPI(t *testing.T) {
	t.Parallel()
	r, srv := httpRig(t)
	const jsonCT = "application/json"

	a := call(t, srv, "POST", "/v1/push", jsonCT, "", strings.NewReader(okPush))
	a.wantError(t, "no key", 401, 16, "UNAUTHENTICATED", apikey.ErrMissing.Error())
	if got := a.header.Get("WWW-Authenticate"); got != `Bearer realm="gomsg"` {
		t.Fatalf("no key: WWW-Authenticate %q, want the guard's", got)
	}
	call(t, srv, "POST", "/v1/online", jsonCT, pushKey, strings.NewReader(`{"uids":["ann"]}`)).
		wantError(t, "key without the scope", 403, 7, "PERMISSION_DENIED", apikey.ErrScope.Error()+` "online"`)
	r.noTasks("refused callers")

	a = call(t, srv, "GET", "/openapi.json", "", "", nil)
	if a.status != 200 || a.header.Get("Content-Type") != "application/json" || !bytes.Equal(a.body, pushpb.OpenAPI) {
		t.Fatalf("GET /openapi.json: %d %v", a.status, a.header)
	}
	a = call(t, srv, "GET", "/v1/push", "", allKey, nil)
	a.wantError(t, "GET /v1/push", 405, 12, "UNIMPLEMENTED", "method GET not allowed on /v1/push: use POST")
	if a.header.Get("Allow") != "POST" {
		t.Fatalf("GET /v1/push: Allow %q", a.header.Get("Allow"))
	}
	a = call(t, srv, "POST", "/openapi.json", jsonCT, allKey, strings.NewReader("{}"))
	a.wantError(t, "POST /openapi.json", 405, 12, "UNIMPLEMENTED", "method POST not allowed on /openapi.json: use GET or HEAD")
	if a.header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST /openapi.json: Allow %q", a.header.Get("Allow"))
	}
	call(t, srv, "GET", "/v1/nope", "", allKey, nil).
		wantError(t, "unknown path", 404, 5, "NOT_FOUND", "no such endpoint: GET /v1/nope (GET /openapi.json lists them)")

	for _, ct := range []string{"text/plain", "", "application/json; =", "application/jsonx"} {
		a = call(t, srv, "POST", "/v1/push", ct, allKey, strings.NewReader(okPush))
		a.wantError(t, "Content-Type "+ct, 415, 3, "INVALID_ARGUMENT",
			`Content-Type "`+ct+`" is not JSON: send the body as Content-Type: application/json`)
		if a.header.Get("Accept-Post") != "application/json" {
			t.Fatalf("Content-Type %q: Accept-Post %q", ct, a.header.Get("Accept-Post"))
		}
	}
	r.noTasks("refused media types")

	a = call(t, srv, "POST", "/v1/push", jsonCT, allKey, strings.NewReader(`{"uids":["ann"]}`))
	a.wantError(t, "push without bodies", 400, 3, "INVALID_ARGUMENT", "msg_bodies: must hold at least one body")
	if len(a.err.Details) != 1 || !strings.Contains(string(a.err.Details[0]), "INVALID_REQUEST") {
		t.Fatalf("push without bodies: details %s", a.err.Details)
	}
	a = call(t, srv, "POST", "/v1/push", jsonCT, allKey, strings.NewReader(`{"uids":["ann"],"msgOption":2}`))
	if a.status != 400 || a.err.Code != 3 || !strings.Contains(a.err.Message, "msgOption") {
		t.Fatalf("unknown field: %d %+v, want 400 naming msgOption", a.status, a.err)
	}
	r.noTasks("refused pushes")

	for _, ct := range []string{jsonCT, "application/problem+json; charset=utf-8"} {
		a = call(t, srv, "POST", "/v1/push", ct, allKey, strings.NewReader(okPush))
		var resp struct{ Seqs []string }
		if err := json.Unmarshal(a.body, &resp); a.status != 200 || err != nil || len(resp.Seqs) != 1 {
			t.Fatalf("push as %s: %d %s", ct, a.status, a.body)
		}
		if keys, _ := r.tasks(); len(keys) != 1 || keys[0] != "ann" {
			t.Fatalf("push as %s published %v", ct, keys)
		}
	}
}

// limitBody refuses a body above --http-max-body-bytes with 413, sized or
// chunked, and passes one at the limit.
func TestHTTPBodyLimit(t *testing.T) {
	t.Parallel()
	r, srv := httpRig(t)
	rejected := func() float64 {
		return promtest.ToFloat64(r.s.metrics.LimitRejections.WithLabelValues("http_max_body_bytes"))
	}
	atLimit := okPush + strings.Repeat(" ", 300-len(okPush))
	a := call(t, srv, "POST", "/v1/push", "application/json", allKey, strings.NewReader(atLimit))
	if a.status != 200 || rejected() != 0 {
		t.Fatalf("body of 300 bytes: %d %s", a.status, a.body)
	}
	if keys, _ := r.tasks(); len(keys) != 1 {
		t.Fatalf("body at the limit published %v", keys)
	}
	a = call(t, srv, "POST", "/v1/push", "application/json", allKey, strings.NewReader(atLimit+" "))
	a.wantError(t, "sized body", 413, 8, "RESOURCE_EXHAUSTED", "request body is 301 bytes, at most 300 (--http-max-body-bytes)")
	if !a.close || rejected() != 1 {
		t.Fatalf("sized body: connection kept open (%v), %v rejections", !a.close, rejected())
	}
	// A reader of unknown length is sent chunked.
	a = call(t, srv, "POST", "/v1/push", "application/json", allKey, io.MultiReader(strings.NewReader(atLimit+" ")))
	a.wantError(t, "chunked body", 413, 8, "RESOURCE_EXHAUSTED", "request body exceeds 300 bytes (--http-max-body-bytes)")
	if rejected() != 2 {
		t.Fatalf("%v rejections, want 2", rejected())
	}
	r.noTasks("bodies above the limit")
}

// A body not received within --http-read-timeout is answered 408.
func TestHTTPReadTimeout(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.HTTP.ReadTimeout = 300 * time.Millisecond; c.APIKeys = apiKeys(t) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := r.s.httpHandler(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv := r.s.httpServer(h)
	if srv.ReadTimeout != 300*time.Millisecond || srv.ReadHeaderTimeout != r.s.cfg.HTTP.ReadHeaderTimeout ||
		srv.IdleTimeout != r.s.cfg.HTTP.IdleTimeout || srv.MaxHeaderBytes != r.s.cfg.HTTP.MaxHeaderBytes {
		t.Fatalf("server limits %v %v %v %v", srv.ReadTimeout, srv.ReadHeaderTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/push HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+allKey+
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"uids\":")
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e httpError
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 408 || e.Code != 4 ||
		e.Message != "request body not received within 300ms (--http-read-timeout)" {
		t.Fatalf("slow body: %d %+v %v, want 408 naming --http-read-timeout", resp.StatusCode, e, err)
	}
	r.noTasks("slow body")
}
