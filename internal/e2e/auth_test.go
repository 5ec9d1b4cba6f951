package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// onlineKey may only call Online.
const onlineKey = "e2e-online-only-key"

// withAPIKeys adds key lines to station's keys.
func withAPIKeys(lines ...string) option {
	return func(c *app.ClusterConfig) {
		c.Station.APIKeys += ";" + strings.Join(lines, ";")
	}
}

// rawPushConn is a connection to the Push API that sends no key.
func (e *env) rawPushConn() *grpc.ClientConn {
	e.t.Helper()
	return e.rawConn(e.gomsg.Station.PushAddr())
}

func (e *env) rawConn(addr string) *grpc.ClientConn {
	e.t.Helper()
	conn, err := grpcx.Dial(addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// writes is what a refused call must not change: Redis keys and Kafka
// records (tasks and broadcasts).
func (e *env) writes() (int64, int64) {
	e.t.Helper()
	n, err := e.rdb.DBSize(context.Background()).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n, e.topicRecords() + e.topicRecordsOf(broadcastTopic)
}

// Every Push API method refuses a call without a valid key
// (Unauthenticated) or whose key lacks the method's scope
// (PermissionDenied), over gRPC and HTTP/JSON, and nothing is written.
func TestPushAPIRequiresKeyWithScope(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, withAPIKeys(apikey.Line(onlineKey, []apikey.Scope{apikey.Online}, "online-only")))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		keysBefore, recsBefore := e.writes()

		body := text("forged")
		dev := &pushpb.Device{Uid: "victim", Platform: "ios", Token: "attacker-token"}
		calls := map[string]struct {
			scope apikey.Scope
			call  func(pushpb.PushClient) error
		}{
			"Push": {apikey.Push, func(c pushpb.PushClient) error {
				_, err := c.Push(ctx, &pushpb.PushRequest{Uids: []string{"victim"}, MsgBodies: []*anypb.Any{body}, MsgOptions: 2})
				return err
			}},
			"Kickout": {apikey.Kickout, func(c pushpb.PushClient) error {
				_, err := c.Kickout(ctx, &pushpb.KickoutRequest{Uid: "victim"})
				return err
			}},
			"Online": {apikey.Online, func(c pushpb.PushClient) error {
				_, err := c.Online(ctx, &pushpb.OnlineRequest{Uids: []string{"victim"}})
				return err
			}},
			"RegisterDevice": {apikey.Devices, func(c pushpb.PushClient) error {
				_, err := c.RegisterDevice(ctx, &pushpb.RegisterDeviceRequest{Device: dev})
				return err
			}},
			"UnregisterDevice": {apikey.Devices, func(c pushpb.PushClient) error {
				_, err := c.UnregisterDevice(ctx, &pushpb.UnregisterDeviceRequest{Device: dev})
				return err
			}},
			"ListDevices": {apikey.Devices, func(c pushpb.PushClient) error {
				_, err := c.ListDevices(ctx, &pushpb.ListDevicesRequest{Uid: "victim"})
				return err
			}},
			"BroadcastRoom": {apikey.Broadcast, func(c pushpb.PushClient) error {
				_, err := c.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: []string{"lobby"}, MsgBodies: []*anypb.Any{body}})
				return err
			}},
			"BroadcastAll": {apikey.Broadcast, func(c pushpb.PushClient) error {
				_, err := c.BroadcastAll(ctx, &pushpb.BroadcastAllRequest{MsgBodies: []*anypb.Any{body}})
				return err
			}},
			"RoomOnline": {apikey.Online, func(c pushpb.PushClient) error {
				_, err := c.RoomOnline(ctx, &pushpb.RoomOnlineRequest{Room: "lobby"})
				return err
			}},
			"GetDelivery": {apikey.Delivery, func(c pushpb.PushClient) error {
				_, err := c.GetDelivery(ctx, &pushpb.GetDeliveryRequest{Seq: 1})
				return err
			}},
			"ListDeadLetters": {apikey.DLQ, func(c pushpb.PushClient) error {
				_, err := c.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{})
				return err
			}},
			"GetDeadLetter": {apikey.DLQ, func(c pushpb.PushClient) error {
				_, err := c.GetDeadLetter(ctx, &pushpb.GetDeadLetterRequest{Seq: 1})
				return err
			}},
			"RedriveDeadLetters": {apikey.DLQ, func(c pushpb.PushClient) error {
				_, err := c.RedriveDeadLetters(ctx, &pushpb.RedriveDeadLettersRequest{All: true, DryRun: true})
				return err
			}},
			"PurgeDeadLetters": {apikey.DLQ, func(c pushpb.PushClient) error {
				_, err := c.PurgeDeadLetters(ctx, &pushpb.PurgeDeadLettersRequest{BeforeMs: 1, Confirm: true})
				return err
			}},
		}
		raw := e.rawPushConn()
		clients := map[string]pushpb.PushClient{
			"no key":         pushpb.NewPushClient(raw),
			"unknown key":    pushpb.NewPushClient(auth.WithBearer(raw, "guessed-key")),
			"dev key":        pushpb.NewPushClient(auth.WithBearer(raw, apikey.DevKey)),
			"not bearer":     pushpb.NewPushClient(&headerConn{raw, "Basic " + apiKey}),
			"hash as a key":  pushpb.NewPushClient(auth.WithBearer(raw, strings.Fields(apikey.Line(apiKey, []apikey.Scope{apikey.All}, ""))[0])),
			"online-only ok": pushpb.NewPushClient(auth.WithBearer(raw, onlineKey)),
		}
		for cname, c := range clients {
			for mname, m := range calls {
				err := m.call(c)
				want := codes.Unauthenticated
				if cname == "online-only ok" {
					want = codes.PermissionDenied
					if m.scope == apikey.Online {
						want = codes.OK
					}
				}
				if status.Code(err) != want {
					t.Errorf("%s with %s: %v, want %s", mname, cname, err, want)
				}
			}
		}

		// A keyless 2 MiB push is refused when its headers arrive, not decoded
		// (and not refused for its size).
		big := &pushpb.PushRequest{Uids: []string{"victim"}, MsgBodies: []*anypb.Any{text(strings.Repeat("x", 2<<20))}}
		if _, err := pushpb.NewPushClient(raw).Push(ctx, big); status.Code(err) != codes.Unauthenticated {
			t.Errorf("keyless 2 MiB push: %v, want Unauthenticated", err)
		}

		// HTTP/JSON: 401 with WWW-Authenticate: Bearer, 403 for a missing scope.
		base := "http://" + e.gomsg.Station.PushHTTPAddr()
		for _, tc := range []struct {
			path, authz string
			want        int
		}{
			{"/v1/push", "", http.StatusUnauthorized},
			{"/v1/push", "Bearer guessed-key", http.StatusUnauthorized},
			{"/v1/push", "Bearer " + apikey.DevKey, http.StatusUnauthorized},
			{"/v1/push", "Basic " + apiKey, http.StatusUnauthorized},
			{"/v1/kickout", "", http.StatusUnauthorized},
			{"/v1/devices/register", "", http.StatusUnauthorized},
			{"/v1/push", "Bearer " + onlineKey, http.StatusForbidden},
			{"/v1/kickout", "Bearer " + onlineKey, http.StatusForbidden},
			{"/v1/devices/register", "Bearer " + onlineKey, http.StatusForbidden},
			{"/v1/devices/list", "Bearer " + onlineKey, http.StatusForbidden},
			{"/v1/dlq/list", "", http.StatusUnauthorized},
			{"/v1/dlq/purge", "Bearer " + onlineKey, http.StatusForbidden},
			{"/v1/online", "Bearer " + onlineKey, http.StatusOK},
			{"/v1/delivery", "", http.StatusUnauthorized},
			{"/v1/delivery", "Bearer " + onlineKey, http.StatusForbidden},
		} {
			b := `{"uids":["victim"],"msgOptions":2,"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"forged"}]}`
			switch {
			case strings.HasPrefix(tc.path, "/v1/devices/list"):
				b = `{"uid":"victim"}`
			case strings.HasPrefix(tc.path, "/v1/devices"):
				b = `{"device":{"uid":"victim","platform":"ios","token":"attacker"}}`
			case tc.path == "/v1/online":
				b = `{"uids":["victim"]}`
			case tc.path == "/v1/kickout":
				b = `{"uid":"victim"}`
			case tc.path == "/v1/delivery":
				b = `{"seq":"1"}`
			}
			resp, err := httpPostAuth(base+tc.path, b, tc.authz)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("POST %s with %q: %d %s, want %d", tc.path, tc.authz, resp.StatusCode, out, tc.want)
			}
			if tc.want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("POST %s with %q: WWW-Authenticate %q, want Bearer", tc.path, tc.authz, resp.Header.Get("WWW-Authenticate"))
			}
		}

		if k, r := e.writes(); k != keysBefore || r != recsBefore {
			t.Fatalf("refused calls wrote: redis keys %d → %d, task records %d → %d", keysBefore, k, recsBefore, r)
		}

		// Health and server reflection stay open.
		stream, err := reflectionpb.NewServerReflectionClient(raw).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		if r, err := stream.Recv(); err != nil || len(r.GetListServicesResponse().GetService()) == 0 {
			t.Fatalf("reflection without a key: %v %v, want the service list", r, err)
		}
	})
}

