package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/client"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const (
	optAck     = uint32(msgpb.Option_NEED_ACK)
	optOffline = uint32(msgpb.Option_NEED_OFFLINE)
)

func TestPushReachesEveryPlatformWithSeq(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, redisOpt)
		ios := e.connect("alice", "ios", true)
		web := e.connect("alice", "web", true)

		seq := e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, MsgOptions: optAck}, "hello")
		for _, d := range []*device{ios, web} {
			got := d.waitCount(t, 1)
			if len(got) != 1 || got[0].GetSeq() != seq || bodyText(t, got[0]) != "hello" || got[0].GetOptions() != optAck {
				t.Fatalf("%s got %v, want one message seq %d 'hello' with NEED_ACK", d.Platform, got, seq)
			}
		}
	})
}

// A NEED_ACK message counts as delivered only after the client's ACK: a
// device that never ACKs is kicked out after ack_wait and the message is
// stored offline for its platform, while the ACKing platform stores nothing.
func TestNeedAckCountsOnlyAfterAck(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, withAckWait(700*time.Millisecond), redisOpt)
		silent := e.connect("alice", "ios", false)
		acker := e.connect("alice", "web", true)

		seq := e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, MsgOptions: optAck | optOffline}, "ack me")
		acker.waitCount(t, 1)
		silent.waitCount(t, 1)
		testutil.WaitFor(t, 10*time.Second, func() error {
			silent.mu.Lock()
			defer silent.mu.Unlock()
			if silent.kickout == nil {
				return fmt.Errorf("silent device not kicked out yet")
			}
			return nil
		})
		if r := silent.kickout.GetReason(); r != msgpb.KickoutReason_ACK_TIMEOUT {
			t.Fatalf("kickout reason %v, want ACK_TIMEOUT", r)
		}
		ctx := context.Background()
		testutil.WaitFor(t, 10*time.Second, func() error {
			members, err := e.rdb.ZRange(ctx, e.keys.Offline("alice", "ios"), 0, -1).Result()
			if err != nil || !slices.Equal(members, []string{fmt.Sprint(seq)}) {
				return fmt.Errorf("ios offline set = %v, %v; want [%d]", members, err, seq)
			}
			return nil
		})
		if n := e.rdb.Exists(ctx, e.keys.Offline("alice", "web")).Val(); n != 0 {
			t.Fatalf("web ACKed, yet its offline set exists")
		}
	})
}

// nextTexts waits for n more messages after skip and returns their texts.
func nextTexts(t *testing.T, d *device, skip, n int) []string {
	t.Helper()
	got := d.waitCount(t, skip+n)
	var out []string
	for _, m := range got[skip:] {
		out = append(out, bodyText(t, m))
	}
	return out
}

func TestPlatformSelection(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, queueOpt)
		devs := map[string]*device{
			"ios":     e.connect("alice", "ios", true),
			"android": e.connect("alice", "android", true),
			"web":     e.connect("alice", "web", true),
		}
		e.connect("bob", "ios", true)

		e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}}}, "only-ios")
		e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, PlatformConfig: &pushpb.PlatformConfig{WithoutPlatforms: []string{"ios"}}}, "not-ios")
		e.pushText(&pushpb.PushRequest{Uids: []string{"alice", "bob"},
			PlatformConfig:          &pushpb.PlatformConfig{Platforms: []string{"ios"}},
			ExclusivePlatformConfig: map[string]*pushpb.PlatformConfig{"alice": {Platforms: []string{"web"}}}}, "override-web")
		// A marker to every platform: messages of one user arrive in push order,
		// so whatever a device got before the marker is all it will get.
		e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}}, "marker")

		want := map[string][]string{
			"ios":     {"only-ios", "marker"},
			"android": {"not-ios", "marker"},
			"web":     {"not-ios", "override-web", "marker"},
		}
		for pl, d := range devs {
			testutil.WaitFor(t, 20*time.Second, func() error {
				got := d.received()
				if len(got) == 0 || bodyText(t, got[len(got)-1]) != "marker" {
					return fmt.Errorf("%s has not got the marker yet", pl)
				}
				return nil
			})
			if got := nextTexts(t, d, 0, len(want[pl])); !slices.Equal(got, want[pl]) {
				t.Errorf("%s received %v, want %v", pl, got, want[pl])
			}
		}
	})
}

