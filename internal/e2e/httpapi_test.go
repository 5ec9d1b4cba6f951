package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// httpErrorBody is the JSON station answers errors with.
type httpErrorBody struct {
	Code    int               `json:"code"`
	Status  string            `json:"status"`
	Message string            `json:"message"`
	Details []json.RawMessage `json:"details"`
}

func httpDo(t *testing.T, method, url, contentType, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// wantHTTPError checks an error answer: its HTTP status, JSON content type
// and body with the gRPC code (number and name) and a message containing
// every one of want.
func wantHTTPError(t *testing.T, what string, resp *http.Response, body []byte, httpStatus, code int, codeName string, want ...string) {
	t.Helper()
	if resp.StatusCode != httpStatus {
		t.Errorf("%s: HTTP %d, want %d; body %s", what, resp.StatusCode, httpStatus, body)
		return
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
	var e httpErrorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("%s: body %q is not JSON: %v", what, body, err)
		return
	}
	if e.Code != code || e.Status != codeName {
		t.Errorf("%s: code %d %q, want %d %q; body %s", what, e.Code, e.Status, code, codeName, body)
	}
	for _, w := range want {
		if !strings.Contains(e.Message, w) {
			t.Errorf("%s: message %q does not contain %q", what, e.Message, w)
		}
	}
}

// TestHTTPConventions: the HTTP/JSON Push API answers a wrong method with
// 405 and Allow, a body that is not JSON with 415, an unknown field with 400
// naming it; a refused request pushes nothing.
func TestHTTPConventions(t *testing.T) {
	t.Parallel()
	e := start(t)
	base := "http://" + e.gomsg.Station.PushHTTPAddr()
	d := e.connect("erin", "web", true)
	const bad = `{"uids":["erin"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"refused"}]}`

	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		resp, body := httpDo(t, method, base+"/v1/push", "application/json", bad)
		wantHTTPError(t, method+" /v1/push", resp, body, http.StatusMethodNotAllowed, 12, "UNIMPLEMENTED", method, "/v1/push")
		if allow := resp.Header.Get("Allow"); allow != "POST" {
			t.Errorf("%s /v1/push: Allow %q, want POST", method, allow)
		}
	}
	resp, body := httpDo(t, http.MethodPost, base+"/openapi.json", "application/json", "{}")
	wantHTTPError(t, "POST /openapi.json", resp, body, http.StatusMethodNotAllowed, 12, "UNIMPLEMENTED")
	if allow := resp.Header.Get("Allow"); allow != "GET, HEAD" {
		t.Errorf("POST /openapi.json: Allow %q, want \"GET, HEAD\"", allow)
	}

	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/jsonx", "multipart/form-data; boundary=x", ";;"} {
		resp, body := httpDo(t, http.MethodPost, base+"/v1/push", ct, bad)
		wantHTTPError(t, "POST /v1/push with Content-Type "+ct, resp, body, http.StatusUnsupportedMediaType, 3, "INVALID_ARGUMENT",
			"is not JSON", "application/json")
	}

	for _, c := range []struct{ body, field string }{
		{`{"uids":["erin"],"msgOption":2,"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"refused"}]}`, `"msgOption"`},
		{`{"uids":["erin"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"refused"}],"platformConfig":{"platfroms":["web"]}}`, `"platfroms"`},
	} {
		resp, body := httpDo(t, http.MethodPost, base+"/v1/push", "application/json", c.body)
		wantHTTPError(t, "unknown field "+c.field, resp, body, http.StatusBadRequest, 3, "INVALID_ARGUMENT", "unknown field "+c.field)
	}

	// A domain error carries its errorpb detail naming the field.
	resp, body = httpDo(t, http.MethodPost, base+"/v1/push", "application/json", `{"uids":[]}`)
	wantHTTPError(t, "no uids", resp, body, http.StatusBadRequest, 3, "INVALID_ARGUMENT", "uids")
	if !strings.Contains(string(body), `"@type":"type.googleapis.com/gomsg.error.Error"`) || !strings.Contains(string(body), `"field":"uids"`) {
		t.Errorf("no uids: body %s lacks the errorpb detail naming uids", body)
	}

	resp, body = httpDo(t, http.MethodPost, base+"/v1/nope", "application/json", "{}")
	wantHTTPError(t, "POST /v1/nope", resp, body, http.StatusNotFound, 5, "NOT_FOUND", "/v1/nope")

	// JSON with parameters and the proto field names are fine; the first
	// message erin gets is this one, so none of the refused ones was pushed.
	resp, body = httpDo(t, http.MethodPost, base+"/v1/push", "application/json; charset=utf-8",
		`{"uids":["erin"],"msg_bodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"accepted"}]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("good push: HTTP %d %s", resp.StatusCode, body)
	}
	got := d.waitCount(t, 1)
	if text := bodyText(t, got[0]); text != "accepted" {
		t.Fatalf("erin's first message is %q, want \"accepted\": a refused request was pushed", text)
	}
}

// TestOpenAPIServed: station serves the OpenAPI document of the HTTP/JSON
// API; every path in it takes POST and answers GET with 405.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := start(t, withServices("station"))
	base := "http://" + e.gomsg.Station.PushHTTPAddr()
	resp, body := httpDo(t, http.MethodGet, base+"/openapi.json", "", "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: HTTP %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var spec struct {
		Swagger string                                `json:"swagger"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(body, &spec); err != nil {
		t.Fatalf("/openapi.json is not JSON: %v", err)
	}
	if spec.Swagger != "2.0" {
		t.Errorf("swagger %q, want 2.0", spec.Swagger)
	}
	var paths []string
	for p, ops := range spec.Paths {
		paths = append(paths, p)
		if _, ok := ops["post"]; !ok || len(ops) != 1 {
			t.Errorf("%s: operations %v, want post only", p, ops)
		}
		resp, body := httpDo(t, http.MethodGet, base+p, "", "")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
			t.Errorf("GET %s: HTTP %d Allow %q, want 405 Allow POST; %s", p, resp.StatusCode, resp.Header.Get("Allow"), body)
		}
	}
	slices.Sort(paths)
	want := []string{"/v1/broadcast/all", "/v1/broadcast/room", "/v1/delivery", "/v1/devices/list", "/v1/devices/register",
		"/v1/devices/unregister", "/v1/dlq/list", "/v1/dlq/purge", "/v1/dlq/redrive", "/v1/dlq/show", "/v1/kickout", "/v1/online",
		"/v1/push", "/v1/rooms/online"}
	if !slices.Equal(paths, want) {
		t.Errorf("paths %v, want %v", paths, want)
	}
}