// headerConn sends a raw authorization header.
type headerConn struct {
	*grpc.ClientConn
	value string
}

func (c *headerConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.ClientConn.Invoke(metadata.AppendToOutgoingContext(ctx, "authorization", c.value), method, args, reply, opts...)
}

// A key added to --api-keys-file works within a poll (2 s), a key removed
// stops working, and a file of comments only revokes every key.
func TestAPIKeyFileRotation(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "keys")
	oldKey, newKey := "rotation-old-key", "rotation-new-key"
	write := func(content string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write(apikey.Line(oldKey, []apikey.Scope{apikey.Online}, "old") + "\n")
	e := start(t, func(c *app.ClusterConfig) { c.Station.APIKeysFile = file })
	raw := e.rawPushConn()
	online := func(key string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := pushpb.NewPushClient(auth.WithBearer(raw, key)).Online(ctx, &pushpb.OnlineRequest{Uids: []string{"a"}})
		return err
	}
	waitCode := func(key string, want codes.Code) {
		t.Helper()
		testutil.WaitFor(t, 10*time.Second, func() error {
			if err := online(key); status.Code(err) != want {
				return testutil.Errorf("Online with %s: %v, want %s", key, err, want)
			}
			return nil
		})
	}
	waitCode(oldKey, codes.OK)
	if err := online(newKey); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("new key before it is added: %v", err)
	}
	write(apikey.Line(oldKey, []apikey.Scope{apikey.Online}, "old") + "\n" + apikey.Line(newKey, []apikey.Scope{apikey.Online}, "new") + "\n")
	waitCode(newKey, codes.OK)
	waitCode(oldKey, codes.OK) // both during the rotation
	write("# rotated\n" + apikey.Line(newKey, []apikey.Scope{apikey.Online}, "new") + "\n")
	waitCode(oldKey, codes.Unauthenticated)
	waitCode(newKey, codes.OK)
	// (A file that does not parse keeps the keys in force: internal/apikey's
	// TestStoreReload.) A file of comments only revokes every key.
	write("# every key revoked\n")
	waitCode(newKey, codes.Unauthenticated)
}