func TestSecondSessionKicksFirst(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, redisOpt)
		first := e.connect("alice", "ios", true)
		other := e.connect("alice", "web", true)
		second := e.connect("alice", "ios", true)

		testutil.WaitFor(t, 10*time.Second, func() error {
			first.mu.Lock()
			defer first.mu.Unlock()
			if !first.ended {
				return fmt.Errorf("first ios stream has not ended")
			}
			return nil
		})
		first.mu.Lock()
		kick, after := first.kickout, first.afterEnd
		first.mu.Unlock()
		if kick.GetReason() != msgpb.KickoutReason_NEW_SESSION {
			t.Fatalf("first session's kickout = %v, want reason NEW_SESSION before the stream ended", kick)
		}
		if len(after) != 0 {
			t.Fatalf("payloads after the kickout notice: %v", after)
		}
		testutil.WaitFor(t, 10*time.Second, func() error {
			m, err := e.rdb.HGetAll(context.Background(), e.keys.Sessions("alice")).Result()
			if err != nil {
				return err
			}
			want := map[string]string{second.Sid: "ios-boat-1", other.Sid: "web-boat-1"}
			if len(m) != 2 || m[second.Sid] != want[second.Sid] || m[other.Sid] != want[other.Sid] {
				return fmt.Errorf("session hash = %v, want %v", m, want)
			}
			return nil
		})
		// The web session was not touched.
		other.mu.Lock()
		defer other.mu.Unlock()
		if other.kickout != nil || other.ended {
			t.Fatalf("web session was kicked: %v", other.kickout)
		}
	})
}

func TestThousandMessagesInOrder(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, redisOpt)
		d := e.connect("alice", "ios", true)
		const n = 1000
		seqs := make([]int64, n)
		for i := range n {
			seqs[i] = e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, MsgOptions: optAck}, fmt.Sprint(i))
		}
		got := d.waitCount(t, n)
		if len(got) != n {
			t.Fatalf("got %d messages, want %d", len(got), n)
		}
		for i, m := range got {
			if m.GetSeq() != seqs[i] || bodyText(t, m) != fmt.Sprint(i) {
				t.Fatalf("message %d is seq %d %q, want seq %d %q", i, m.GetSeq(), bodyText(t, m), seqs[i], fmt.Sprint(i))
			}
		}
	})
}

func TestDisconnectAndDirtySessions(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, redisOpt)
		ctx := context.Background()
		d := e.connect("alice", "ios", true)
		if v := e.rdb.HGet(ctx, e.keys.Sessions("alice"), d.Sid).Val(); v != "ios-boat-1" {
			t.Fatalf("session value %q, want ios-boat-1", v)
		}
		d.Close()
		testutil.WaitFor(t, 10*time.Second, func() error {
			if n := e.rdb.HLen(ctx, e.keys.Sessions("alice")).Val(); n != 0 {
				return fmt.Errorf("%d sessions left after disconnect", n)
			}
			return nil
		})

		// A session whose boat is gone from etcd is removed on the next push.
		live := e.connect("bob", "web", true)
		e.rdb.HSet(ctx, e.keys.Sessions("bob"), "1", "ios-ghost-boat")
		e.pushText(&pushpb.PushRequest{Uids: []string{"bob"}}, "hi")
		live.waitCount(t, 1)
		testutil.WaitFor(t, 10*time.Second, func() error {
			if e.rdb.HExists(ctx, e.keys.Sessions("bob"), "1").Val() {
				return fmt.Errorf("dirty session still recorded")
			}
			return nil
		})
		if !e.rdb.HExists(ctx, e.keys.Sessions("bob"), live.Sid).Val() {
			t.Fatal("the live session was removed too")
		}
	})
}

