package station

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// The HTTP/JSON API takes one JSON object per request, 32-bit numbers as
// JSON numbers and strings in UTF-8; anything else is 400
// INVALID_ARGUMENT naming what is wrong, and nothing is published.
// 64-bit integers may come as strings, as the API itself writes them.
func TestHTTPStrictJSON(t *testing.T) {
	t.Parallel()
	r, srv := httpRig(t)
	const hi = `"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"hi"}]`
	cases := []struct{ name, body, msg string }{
		{"trailing object", okPush + ` {"uids":["eve"]}`, "unexpected data after the JSON object at byte"},
		{"trailing garbage", okPush + `x`, "unexpected data after the JSON object at byte"},
		{"quoted options", `{"uids":["ann"],"msgOptions":"1",` + hi + `}`, `msg_options: "1" is a string: send the number without quotes`},
		{"quoted map value", `{"uids":["ann"],"exclusiveMsgOptions":{"ann":"2"},` + hi + `}`, `exclusive_msg_options[ann]: "2" is a string`},
		{"quoted badge", `{"uids":["ann"],"notification":{"title":"t","badge":"3"},` + hi + `}`, `notification.badge: "3" is a string`},
		{"invalid UTF-8 uid", "{\"uids\":[\"ann\",\"a\xffb\"]," + hi + "}", "uids[1]: is not valid UTF-8"},
		{"invalid UTF-8 title", "{\"uids\":[\"ann\"],\"notification\":{\"title\":\"\xc3\"}," + hi + "}", "notification.title: is not valid UTF-8"},
	}
	for _, c := range cases {
		a := call(t, srv, "POST", "/v1/push", "application/json", allKey, strings.NewReader(c.body))
		if a.status != 400 || a.err.Status != "INVALID_ARGUMENT" || !strings.Contains(a.err.Message, c.msg) {
			t.Fatalf("%s: %d %+v; want 400 INVALID_ARGUMENT containing %q", c.name, a.status, a.err, c.msg)
		}
		r.noTasks(c.name)
	}
	// Trailing white space is fine, and so is a quoted int64.
	if a := call(t, srv, "POST", "/v1/push", "application/json", allKey, strings.NewReader(okPush+" \n\t")); a.status != 200 {
		t.Fatalf("trailing white space: %d %s", a.status, a.body)
	}
	r.tasks()
	if a := call(t, srv, "POST", "/v1/delivery", "application/json", allKey, strings.NewReader(`{"seq":"12","pageSize":5}`)); a.status == 400 {
		t.Fatalf("quoted int64 seq: %d %+v", a.status, a.err)
	}
}

// rawCodec sends pre-encoded bytes, as a client that does not check UTF-8
// would.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }

// Over gRPC a string that is not UTF-8 is InvalidArgument naming its field
// (the protobuf decoder alone would make it Internal), and nothing is
// published.
func TestGRPCInvalidUTF8(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.APIKeys = apiKeys(t) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.s.pushSrv.Serve(ln) }()
	t.Cleanup(r.s.pushSrv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+allKey)

	send := func(req proto.Message, from, to string) error {
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.Replace(b, []byte(from), []byte(to), 1)
		var resp pushpb.PushResponse
		return conn.Invoke(ctx, "/gomsg.push.Push/Push", b, &resp, grpc.ForceCodec(rawCodec{}))
	}
	push := &pushpb.PushRequest{Uids: []string{"ann", "bXb"}, MsgBodies: []*anypb.Any{body(t, "hi")},
		Notification: &pushpb.Notification{Title: "tYt"}}
	for _, c := range []struct{ from, to, field string }{
		{"bXb", "b\xffb", "uids[1]"},
		{"tYt", "t\xc3t", "notification.title"},
	} {
		err := send(push, c.from, c.to)
		st := status.Convert(err)
		code, _, detail := grpcerr.Parts(err)
		if st.Code() != codes.InvalidArgument || code != codes.InvalidArgument || detail.GetField() != c.field {
			t.Fatalf("%s not UTF-8: %v (field %q); want InvalidArgument naming %s", c.field, err, detail.GetField(), c.field)
		}
		r.noTasks("push with invalid UTF-8")
	}
	if err := send(push, "", ""); err != nil {
		t.Fatalf("valid push: %v", err)
	}
	r.tasks()
}

// --max-body-bytes counts a body's bytes, not its protobuf wrapper: a body
// of exactly 64 KiB (the default) passes whatever its type URL, one byte
// more is refused, and --max-request-bytes sums the bodies the same way.
func TestBodyLimitCountsBodyBytes(t *testing.T) {
	t.Parallel()
	s := validator(t, nil)
	long := "type.googleapis.com/" + strings.Repeat("a.", 200) + "Payload"
	at := &anypb.Any{TypeUrl: long, Value: bytes.Repeat([]byte("v"), 64<<10)}
	if _, err := s.validatePush(&pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{at}}); err != nil {
		t.Fatalf("a body of exactly 64 KiB: %v", err)
	}
	over := &anypb.Any{TypeUrl: "t", Value: bytes.Repeat([]byte("v"), 64<<10+1)}
	_, err := s.validatePush(&pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{at, over}})
	refusedAs(t, "one byte over", err, codes.InvalidArgument, "msg_bodies[1]: is 65537 bytes, at most 65536")
	four := []*anypb.Any{at, at, at, at} // 256 KiB: the request limit exactly
	if _, err := s.validatePush(&pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: four}); err != nil {
		t.Fatalf("four bodies of 64 KiB: %v", err)
	}
	_, err = s.validatePush(&pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: append(four, sized(t, 1))})
	refusedAs(t, "one byte over the request", err, codes.InvalidArgument, "msg_bodies: 262145 bytes in all, at most 262144 per request")
	badURL := &anypb.Any{TypeUrl: strings.Repeat("u", 513), Value: []byte("v")}
	_, err = s.validatePush(&pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{badURL}})
	refusedAs(t, "long type URL", err, codes.InvalidArgument, "msg_bodies[0]: type_url is 513 bytes, at most 512")
}
