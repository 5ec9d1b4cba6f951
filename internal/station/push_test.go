package station

import (
	"context"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

func body(t testing.TB, s string) *anypb.Any {
	t.Helper()
	b, err := anypb.New(wrapperspb.String(s))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Every bad request is refused with InvalidArgument naming the field (or
// ResourceExhausted naming the flag) and nothing reaches Kafka.
func TestPushRefusesBadInputPublishingNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) {
		c.MaxUIDs, c.MaxBodies, c.MaxBodyBytes, c.MaxRequestBytes, c.MaxPushBytes = 3, 2, 200, 300, 400
	})
	hi := body(t, "hi")
	big := body(t, strings.Repeat("x", 200)) // > 200 bytes
	mid := body(t, strings.Repeat("x", 160)) // a 163-byte value: two pass 300, three uids × one pass 400
	cases := []struct {
		name  string
		req   *pushpb.PushRequest
		field string // InvalidArgument naming it; "--…": ResourceExhausted naming the flag
	}{
		{"no uids", &pushpb.PushRequest{MsgBodies: []*anypb.Any{hi}}, "uids"},
		{"too many uids", &pushpb.PushRequest{Uids: []string{"a", "b", "c", "d"}, MsgBodies: []*anypb.Any{hi}}, "uids"},
		{"empty uid", &pushpb.PushRequest{Uids: []string{"a", ""}, MsgBodies: []*anypb.Any{hi}}, "uid"},
		{"uid with slash", &pushpb.PushRequest{Uids: []string{"a/b"}, MsgBodies: []*anypb.Any{hi}}, "uid"},
		{"uid with space", &pushpb.PushRequest{Uids: []string{"a b"}, MsgBodies: []*anypb.Any{hi}}, "uid"},
		{"long uid", &pushpb.PushRequest{Uids: []string{strings.Repeat("u", 129)}, MsgBodies: []*anypb.Any{hi}}, "uid"},
		{"no bodies", &pushpb.PushRequest{Uids: []string{"a"}}, "msg_bodies"},
		{"too many bodies", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi, hi, hi}}, "msg_bodies"},
		{"empty body", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi, {}}}, "msg_bodies[1]"},
		{"body without value", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{{TypeUrl: "x"}}}, "msg_bodies[0]"},
		{"body too big", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{big}}, "msg_bodies[0]"},
		{"request too big", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{mid, mid}}, "msg_bodies"},
		{"unknown options", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi}, MsgOptions: 16}, "msg_options"},
		{"exclusive options of a stranger", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi},
			ExclusiveMsgOptions: map[string]uint32{"z": 1}}, "exclusive_msg_options"},
		{"bad exclusive options", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi},
			ExclusiveMsgOptions: map[string]uint32{"a": 16}}, "exclusive_msg_options[a]"},
		{"unknown platform", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi},
			PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"beos"}}}, "platform_config"},
		{"no platform left", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi},
			PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}, WithoutPlatforms: []string{"ios"}}}, "platform_config"},
		{"exclusive platforms of a stranger", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi},
			ExclusivePlatformConfig: map[string]*pushpb.PlatformConfig{"z": {}}}, "exclusive_platform_config"},
		{"bad exclusive platforms", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi},
			ExclusivePlatformConfig: map[string]*pushpb.PlatformConfig{"a": {Platforms: []string{"beos"}}}}, "exclusive_platform_config[a]"},
		{"bad idempotency key", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi}, IdempotencyKey: "a b"}, "idempotency_key"},
		{"long idempotency key", &pushpb.PushRequest{Uids: []string{"a"}, MsgBodies: []*anypb.Any{hi}, IdempotencyKey: strings.Repeat("k", 129)}, "idempotency_key"},
		{"push too big", &pushpb.PushRequest{Uids: []string{"a", "b", "c"}, MsgBodies: []*anypb.Any{mid}}, "--max-push-bytes"},
	}
	for _, c := range cases {
		seqs, err := r.s.Push(context.Background(), c.req)
		if seqs != nil {
			t.Fatalf("%s: seqs %v returned with %v", c.name, seqs, err)
		}
		if flag, ok := strings.CutPrefix(c.field, "--"); ok {
			st := status.Convert(grpcerr.Status(err))
			if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), flag) {
				t.Fatalf("%s: %v, want ResourceExhausted naming --%s", c.name, err, flag)
			}
		} else {
			invalid(t, err, c.field)
		}
		r.noTasks(c.name)
	}
}

// A good push queues one ToUid per distinct uid, keyed by it, holding every
// body stamped with the returned seqs, its options and its platforms.
func TestPushPublishesOneTaskPerUID(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	req := &pushpb.PushRequest{
		Uids:                    []string{"ann", "bob", "ann", "cy"},
		MsgBodies:               []*anypb.Any{body(t, "one"), body(t, "two")},
		MsgOptions:              uint32(msgpb.Option_NEED_ACK),
		ExclusiveMsgOptions:     map[string]uint32{"bob": uint32(msgpb.Option_NEED_OFFLINE)},
		PlatformConfig:          &pushpb.PlatformConfig{WithoutPlatforms: []string{"web"}},
		ExclusivePlatformConfig: map[string]*pushpb.PlatformConfig{"cy": {Platforms: []string{"web"}}},
	}
	seqs, err := r.s.Push(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 2 || seqs[0] >= seqs[1] {
		t.Fatalf("seqs %v, want two increasing", seqs)
	}
	keys, tasks := r.tasks()
	if !slices.Equal(keys, []string{"ann", "bob", "cy"}) {
		t.Fatalf("task keys %v, want ann, bob, cy (de-duplicated, in order)", keys)
	}
	wantOpts := map[string]uint32{"ann": uint32(msgpb.Option_NEED_ACK), "bob": uint32(msgpb.Option_NEED_OFFLINE), "cy": uint32(msgpb.Option_NEED_ACK)}
	wantPlatforms := map[string][]string{"ann": {"ios", "android", "desktop"}, "bob": {"ios", "android", "desktop"}, "cy": {"web"}}
	for i, p := range tasks {
		tu := p.GetToUid()
		if tu.GetUid() != keys[i] || p.GetSeq() == 0 {
			t.Fatalf("task %d: %v keyed %q", i, p, keys[i])
		}
		if !slices.Equal(tu.GetPlatforms(), wantPlatforms[keys[i]]) {
			t.Fatalf("%s: platforms %v, want %v", keys[i], tu.GetPlatforms(), wantPlatforms[keys[i]])
		}
		if len(tu.GetMsgs()) != 2 {
			t.Fatalf("%s: %d messages, want 2", keys[i], len(tu.GetMsgs()))
		}
		for j, m := range tu.GetMsgs() {
			if m.GetSeq() != seqs[j] || m.GetOptions() != wantOpts[keys[i]] || !proto.Equal(m.GetBody(), req.MsgBodies[j]) {
				t.Fatalf("%s message %d: %v, want seq %d options %d body %v", keys[i], j, m, seqs[j], wantOpts[keys[i]], req.MsgBodies[j])
			}
		}
	}
}
