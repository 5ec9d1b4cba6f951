package carrier

import (
	"context"
	"slices"
	"sync"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/gomsg/gomsg/internal/boatclient"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/mqpb"
)

// partialBoat serves boat's Deliver stream as boat does when a client ACKs
// only the first acks messages of a push before its ACK wait runs out: the
// answer is ACK_TIMEOUT and carries the seqs ACKed before it.
type partialBoat struct {
	boatpb.UnimplementedBoatServer
	acks int

	mu       sync.Mutex
	pushed   [][]int64
	finished int
}

func (b *partialBoat) Deliver(stream boatpb.Boat_DeliverServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		for _, d := range req.GetDeliveries() {
			var seqs []int64
			for _, m := range d.GetPush().GetMsgs() {
				seqs = append(seqs, m.GetSeq())
			}
			b.mu.Lock()
			b.pushed = append(b.pushed, seqs)
			b.mu.Unlock()
			res := &boatpb.DeliveryResult{Id: d.GetId(), AckedSeqs: seqs}
			if len(seqs) > b.acks {
				res.AckedSeqs = seqs[:b.acks]
				code, msg, detail := grpcerr.Parts(grpcerr.New(codes.DeadlineExceeded, errorpb.Code_ACK_TIMEOUT, "no ACK in time"))
				res.Code, res.Message, res.Error = uint32(code), msg, detail
			}
			if err := stream.Send(&boatpb.DeliverResponse{Results: []*boatpb.DeliveryResult{res}}); err != nil {
				return err
			}
		}
	}
}

func (b *partialBoat) FinishReplay(context.Context, *boatpb.FinishReplayRequest) (*boatpb.FinishReplayResponse, error) {
	b.mu.Lock()
	b.finished++
	b.mu.Unlock()
	return &boatpb.FinishReplayResponse{}, nil
}

// A replayed page the session ACKs only in part before its ACK wait runs
// out: the ACKed messages are deleted from the store, with their REPLAYED
// receipts and counted as replayed; the rest stays stored for the next
// connect, with no receipt; the replay is not finished (the session is
// being kicked) and nothing is retried.
func TestReplayedPageAckedInPart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, "ios:offline=1h/100", nil).withReceipts()
	b := &partialBoat{acks: 2}
	srv := grpc.NewServer()
	boatpb.RegisterBoatServer(srv, b)
	h.c.boats = boatSet{"b1": boatclient.New(testutil.ServeGRPC(t, srv))}
	h.store("u1", "ios", msg(1, needRc, needOff), msg(2, needRc, needOff), msg(3, needRc, needOff))
	h.connect("u1", "1001", "ios", "b1")
	h.process(&mqpb.Payload{Seq: 9, Body: &mqpb.Payload_SendOfflineToSession{
		SendOfflineToSession: &mqpb.SendOfflineToSession{Uid: "u1", Sid: "1001", Platform: "ios"}}}, "u1")

	b.mu.Lock()
	pushed, finished := slices.Clone(b.pushed), b.finished
	b.mu.Unlock()
	if len(pushed) != 1 || !slices.Equal(pushed[0], []int64{1, 2, 3}) {
		t.Fatalf("pushed %v, want one page [1 2 3]", pushed)
	}
	if s := h.stored("u1", "ios"); !slices.Equal(s, []int64{3}) {
		t.Fatalf("stored %v after the page was ACKed in part, want [3]", s)
	}
	wantReceipts(t, h.receipts(), "1 u1/ios REPLAYED 1001@b1 acked", "2 u1/ios REPLAYED 1001@b1 acked")
	if n := promtest.ToFloat64(h.m.OfflineReplayed); n != 2 {
		t.Fatalf("offline replayed %v, want 2", n)
	}
	if finished != 0 {
		t.Fatalf("replay finished %d times, want none: the session did not ACK it all", finished)
	}
	if r := h.published(retryTopic); len(r) != 0 {
		t.Fatalf("%d retries of a replay the session ended", len(r))
	}
}
