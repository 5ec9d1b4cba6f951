package station

import (
	"context"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// discardQueue accepts every record and keeps none.
type discardQueue struct{}

func (discardQueue) Publish(context.Context, ...queue.Record) error { return nil }

// benchStation is a station with default settings and platforms ios and
// android, publishing to nowhere: enough for the request checks and the
// marshal of tasks, which is what the benchmarks count.
func benchStation(tb testing.TB) *Station {
	tb.Helper()
	cfg := Config{Platforms: platform.MustParse("ios,android")}
	cfg.Defaults()
	return &Station{cfg: cfg, queue: discardQueue{}}
}

// benchPush is the request of gomsg-bench's throughput run: one uid, one
// platform, one small body, NEED_ACK.
func benchPush(tb testing.TB) *pushpb.PushRequest {
	tb.Helper()
	body, err := anypb.New(wrapperspb.Bytes(make([]byte, 24)))
	if err != nil {
		tb.Fatal(err)
	}
	return &pushpb.PushRequest{Uids: []string{"u1"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}},
		MsgBodies: []*anypb.Any{body}, MsgOptions: uint32(msgpb.Option_NEED_ACK)}
}

// BenchmarkValidatePush is the checks of one Push request before anything is
// published.
//
//	go test -run x -bench ValidatePush -benchmem ./internal/station
func BenchmarkValidatePush(b *testing.B) {
	s, req := benchStation(b), benchPush(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.validatePush(req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPublishTo is the marshal and hand-off of one ToUid task.
//
//	go test -run x -bench PublishTo -benchmem ./internal/station
func BenchmarkPublishTo(b *testing.B) {
	s, req := benchStation(b), benchPush(b)
	msg := &msgpb.Message{Seq: 1, Options: req.GetMsgOptions(), Body: req.GetMsgBodies()[0], Timestamp: 1}
	tasks := []*mqpb.Payload{{Seq: 1, Timestamp: 1, Body: &mqpb.Payload_ToUid{ToUid: &mqpb.ToUid{Uid: "u1",
		Platforms: []string{"ios"}, Msgs: []*msgpb.Message{msg}}}}}
	uids := []string{"u1"}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.publishTo(b.Context(), "tasks", uids, tasks); err != nil {
			b.Fatal(err)
		}
	}
}
