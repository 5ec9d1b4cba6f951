package station

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/room"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

const (
	broadcastKey = "gmk_test_broadcast_only"
	onlineKey    = "gmk_test_online_only"
	hiJSON       = `{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"hi"}`
)

// scopedKeys are keys of every scope, and one each of push, broadcast and
// online.
func scopedKeys(t testing.TB) *apikey.Store {
	t.Helper()
	lines := []string{
		apikey.Line(allKey, []apikey.Scope{apikey.All}, "all"),
		apikey.Line(pushKey, []apikey.Scope{apikey.Push}, "push"),
		apikey.Line(broadcastKey, []apikey.Scope{apikey.Broadcast}, "broadcast"),
		apikey.Line(onlineKey, []apikey.Scope{apikey.Online}, "online"),
	}
	keys, err := apikey.NewStore(apikey.Config{Keys: strings.Join(lines, "\n")}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// The broadcast methods work over HTTP/JSON: the routes of push_http.yaml,
// JSON bodies in and out, refusals in the API's error shape, with nothing
// published for a refused call; a key needs the broadcast scope for the
// broadcasts and the online scope for RoomOnline.
func TestBroadcastHTTP(t *testing.T) {
	t.Parallel()
	dir, register := newBoatRegistry(t)
	addr, _ := startRoomBoat(t, &roomBoat{members: map[string]int64{"lobby": 4}})
	register("boat-1", addr)
	r, srv := httpRig(t, func(c *Config) { c.APIKeys = scopedKeys(t); c.Boats = dir })
	const jsonCT = "application/json"
	post := func(path, key, body string) answer {
		t.Helper()
		return call(t, srv, "POST", path, jsonCT, key, strings.NewReader(body))
	}
	seqsOf := func(what string, a answer, n int) []int64 {
		t.Helper()
		var resp pushpb.BroadcastResponse
		if a.status != 200 || protojson.Unmarshal(a.body, &resp) != nil || len(resp.GetSeqs()) != n {
			t.Fatalf("%s: %d %s, want 200 with %d seqs", what, a.status, a.body, n)
		}
		return resp.GetSeqs()
	}

	roomBody := `{"rooms":["lobby","b"],"msgBodies":[` + hiJSON + `]}`
	allBody := `{"platformConfig":{"platforms":["ios"]},"msgBodies":[` + hiJSON + `]}`
	for _, key := range []string{allKey, broadcastKey} {
		seqs := seqsOf("POST /v1/broadcast/room", post("/v1/broadcast/room", key, roomBody), 1)
		keys, recs := r.broadcasts()
		if !slices.Equal(keys, []string{"lobby", "b"}) || recs[0].GetBroadcast().GetMsgs()[0].GetSeq() != seqs[0] {
			t.Fatalf("POST /v1/broadcast/room published %q %v, want lobby and b with seq %d", keys, recs, seqs[0])
		}
		seqs = seqsOf("POST /v1/broadcast/all", post("/v1/broadcast/all", key, allBody), 1)
		keys, recs = r.broadcasts()
		if !slices.Equal(keys, []string{room.AllKey}) || !slices.Equal(recs[0].GetBroadcast().GetPlatforms(), []string{"ios"}) ||
			recs[0].GetBroadcast().GetMsgs()[0].GetSeq() != seqs[0] {
			t.Fatalf("POST /v1/broadcast/all published %q %v, want everyone on ios with seq %d", keys, recs, seqs[0])
		}
	}
	for _, key := range []string{allKey, onlineKey} {
		a := post("/v1/rooms/online", key, `{"room":"lobby"}`)
		var resp pushpb.RoomOnlineResponse
		if a.status != 200 || protojson.Unmarshal(a.body, &resp) != nil || roomOnlineString(&resp) != "lobby 4 [boat-1:4] unreachable []" {
			t.Fatalf("POST /v1/rooms/online: %d %s", a.status, a.body)
		}
	}

	post("/v1/broadcast/room", allKey, `{"rooms":["a","a"],"msgBodies":[`+hiJSON+`]}`).
		wantError(t, "duplicate room", 400, 3, "INVALID_ARGUMENT", `rooms[1]: "a" is rooms[0] again: name each room once`)
	post("/v1/broadcast/room", allKey, `{"rooms":["a"]}`).
		wantError(t, "no bodies", 400, 3, "INVALID_ARGUMENT", "msg_bodies: must hold at least one body")
	// protojson varies the spaces of its messages on purpose: match a part.
	if a := post("/v1/broadcast/room", allKey, `{"room":["a"],"msgBodies":[`+hiJSON+`]}`); a.status != 400 ||
		a.err.Status != "INVALID_ARGUMENT" || !strings.Contains(a.err.Message, `unknown field "room"`) {
		t.Fatalf("unknown field: %d %+v, want 400 naming the field", a.status, a.err)
	}
	post("/v1/broadcast/all", allKey, `{"platformConfig":{"platforms":["beos"]},"msgBodies":[`+hiJSON+`]}`).
		wantError(t, "unknown platform", 400, 3, "INVALID_ARGUMENT", `platform_config: unknown platform "beos"`)
	post("/v1/rooms/online", allKey, `{"room":"a b"}`).
		wantError(t, "bad room", 400, 3, "INVALID_ARGUMENT", `room: room name "a b": byte 1 is not printable ASCII (spaces are not allowed)`)

	for path, scope := range map[string]string{"/v1/broadcast/room": "broadcast", "/v1/broadcast/all": "broadcast", "/v1/rooms/online": "online"} {
		body := map[string]string{"/v1/broadcast/room": roomBody, "/v1/broadcast/all": allBody, "/v1/rooms/online": `{"room":"lobby"}`}[path]
		post(path, "", body).wantError(t, path+" without a key", 401, 16, "UNAUTHENTICATED", apikey.ErrMissing.Error())
		for _, key := range []string{pushKey, broadcastKey, onlineKey} {
			if key == broadcastKey && scope == "broadcast" || key == onlineKey && scope == "online" {
				continue
			}
			post(path, key, body).wantError(t, path+" with a key without the scope", 403, 7, "PERMISSION_DENIED",
				apikey.ErrScope.Error()+` "`+scope+`"`)
		}
	}

	// Over the rate: 429 with the LIMIT_EXCEEDED detail.
	r.s.broadcasts.SetBurst(0)
	a := post("/v1/broadcast/room", allKey, roomBody)
	if a.status != 429 || a.err.Status != "RESOURCE_EXHAUSTED" || !strings.HasPrefix(a.err.Message, "--broadcast-rate: ") ||
		len(a.err.Details) != 1 || !strings.Contains(string(a.err.Details[0]), "LIMIT_EXCEEDED") {
		t.Fatalf("broadcast over the rate: %d %+v", a.status, a.err)
	}
	r.noBroadcasts("refused HTTP calls")
}

// Over gRPC, the broadcasts need a key with the broadcast scope and
// RoomOnline one with the online scope: no key is Unauthenticated, a key
// without the scope PermissionDenied, and nothing is published for either.
func TestBroadcastGRPCScopes(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.APIKeys = scopedKeys(t) })
	dir, _ := newBoatRegistry(t)
	r.s.cfg.Boats = dir
	srv := grpc.NewServer(r.s.pushAuth())
	pushpb.RegisterPushServer(srv, &pushServer{s: r.s})
	client := pushpb.NewPushClient(testutil.ServeGRPC(t, srv))
	bodies := []*anypb.Any{body(t, "hi")}
	calls := map[string]struct {
		scope apikey.Scope
		call  func(context.Context) error
	}{
		"BroadcastRoom": {apikey.Broadcast, func(ctx context.Context) error {
			_, err := client.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: []string{"lobby"}, MsgBodies: bodies})
			return err
		}},
		"BroadcastAll": {apikey.Broadcast, func(ctx context.Context) error {
			_, err := client.BroadcastAll(ctx, &pushpb.BroadcastAllRequest{MsgBodies: bodies})
			return err
		}},
		"RoomOnline": {apikey.Online, func(ctx context.Context) error {
			_, err := client.RoomOnline(ctx, &pushpb.RoomOnlineRequest{Room: "lobby"})
			return err
		}},
	}
	keyOf := map[apikey.Scope]string{apikey.All: allKey, apikey.Push: pushKey, apikey.Broadcast: broadcastKey, apikey.Online: onlineKey}
	for name, c := range calls {
		for scope, key := range keyOf {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := c.call(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key))
			cancel()
			allowed := scope == apikey.All || scope == c.scope
			if allowed && err != nil || !allowed && status.Code(err) != codes.PermissionDenied {
				t.Fatalf("%s with a %q key: %v (allowed: %v)", name, scope, err, allowed)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := c.call(ctx)
		cancel()
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s without a key: %v, want Unauthenticated", name, err)
		}
	}
	// Only the two calls with the all and broadcast keys each published.
	keys, _ := r.broadcasts()
	slices.Sort(keys)
	if want := []string{room.AllKey, room.AllKey, "lobby", "lobby"}; !slices.Equal(keys, want) {
		t.Fatalf("published %q, want %q", keys, want)
	}
}

