package carrier

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/session"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// ackingBoat is a boat client answering in process: every message was
// delivered and ACKed. It keeps gRPC out of the allocation count.
type ackingBoat struct{ boatpb.BoatClient }

func (ackingBoat) PushMessages(_ context.Context, req *boatpb.PushMessagesRequest, _ ...grpc.CallOption) (*boatpb.PushMessagesResponse, error) {
	return &boatpb.PushMessagesResponse{AckedSeqs: []int64{req.GetMsgs()[0].GetSeq()}}, nil
}

// BenchmarkProcessToUid is one ToUid task of one NEED_ACK message for a user
// with one online session, through process: the session read from a real
// redis-server, the push to an in-process boat. Its allocs/op is carrier's
// per-message cost plus the Redis client's.
//
//	go test -run x -bench ProcessToUid -benchmem ./internal/carrier
func BenchmarkProcessToUid(b *testing.B) {
	rdb := testutil.StartRedis(b).Client(b)
	sessions := session.New(rdb)
	c, err := New(Config{Brokers: []string{"unused:1"}, Platforms: platform.MustParse("ios")}, zap.NewNop(), metrics.New(),
		sessions, offline.New(rdb), boatSet{"b1": ackingBoat{}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	const uid = "u1"
	if _, err := sessions.Add(b.Context(), uid, session.Session{Sid: "s1", Platform: "ios", BoatID: "b1"}, session.Caps{}, false); err != nil {
		b.Fatal(err)
	}
	// One task processed again and again: carrier does not change it.
	p := toUid(uid, []string{"ios"}, msg(1, msgpb.Option_NEED_ACK))
	b.ReportAllocs()
	for b.Loop() {
		if err := c.process(b.Context(), p, uid); err != nil {
			b.Fatal(err)
		}
	}
}