// The internal APIs refuse forged calls (no token, a wrong one) with
// Unauthenticated, before doing anything: ResetBoat removes no session, a
// forged PushMessages delivers nothing, a forged Kickout kicks nobody.
func TestInternalAPIsRefuseForgedCalls(t *testing.T) {
	t.Parallel()
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := e.connect("alice", "ios", true)
	if n := e.rdb.HLen(ctx, e.keys.Sessions("alice")).Val(); n != 1 {
		t.Fatalf("alice has %d sessions recorded, want 1", n)
	}
	stationConn := e.rawConn(e.gomsg.Station.InternalAddr())
	boatConn := e.rawConn(e.gomsg.Boat.InternalAddr())
	for name, token := range map[string]string{"no token": "", "wrong token": "not-the-internal-token"} {
		st := stationpb.NewStationClient(auth.WithBearer(stationConn, token))
		bt := boatpb.NewBoatClient(auth.WithBearer(boatConn, token))
		if _, err := st.ResetBoat(ctx, &stationpb.ResetBoatRequest{BoatId: "boat-1"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("ResetBoat, %s: %v, want Unauthenticated", name, err)
		}
		if _, err := st.Disconnect(ctx, &stationpb.DisconnectRequest{BoatId: "boat-1",
			Sessions: []*stationpb.SessionRef{{Uid: "alice", Sid: d.Sid}}}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Disconnect, %s: %v, want Unauthenticated", name, err)
		}
		if _, err := st.Connect(ctx, &stationpb.ConnectRequest{BoatId: "boat-1", Sid: "1"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Connect, %s: %v, want Unauthenticated", name, err)
		}
		forged, _ := anypb.New(wrapperspb.String("forged"))
		if _, err := bt.PushMessages(ctx, &boatpb.PushMessagesRequest{Sid: d.Sid, AckWait: durationpb.New(time.Second),
			Msgs: []*msgpb.Message{{Seq: 1, Body: forged}}}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("PushMessages, %s: %v, want Unauthenticated", name, err)
		}
		if _, err := bt.Kickout(ctx, &boatpb.KickoutRequest{Sid: d.Sid}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Kickout, %s: %v, want Unauthenticated", name, err)
		}
		if _, err := bt.Broadcast(ctx, &boatpb.BroadcastRequest{All: true,
			Msgs: []*msgpb.Message{{Seq: 2, Body: forged}}}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("Broadcast, %s: %v, want Unauthenticated", name, err)
		}
		if _, err := bt.RoomOnline(ctx, &boatpb.RoomOnlineRequest{Rooms: []string{"lobby"}}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("RoomOnline, %s: %v, want Unauthenticated", name, err)
		}
	}
	if n := e.rdb.HLen(ctx, e.keys.Sessions("alice")).Val(); n != 1 {
		t.Fatalf("after forged calls alice has %d sessions recorded, want 1", n)
	}
	// A real push arrives, and it is the only message the device got.
	seq := e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}}, "real")
	msgs := d.waitCount(t, 1)
	if len(msgs) != 1 || msgs[0].GetSeq() != seq {
		t.Fatalf("device got %v, want only seq %d", msgs, seq)
	}
	d.mu.Lock()
	kicked, broadcasts := d.kickout, d.roomMsgs
	d.mu.Unlock()
	if kicked != nil {
		t.Fatalf("device kicked by a forged call: %v", kicked)
	}
	if len(broadcasts) != 0 {
		t.Fatalf("device got forged broadcasts: %v", broadcasts)
	}
}