func TestPushRejectsBadInput(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, queueOpt)
		big := &anypb.Any{TypeUrl: "type.googleapis.com/google.protobuf.BytesValue", Value: make([]byte, 70<<10)}
		manyUIDs := make([]string, 10001)
		for i := range manyUIDs {
			manyUIDs[i] = fmt.Sprint("u", i)
		}
		body := []*anypb.Any{text("x")}
		cases := []struct {
			name  string
			req   *pushpb.PushRequest
			field string
		}{
			{"no uids", &pushpb.PushRequest{MsgBodies: body}, "uids"},
			{"too many uids", &pushpb.PushRequest{Uids: manyUIDs, MsgBodies: body}, "uids"},
			{"uid with slash", &pushpb.PushRequest{Uids: []string{"a/b"}, MsgBodies: body}, "uid"},
			{"no bodies", &pushpb.PushRequest{Uids: []string{"alice"}}, "msg_bodies"},
			{"empty body", &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: []*anypb.Any{{}}}, "msg_bodies[0]"},
			{"empty value", &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: []*anypb.Any{{TypeUrl: "t/x"}}}, "msg_bodies[0]"},
			{"oversized body", &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: []*anypb.Any{big}}, "msg_bodies[0]"},
			{"unknown option bit", &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: body, MsgOptions: 16}, "msg_options"},
			{"unknown option bit per uid", &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: body,
				ExclusiveMsgOptions: map[string]uint32{"alice": 1 | 16}}, "exclusive_msg_options[alice]"},
			{"unknown platform", &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: body,
				PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"pager"}}}, "platform_config"},
			{"no platform left", &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: body,
				PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}, WithoutPlatforms: []string{"ios"}}}, "platform_config"},
			{"override for absent uid", &pushpb.PushRequest{Uids: []string{"alice"}, MsgBodies: body,
				ExclusivePlatformConfig: map[string]*pushpb.PlatformConfig{"bob": {}}}, "exclusive_platform_config"},
		}
		before := e.topicRecords()
		for _, c := range cases {
			_, err := e.push.Push(context.Background(), c.req)
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.HasPrefix(st.Message(), c.field) {
				t.Errorf("%s: got %v %q, want InvalidArgument about %s", c.name, st.Code(), st.Message(), c.field)
			}
			if d := grpcerr.DetailCode(err); d != errorpb.Code_INVALID_REQUEST && d != errorpb.Code_UNKNOWN_PLATFORM {
				t.Errorf("%s: detail %v, want INVALID_REQUEST or UNKNOWN_PLATFORM", c.name, d)
			}
		}
		if after := e.topicRecords(); after != before {
			t.Fatalf("rejected pushes published %d records", after-before)
		}
	})
}

func TestStreamRejectsBadTokens(t *testing.T) {
	t.Parallel()
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wrong, _ := auth.Mint("not-the-secret", "mallory", "ios", time.Hour)
	expired, _ := auth.Mint(secret, "mallory", "ios", -time.Hour)
	unknownPlatform, _ := auth.Mint(secret, "mallory", "pager", time.Hour)
	noExp, _ := auth.Mint(secret, "mallory", "ios", 0) // never expires: refused (--jwt-require-exp)
	for name, tok := range map[string]string{"no token": "", "garbage": "xyz", "wrong key": wrong, "expired": expired, "no exp": noExp} {
		_, err := client.Connect(ctx, e.gomsg.Boat.ClientAddr(), tok)
		if status.Code(err) != codes.Unauthenticated || grpcerr.DetailCode(err) != errorpb.Code_INVALID_TOKEN {
			t.Errorf("%s: err = %v, want Unauthenticated with INVALID_TOKEN", name, err)
		}
	}
	if _, err := client.Connect(ctx, e.gomsg.Boat.ClientAddr(), unknownPlatform); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown platform: err = %v, want InvalidArgument", err)
	}
	keys, err := e.rdb.Keys(ctx, "msg/u:*").Result()
	if err != nil || len(keys) != 0 {
		t.Fatalf("rejected streams left keys %v (%v)", keys, err)
	}
	if n := e.gomsg.Boat.Sessions(); n != 0 {
		t.Fatalf("boat holds %d sessions after rejected streams", n)
	}
}

// The Push API is served as HTTP/JSON too.
func TestPushOverHTTP(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, queueOpt)
		d := e.connect("carol", "web", true)
		body := `{"uids":["carol"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"via http"}]}`
		resp, err := httpPost("http://"+e.gomsg.Station.PushHTTPAddr()+"/v1/push", body)
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ Seqs []string }
		if err := decodeJSON(resp, &out); err != nil || len(out.Seqs) != 1 {
			t.Fatalf("response %+v, %v", out, err)
		}
		got := d.waitCount(t, 1)
		if fmt.Sprint(got[0].GetSeq()) != out.Seqs[0] || bodyText(t, got[0]) != "via http" {
			t.Fatalf("got seq %d %q, want %s 'via http'", got[0].GetSeq(), bodyText(t, got[0]), out.Seqs[0])
		}
		bad, err := httpPost("http://"+e.gomsg.Station.PushHTTPAddr()+"/v1/push", `{"uids":[]}`)
		if err != nil {
			t.Fatal(err)
		}
		if bad.StatusCode != 400 {
			t.Fatalf("bad request over HTTP: status %d, want 400", bad.StatusCode)
		}
	})
}
