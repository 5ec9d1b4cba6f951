package boat

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	gproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// rawCodec leaves what the members receive undecoded, so that the
// benchmark's clients (in the same process) cost little next to the boat.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2(gproto.Name).Marshal(v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if raw, ok := v.(*[]byte); ok {
		*raw = data.Materialize()
		return nil
	}
	return encoding.GetCodecV2(gproto.Name).Unmarshal(data, v)
}

// countRoomMessages counts the messages of a RoomMessages frame without
// decoding them.
func countRoomMessages(frame []byte) int {
	n := 0
	for len(frame) > 0 {
		num, typ, l := protowire.ConsumeTag(frame)
		if l < 0 {
			return n
		}
		frame = frame[l:]
		if num == 8 && typ == protowire.BytesType { // ServerPayload.room_messages
			rm, l := protowire.ConsumeBytes(frame)
			for len(rm) > 0 {
				num, typ, k := protowire.ConsumeTag(rm)
				if k < 0 {
					break
				}
				rm = rm[k:]
				if num == 2 { // RoomMessages.msgs
					n++
				}
				k = protowire.ConsumeFieldValue(num, typ, rm)
				if k < 0 {
					break
				}
				rm = rm[k:]
			}
			frame = frame[max(l, 0):]
			continue
		}
		l = protowire.ConsumeFieldValue(num, typ, frame)
		if l < 0 {
			return n
		}
		frame = frame[l:]
	}
	return n
}

func (rawCodec) Name() string { return gproto.Name }

// BenchmarkBroadcast1000Members: one message per Broadcast call to a room of
// 1,000 members (real gRPC streams on loopback, 50 connections of 20
// streams, each member reading in its own goroutine, not decoding), one
// message per frame (--room-batch 1) or batched as configured by default.
// An op is one broadcast delivered to every member; ns/msg is the time per
// delivered message. Allocations include the clients'.
func BenchmarkBroadcast1000Members(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) { benchBroadcast(b, batch) })
	}
}

func benchBroadcast(b *testing.B, batch int) {
	const conns, perConn = 50, 20
	tb := startBoatWith(b, boatOpts{quiet: true, edit: func(c *Config) {
		c.RoomBatch = batch
		c.SendQueue = 8192 // members reading behind under load are not kicked
		c.MaxStreamsPerConnection = perConn
		c.ConnectRate, c.ConnectRatePerIP = 1e6, 1e6
	}})
	var received atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	for i := range conns {
		cc, err := grpcx.Dial(tb.ClientAddr(), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cc.Close() })
		for j := range perConn {
			sctx := metadata.AppendToOutgoingContext(ctx, "authorization", fmt.Sprintf("Bearer u%d-%d/ios#bench", i, j))
			stream, err := msgpb.NewMsgClient(cc).Loop(sctx, grpc.ForceCodecV2(rawCodec{}))
			if err != nil {
				b.Fatal(err)
			}
			if p, err := stream.Recv(); err != nil || p.GetConnected() == nil {
				b.Fatalf("connect: %v %v", p, err)
			}
			if err := stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Room: "bench"}}}); err != nil {
				b.Fatal(err)
			}
			if p, err := stream.Recv(); err != nil || p.GetRoomAnswer().GetStatus() != 0 {
				b.Fatalf("join: %v %v", p, err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var raw []byte
				for {
					if err := stream.RecvMsg(&raw); err != nil {
						return
					}
					received.Add(int64(countRoomMessages(raw)))
				}
			}()
		}
	}
	members := int64(conns * perConn)
	body := textBody(strings.Repeat("x", 256))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		resp, err := tb.unary.Broadcast(context.Background(), &boatpb.BroadcastRequest{Room: "bench",
			Msgs: []*msgpb.Message{{Seq: int64(i + 1), Body: body}}})
		if err != nil || resp.GetMembers() != members {
			b.Fatalf("broadcast: %v %v", resp, err)
		}
	}
	want := int64(b.N) * members
	testutil.WaitFor(b, time.Minute, func() error {
		if got := received.Load(); got < want {
			return testutil.Errorf("%d of %d delivered", got, want)
		}
		return nil
	})
	b.StopTimer()
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(want), "ns/msg")
	if tb.Sessions() != int(members) {
		b.Fatalf("%d sessions left, want %d (slow consumers kicked?)", tb.Sessions(), members)
	}
}
