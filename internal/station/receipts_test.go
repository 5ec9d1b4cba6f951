package station

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/idempotency"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

const testReceiptsTopic = "receipts"

// receipts returns the receipts published since the last call (*read is
// the offset read up to), in order, as "seq uid/platform STATE" lines.
func (r *rig) receipts(read *int64) []string {
	r.t.Helper()
	end := r.endOf(testReceiptsTopic)
	if end == *read {
		return nil
	}
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{r.kafka}, Topic: testReceiptsTopic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer rd.Close()
	if err := rd.SetOffset(*read); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []string
	for *read < end {
		m, err := rd.ReadMessage(ctx)
		if err != nil {
			r.t.Fatalf("read receipts at offset %d of %d: %v", *read, end, err)
		}
		var rc receiptpb.Receipt
		if err := proto.Unmarshal(m.Value, &rc); err != nil {
			r.t.Fatal(err)
		}
		if string(m.Key) != rc.GetUid() || rc.GetId() != receipt.ID(&rc) || rc.GetAt() == 0 {
			r.t.Fatalf("receipt %v keyed %q: want keyed by uid, with id and time", &rc, m.Key)
		}
		out = append(out, fmt.Sprintf("%d %s/%s %s", rc.GetSeq(), rc.GetUid(), rc.GetPlatform(), rc.GetState()))
		*read = m.Offset + 1
	}
	return out
}

// Push publishes an ACCEPTED receipt per uid whose messages ask
// NEED_RECEIPTS (msg_options, or its exclusive_msg_options), platform
// selected for it and seq, with the tasks; a uid whose messages do not ask
// gets none, nor does a push without the bit; an idempotent retry publishes
// none; receipts off publish none.
func TestPushPublishesAcceptedReceipts(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	r.s.cfg.Receipts = receipt.New(testReceiptsTopic, r.s.queue)
	r.s.cfg.Idempotency = idempotency.New(r.rdb)
	var read int64
	req := &pushpb.PushRequest{
		Uids:                    []string{"ann", "bob", "ann", "cy"},
		MsgBodies:               []*anypb.Any{body(t, "one"), body(t, "two")},
		MsgOptions:              uint32(msgpb.Option_NEED_RECEIPTS),
		ExclusiveMsgOptions:     map[string]uint32{"cy": uint32(msgpb.Option_NEED_ACK)},
		PlatformConfig:          &pushpb.PlatformConfig{Platforms: []string{"ios", "android"}},
		ExclusivePlatformConfig: map[string]*pushpb.PlatformConfig{"bob": {Platforms: []string{"web"}}},
		IdempotencyKey:          "k1",
	}
	seqs, err := r.s.Push(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := seqs[0], seqs[1]
	want := []string{
		fmt.Sprintf("%d ann/ios ACCEPTED", s1), fmt.Sprintf("%d ann/ios ACCEPTED", s2),
		fmt.Sprintf("%d ann/android ACCEPTED", s1), fmt.Sprintf("%d ann/android ACCEPTED", s2),
		fmt.Sprintf("%d bob/web ACCEPTED", s1), fmt.Sprintf("%d bob/web ACCEPTED", s2),
	}
	if got := r.receipts(&read); !slices.Equal(got, want) {
		t.Fatalf("receipts %q, want %q", got, want)
	}
	if keys, _ := r.tasks(); !slices.Equal(keys, []string{"ann", "bob", "cy"}) {
		t.Fatalf("tasks of %v, want ann, bob and cy", keys)
	}

	if again, err := r.s.Push(context.Background(), req); err != nil || !slices.Equal(again, seqs) {
		t.Fatalf("idempotent retry: %v, %v", again, err)
	}
	if got := r.receipts(&read); len(got) != 0 {
		t.Fatalf("idempotent retry published receipts %q", got)
	}

	plain := &pushpb.PushRequest{Uids: []string{"dee"}, MsgBodies: []*anypb.Any{body(t, "plain")}}
	if _, err := r.s.Push(context.Background(), plain); err != nil {
		t.Fatal(err)
	}
	mixed := &pushpb.PushRequest{Uids: []string{"dee", "eve"}, MsgBodies: []*anypb.Any{body(t, "mixed")},
		PlatformConfig:      &pushpb.PlatformConfig{Platforms: []string{"ios"}},
		ExclusiveMsgOptions: map[string]uint32{"eve": uint32(msgpb.Option_NEED_RECEIPTS)}}
	seqs, err = r.s.Push(context.Background(), mixed)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.receipts(&read), []string{fmt.Sprintf("%d eve/ios ACCEPTED", seqs[0])}; !slices.Equal(got, want) {
		t.Fatalf("receipts of a push without NEED_RECEIPTS, then of one asking it for eve alone: %q, want %q", got, want)
	}
	if keys, _ := r.tasks(); !slices.Equal(keys, []string{"dee", "dee", "eve"}) {
		t.Fatalf("tasks of %v, want dee, dee and eve", keys)
	}

	r.s.cfg.Receipts = nil
	if _, err := r.s.Push(context.Background(), &pushpb.PushRequest{Uids: []string{"cy"}, MsgBodies: []*anypb.Any{body(t, "three")}}); err != nil {
		t.Fatal(err)
	}
	if got := r.receipts(&read); len(got) != 0 {
		t.Fatalf("receipts off published %q", got)
	}
	if keys, _ := r.tasks(); !slices.Equal(keys, []string{"cy"}) {
		t.Fatalf("tasks of %v, want cy", keys)
	}
}

// failingPublisher is a Publisher to a stopped broker for the receipts
// only: tasks go through; a record of the receipts topic fails the call.
type failingPublisher struct {
	ok, down *queue.Producer
}

func (p failingPublisher) Publish(ctx context.Context, recs ...queue.Record) error {
	if slices.ContainsFunc(recs, func(r queue.Record) bool { return r.Topic == testReceiptsTopic }) {
		return p.down.Publish(ctx, recs...)
	}
	return p.ok.Publish(ctx, recs...)
}

// Push fails when Kafka does not take its receipts: its receipts and tasks
// travel in one Publish call.
func TestPushFailsWhenReceiptsAreRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	k := testutil.StartKafkaBroker(t, 1, testTopic, testReceiptsTopic)
	k.Close()
	down := queue.NewProducer(queue.ProducerConfig{Brokers: []string{k.Addr}, WriteTimeout: time.Second}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = down.Close() })
	ok := r.s.queue.(*queue.Producer)
	r.s.queue = failingPublisher{ok: ok, down: down}
	r.s.cfg.Receipts = receipt.New(testReceiptsTopic, r.s.queue)
	seqs, err := r.s.Push(context.Background(), &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "one")},
		MsgOptions: uint32(msgpb.Option_NEED_RECEIPTS)})
	if seqs != nil || !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("push with its receipts refused: %v, %v; want queue.ErrUnavailable", seqs, err)
	}
}

