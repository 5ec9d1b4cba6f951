package notification

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n     *pushpb.Notification
		field string // "" when valid
	}{
		{nil, ""},
		{&pushpb.Notification{Title: "t", Body: strings.Repeat("b", 3900)}, ""},
		{&pushpb.Notification{Body: strings.Repeat("b", 4100)}, "notification.body"},
		{&pushpb.Notification{Data: map[string]string{"k": strings.Repeat("v", 4095)}}, "notification.data"}, // APNs
		{&pushpb.Notification{Data: map[string]string{"k": strings.Repeat("v", 4096)}}, "notification.data"}, // FCM
		{&pushpb.Notification{Data: map[string]string{"aps": "x"}}, "notification.data"},
		{&pushpb.Notification{Badge: proto.Int32(-1)}, "notification.badge"},
		{&pushpb.Notification{TtlSeconds: MaxTTLSeconds + 1}, "notification.ttl_seconds"},
	} {
		err := Validate(tc.n)
		var fe *FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("Validate(%v) = %v, want nil", tc.n, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("Validate(%v) = %v, want an error naming %s", tc.n, err, tc.field)
		}
	}
}

func TestResolveTakesTheTextBody(t *testing.T) {
	t.Parallel()
	body, _ := anypb.New(wrapperspb.String("hello"))
	msgs := []*msgpb.Message{{Seq: 1, Body: body}}
	if got := Resolve(nil, msgs); got.GetBody() != "hello" {
		t.Fatalf("Resolve(nil) body %q, want hello", got.GetBody())
	}
	c := &pushpb.Notification{Title: "T"}
	if got := Resolve(c, msgs); got.GetTitle() != "T" || got.GetBody() != "hello" || c.GetBody() != "" {
		t.Fatalf("Resolve(title only) = %v (input now %v), want title T body hello and the input untouched", got, c)
	}
	if got := Resolve(&pushpb.Notification{Body: "B"}, msgs); got.GetBody() != "B" {
		t.Fatalf("Resolve kept body %q, want B", got.GetBody())
	}
}

func TestAPNsPayload(t *testing.T) {
	t.Parallel()
	p, err := APNs(&pushpb.Notification{Title: "T", Body: "B", Sound: "s", Badge: proto.Int32(0), Data: map[string]string{"k": "v"}})
	if err != nil || string(p) != `{"aps":{"alert":{"title":"T","body":"B"},"sound":"s","badge":0},"k":"v"}` {
		t.Fatalf("payload %s, %v", p, err)
	}
	p, _ = APNs(&pushpb.Notification{Data: map[string]string{"k": "v"}})
	if string(p) != `{"aps":{"content-available":1},"k":"v"}` {
		t.Fatalf("background payload %s", p)
	}
}