// Connect answers the rooms of the session's token; a token whose rooms
// claim is bad is refused as an invalid token and records no session.
func TestConnectReturnsRooms(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	is := &internalServer{s: r.s}
	ctx := context.Background()
	tok, err := auth.Mint(testSecret, "ann", "ios", time.Hour, "lobby", "match-*")
	if err != nil {
		t.Fatal(err)
	}
	cr, err := is.Connect(ctx, &stationpb.ConnectRequest{Token: tok, BoatId: testBoat, Sid: "1"})
	if err != nil || cr.GetUid() != "ann" || !slices.Equal(cr.GetRooms(), []string{"lobby", "match-*"}) {
		t.Fatalf("Connect = %v, %v; want ann with rooms lobby, match-*", cr, err)
	}
	cr, err = is.Connect(ctx, &stationpb.ConnectRequest{Token: r.token("bob", "ios"), BoatId: testBoat, Sid: "2"})
	if err != nil || cr.GetUid() != "bob" || len(cr.GetRooms()) != 0 {
		t.Fatalf("Connect without rooms = %v, %v", cr, err)
	}
	bad, _ := auth.Mint(testSecret, "cy", "ios", time.Hour, "lobby", "a b")
	_, err = is.Connect(ctx, &stationpb.ConnectRequest{Token: bad, BoatId: testBoat, Sid: "3"})
	if status.Code(err) != codes.Unauthenticated || grpcerr.DetailCode(err) != errorpb.Code_INVALID_TOKEN ||
		!strings.Contains(status.Convert(err).Message(), "rooms claim") {
		t.Fatalf("Connect with a bad rooms claim: %v, want Unauthenticated INVALID_TOKEN naming the rooms claim", err)
	}
	if got := r.recorded("cy"); len(got) != 0 {
		t.Fatalf("sessions %v recorded for a refused token", got)
	}
}
