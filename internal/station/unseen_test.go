package station

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gomsg/gomsg/internal/idempotency"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const (
	optAckNotify = uint32(msgpb.Option_NEED_ACK | msgpb.Option_NEED_NOTIFICATION)
	lacksHelp    = " lacks NEED_ACK or NEED_NOTIFICATION, which notify_if_unseen_after needs"
)

// notify_if_unseen_after is refused, naming the field at fault, when it is
// not from 1ms to 24h or when the messages of any uid (msg_options, or its
// exclusive_msg_options) do not ask NEED_ACK and NEED_NOTIFICATION; the
// edges are accepted.
func TestValidateNotifyIfUnseen(t *testing.T) {
	t.Parallel()
	s := validator(t, nil)
	hi := sized(t, 10)
	req := func(d *durationpb.Duration, change func(*pushpb.PushRequest)) *pushpb.PushRequest {
		r := &pushpb.PushRequest{Uids: []string{"a", "b"}, MsgBodies: []*anypb.Any{hi}, MsgOptions: optAckNotify, NotifyIfUnseenAfter: d}
		if change != nil {
			change(r)
		}
		return r
	}
	dur := durationpb.New
	bad := []struct {
		name string
		req  *pushpb.PushRequest
		msg  string
	}{
		{"zero", req(dur(0), nil), "notify_if_unseen_after: 0s, must be from 1ms to 24h0m0s"},
		{"negative", req(dur(-time.Second), nil), "notify_if_unseen_after: -1s, must be from 1ms to 24h0m0s"},
		{"under a millisecond", req(dur(999*time.Microsecond), nil), "notify_if_unseen_after: 999µs, must be from 1ms to 24h0m0s"},
		{"over a day", req(dur(24*time.Hour+time.Millisecond), nil), "notify_if_unseen_after: 24h0m0.001s, must be from 1ms to 24h0m0s"},
		{"malformed", req(&durationpb.Duration{Seconds: 1, Nanos: -1}, nil),
			"notify_if_unseen_after: seconds 1 and nanos -1 are not a valid Duration"},
		{"without NEED_ACK", req(dur(time.Second), func(r *pushpb.PushRequest) { r.MsgOptions = uint32(msgpb.Option_NEED_NOTIFICATION) }),
			"msg_options: 0x4" + lacksHelp},
		{"without NEED_NOTIFICATION", req(dur(time.Second), func(r *pushpb.PushRequest) { r.MsgOptions = uint32(msgpb.Option_NEED_ACK) }),
			"msg_options: 0x1" + lacksHelp},
		{"exclusive options without NEED_ACK", req(dur(time.Second), func(r *pushpb.PushRequest) {
			r.ExclusiveMsgOptions = map[string]uint32{"b": uint32(msgpb.Option_NEED_NOTIFICATION | msgpb.Option_NEED_OFFLINE)}
		}), "exclusive_msg_options[b]: 0x6" + lacksHelp},
		{"msg_options of the uid without exclusive ones", req(dur(time.Second), func(r *pushpb.PushRequest) {
			r.MsgOptions, r.ExclusiveMsgOptions = 0, map[string]uint32{"a": optAckNotify}
		}), "msg_options: 0x0" + lacksHelp},
	}
	for _, c := range bad {
		uids, err := s.validatePush(c.req)
		if uids != nil {
			t.Fatalf("%s: uids %v returned with %v", c.name, uids, err)
		}
		refusedAs(t, c.name, err, codes.InvalidArgument, c.msg)
	}
	good := []struct {
		name string
		req  *pushpb.PushRequest
	}{
		{"1ms", req(dur(time.Millisecond), nil)},
		{"24h", req(dur(24*time.Hour), nil)},
		{"every option", req(dur(time.Minute), func(r *pushpb.PushRequest) { r.MsgOptions = allOptions })},
		{"every uid exclusive", req(dur(time.Minute), func(r *pushpb.PushRequest) {
			r.MsgOptions, r.ExclusiveMsgOptions = 0, map[string]uint32{"a": optAckNotify, "b": allOptions}
		})},
		{"unset, any options", req(nil, func(r *pushpb.PushRequest) { r.MsgOptions = 0 })},
	}
	for _, c := range good {
		if _, err := s.validatePush(c.req); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// The delay reaches every uid's task in milliseconds; a push without it
// carries none.
func TestPushCopiesNotifyIfUnseen(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx := context.Background()
	if _, err := r.s.Push(ctx, &pushpb.PushRequest{Uids: []string{"ann", "bob"}, MsgBodies: []*anypb.Any{body(t, "x")},
		MsgOptions: optAckNotify, NotifyIfUnseenAfter: durationpb.New(90*time.Second + 250*time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.s.Push(ctx, &pushpb.PushRequest{Uids: []string{"cy"}, MsgBodies: []*anypb.Any{body(t, "y")}, MsgOptions: optAckNotify}); err != nil {
		t.Fatal(err)
	}
	keys, tasks := r.tasks()
	if len(tasks) != 3 {
		t.Fatalf("published %v, want 3 tasks", keys)
	}
	for i, want := range []int64{90250, 90250, 0} {
		if got := tasks[i].GetToUid().GetNotifyIfUnseenMs(); got != want {
			t.Errorf("task of %s: notify_if_unseen_ms %d, want %d", keys[i], got, want)
		}
	}
}

// The delay is part of an idempotent push's fingerprint: a retry under the
// same key with another delay is refused like any other request and
// publishes nothing; with the same delay it gets the first seqs back.
func TestIdempotentPushFingerprintsNotifyIfUnseen(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	r.s.cfg.Idempotency = idempotency.New(r.rdb)
	ctx := context.Background()
	req := func(d time.Duration) *pushpb.PushRequest {
		return &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "x")}, MsgOptions: optAckNotify,
			NotifyIfUnseenAfter: durationpb.New(d), IdempotencyKey: "k-unseen"}
	}
	seqs, err := r.s.Push(ctx, req(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, tasks := r.tasks(); len(tasks) != 1 {
		t.Fatalf("first push published %d tasks, want 1", len(tasks))
	}
	_, err = r.s.Push(ctx, req(2*time.Minute))
	refusedAs(t, "other delay", err, codes.InvalidArgument, "idempotency_key: was used within --idempotency-window for a different request")
	r.noTasks("retry with another delay")
	again, err := r.s.Push(ctx, req(time.Minute))
	if err != nil || len(again) != 1 || again[0] != seqs[0] {
		t.Fatalf("retry with the same delay: %v, %v; want %v", again, err, seqs)
	}
	r.noTasks("retry with the same delay")
}
