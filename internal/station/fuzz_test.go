package station

import (
	"strings"
	"testing"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/room"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// FuzzValidatePush decodes arbitrary bytes as a PushRequest and validates it:
// a refusal is InvalidArgument with a message; an acceptance respects every
// limit, with valid, unique uids.
func FuzzValidatePush(f *testing.F) {
	body, _ := anypb.New(wrapperspb.String("hi"))
	for _, r := range []*pushpb.PushRequest{
		{Uids: []string{"alice", "bob", "alice"}, MsgBodies: []*anypb.Any{body}, MsgOptions: 3},
		{Uids: []string{"a/b"}, MsgBodies: []*anypb.Any{body}},
		{Uids: []string{"x"}, MsgBodies: []*anypb.Any{body}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}}},
		{Uids: []string{"x"}, MsgBodies: []*anypb.Any{body}, ExclusiveMsgOptions: map[string]uint32{"y": 1}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s := &Station{cfg: Config{MaxUIDs: 5, MaxBodies: 3, MaxBodyBytes: 64, MaxRequestBytes: 128}}
	s.cfg.Defaults()
	f.Fuzz(func(t *testing.T, raw []byte) {
		var req pushpb.PushRequest
		if proto.Unmarshal(raw, &req) != nil {
			return
		}
		uids, err := s.validatePush(&req)
		if err != nil {
			st := status.Convert(grpcerr.Status(err))
			if st.Code() != codes.InvalidArgument || st.Message() == "" {
				t.Fatalf("refusal is %v %q, want InvalidArgument with a message", st.Code(), st.Message())
			}
			return
		}
		if len(uids) == 0 || len(req.GetUids()) > s.cfg.MaxUIDs || len(req.GetMsgBodies()) > s.cfg.MaxBodies {
			t.Fatalf("accepted %d uids (%d given), %d bodies", len(uids), len(req.GetUids()), len(req.GetMsgBodies()))
		}
		total := 0
		for _, b := range req.GetMsgBodies() {
			total += proto.Size(b)
			if proto.Size(b) > s.cfg.MaxBodyBytes || b.GetTypeUrl() == "" || len(b.GetValue()) == 0 {
				t.Fatalf("accepted body %v", b)
			}
		}
		if total > s.cfg.MaxRequestBytes {
			t.Fatalf("accepted %d body bytes", total)
		}
		seen := map[string]bool{}
		for _, u := range uids {
			if seen[u] || u == "" || len(u) > 128 || strings.ContainsRune(u, '/') ||
				strings.IndexFunc(u, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0 {
				t.Fatalf("accepted uid %q (seen before: %v)", u, seen[u])
			}
			seen[u] = true
		}
		for u := range req.GetExclusiveMsgOptions() {
			if !seen[u] {
				t.Fatalf("accepted an option for uid %q outside uids", u)
			}
		}
	})
}

// FuzzHTTPDecode decodes arbitrary bytes as an HTTP/JSON push body with the
// gateway's codec and validates the result: nothing panics, an unknown field
// is refused, and an accepted body survives a round trip unchanged.
func FuzzHTTPDecode(f *testing.F) {
	f.Add([]byte(`{"uids":["alice"],"msgOptions":3,"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"hi"}]}`))
	f.Add([]byte(`{"uids":["a"],"msgOption":2}`))
	f.Add([]byte(`{"uids":["a"],"msg_bodies":[{"@type":"type.googleapis.com/google.protobuf.BytesValue","value":"aGk="}],"exclusiveMsgOptions":{"a":1}}`))
	f.Add([]byte(`{"uids":"x"}`))
	codec := jsonCodec()
	if err := codec.Unmarshal([]byte(`{"uids":["a"],"msgOption":2}`), &pushpb.PushRequest{}); err == nil {
		f.Fatal(`the typo "msgOption" decoded; unknown fields must be refused`)
	}
	s := &Station{cfg: Config{MaxUIDs: 5, MaxBodies: 3, MaxBodyBytes: 256, MaxRequestBytes: 512}}
	s.cfg.Defaults()
	f.Fuzz(func(t *testing.T, body []byte) {
		var req pushpb.PushRequest
		if err := codec.Unmarshal(body, &req); err != nil {
			return
		}
		if _, err := s.validatePush(&req); err != nil {
			if status.Code(grpcerr.Status(err)) != codes.InvalidArgument {
				t.Fatalf("refusal %v is not InvalidArgument", err)
			}
			return
		}
		again, err := codec.Marshal(&req)
		if err != nil {
			t.Fatalf("accepted body does not encode: %v", err)
		}
		var back pushpb.PushRequest
		if err := codec.Unmarshal(again, &back); err != nil || !proto.Equal(&req, &back) {
			t.Fatalf("round trip of %s: %v, equal %v", again, err, proto.Equal(&req, &back))
		}
	})
}

// FuzzValidateBroadcastRoom decodes arbitrary bytes as a BroadcastRoomRequest
// and validates it: a refusal is InvalidArgument with a message (or
// ResourceExhausted naming --max-push-bytes); an acceptance respects every
// limit, with valid, distinct rooms.
func FuzzValidateBroadcastRoom(f *testing.F) {
	body, _ := anypb.New(wrapperspb.String("hi"))
	for _, r := range []*pushpb.BroadcastRoomRequest{
		{Rooms: []string{"lobby", "match-1"}, MsgBodies: []*anypb.Any{body}},
		{Rooms: []string{"a", "b", "a"}, MsgBodies: []*anypb.Any{body}},
		{Rooms: []string{"a b"}, MsgBodies: []*anypb.Any{body}},
		{Rooms: []string{"match-*"}, MsgBodies: []*anypb.Any{body}},
		{Rooms: []string{""}, MsgBodies: []*anypb.Any{body}},
		{Rooms: []string{"caf\u00e9", "x\x00"}, MsgBodies: []*anypb.Any{body, body}},
		{Rooms: []string{strings.Repeat("r", 129)}, MsgBodies: []*anypb.Any{body}},
		{Rooms: []string{"a", "b", "c", "d", "e", "f"}, MsgBodies: []*anypb.Any{body}},
		{Rooms: []string{"a"}, MsgBodies: []*anypb.Any{{TypeUrl: "t"}}},
		{Rooms: []string{"a"}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	s := &Station{cfg: Config{MaxBroadcastRooms: 5, MaxBodies: 3, MaxBodyBytes: 64, MaxRequestBytes: 128, MaxPushBytes: 256}, metrics: metrics.New()}
	s.cfg.Defaults()
	f.Fuzz(func(t *testing.T, raw []byte) {
		var req pushpb.BroadcastRoomRequest
		if proto.Unmarshal(raw, &req) != nil {
			return
		}
		if err := s.validateBroadcastRoom(&req); err != nil {
			st := status.Convert(grpcerr.Status(err))
			if st.Code() == codes.ResourceExhausted && strings.HasPrefix(st.Message(), "--max-push-bytes: ") {
				return
			}
			if st.Code() != codes.InvalidArgument || st.Message() == "" {
				t.Fatalf("refusal is %v %q, want InvalidArgument with a message", st.Code(), st.Message())
			}
			return
		}
		rooms := req.GetRooms()
		if len(rooms) == 0 || len(rooms) > s.cfg.MaxBroadcastRooms || len(req.GetMsgBodies()) == 0 || len(req.GetMsgBodies()) > s.cfg.MaxBodies {
			t.Fatalf("accepted %d rooms, %d bodies", len(rooms), len(req.GetMsgBodies()))
		}
		total := 0
		for _, b := range req.GetMsgBodies() {
			total += proto.Size(b)
			if proto.Size(b) > s.cfg.MaxBodyBytes || b.GetTypeUrl() == "" || len(b.GetValue()) == 0 {
				t.Fatalf("accepted body %v", b)
			}
		}
		if total > s.cfg.MaxRequestBytes || total*len(rooms) > s.cfg.MaxPushBytes {
			t.Fatalf("accepted %d body bytes in %d rooms", total, len(rooms))
		}
		seen := map[string]bool{}
		for _, r := range rooms {
			if seen[r] || r == "" || len(r) > room.MaxName || strings.IndexFunc(r, func(c rune) bool { return c <= ' ' || c > '~' || c == '*' }) >= 0 {
				t.Fatalf("accepted room %q (seen before: %v)", r, seen[r])
			}
			seen[r] = true
		}
	})
}