// A push may track at most MaxReceiptsPerPush (uid, platform, message)
// targets: one over is refused InvalidArgument naming msg_options, with no
// task and no receipt published; exactly at the bound it is taken. Targets
// that do not ask NEED_RECEIPTS do not count.
func TestPushTracksAtMostMaxReceipts(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.MaxReceiptsPerPush = 4 })
	r.s.cfg.Receipts = receipt.New(testReceiptsTopic, r.s.queue)
	var read int64
	// ann and bob: 2 platforms each; cy: 1; plain: 2, untracked.
	push := func(uids ...string) ([]int64, error) {
		req := &pushpb.PushRequest{Uids: uids,
			MsgBodies:               []*anypb.Any{body(t, "one")},
			MsgOptions:              uint32(msgpb.Option_NEED_RECEIPTS),
			ExclusiveMsgOptions:     map[string]uint32{},
			PlatformConfig:          &pushpb.PlatformConfig{Platforms: []string{"ios", "android"}},
			ExclusivePlatformConfig: map[string]*pushpb.PlatformConfig{}}
		if slices.Contains(uids, "plain") {
			req.ExclusiveMsgOptions["plain"] = 0
		}
		if slices.Contains(uids, "cy") {
			req.ExclusivePlatformConfig["cy"] = &pushpb.PlatformConfig{Platforms: []string{"ios"}}
		}
		return r.s.Push(context.Background(), req)
	}
	_, err := push("ann", "bob", "cy")
	if code, _, detail := grpcerr.Parts(grpcerr.Status(err)); code != codes.InvalidArgument || detail.GetField() != "msg_options" {
		t.Fatalf("push tracking 5 targets: %v (field %q), want InvalidArgument on msg_options", err, detail.GetField())
	}
	if keys, _ := r.tasks(); len(keys) != 0 {
		t.Fatalf("the refused push published tasks of %v", keys)
	}
	if got := r.receipts(&read); len(got) != 0 {
		t.Fatalf("the refused push published receipts %q", got)
	}
	if _, err := push("ann", "bob", "plain"); err != nil {
		t.Fatalf("push tracking 4 targets: %v", err)
	}
	if got := r.receipts(&read); len(got) != 4 {
		t.Fatalf("receipts %q, want ann's and bob's 4", got)
	}
}
