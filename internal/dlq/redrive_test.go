package dlq

import (
	"context"
	"slices"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

type publishFunc func(ctx context.Context, recs ...queue.Record) error

func (f publishFunc) Publish(ctx context.Context, recs ...queue.Record) error { return f(ctx, recs...) }

// Two stations redriving every dead letter, each from its own list, put
// each task back once. Here the second runs its whole redrive while the
// first is publishing its first task: it finds that one claimed and puts
// back the others; the first then finds them marked redriven and puts back
// nothing more.
func TestTwoStationsRedriveEachDeadLetterOnce(t *testing.T) {
	t.Parallel()
	const letters = 6
	const deadTopic, taskTopic = "t.dead", "t.tasks"
	brokers := []string{testutil.StartKafka(t, 1, deadTopic, taskTopic)}
	prod := queue.NewProducer(queue.ProducerConfig{Brokers: brokers}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = prod.Close() })
	for i := range letters {
		p := &mqpb.Payload{Seq: int64(100 + i), Body: &mqpb.Payload_ToUid{ToUid: &mqpb.ToUid{Uid: "u1", Platforms: []string{"ios"}}}}
		v, err := proto.Marshal(&mqpb.DeadLetter{Payload: p, Reason: "test", DeadAt: int64(1000 + i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := prod.Publish(t.Context(), queue.Record{Topic: deadTopic, Key: "u1", Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	rdb := testutil.StartRedis(t).Client(t)
	station := func(pub Publisher) *DLQ {
		d, err := New(Config{TaskTopic: taskTopic}, zaptest.NewLogger(t), nil, queue.TopicReader{Brokers: brokers, Topic: deadTopic}, pub, rdb)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	all := &pushpb.RedriveDeadLettersRequest{All: true, Rate: MaxRedriveRate}
	second := station(prod)
	var secondResp *pushpb.RedriveDeadLettersResponse
	var secondErr error
	var once sync.Once
	first := station(publishFunc(func(ctx context.Context, recs ...queue.Record) error {
		once.Do(func() { secondResp, secondErr = second.Redrive(ctx, all) })
		return prod.Publish(ctx, recs...)
	}))
	firstResp, err := first.Redrive(t.Context(), all)
	if err != nil || secondErr != nil {
		t.Fatalf("redrives: %v, %v", err, secondErr)
	}
	const another = "another station is putting it back, or has put it back, at this moment"
	seqs := func(ss []*pushpb.DeadLetterSummary) []int64 {
		var out []int64
		for _, s := range ss {
			out = append(out, s.GetSeq())
		}
		return out
	}
	refused := func(rs []*pushpb.RedriveRefusal) []int64 {
		var out []int64
		for _, r := range rs {
			if r.GetReason() != another {
				t.Errorf("seq %d refused: %s", r.GetSeq(), r.GetReason())
			}
			out = append(out, r.GetSeq())
		}
		return out
	}
	if got, want := seqs(firstResp.GetRedriven()), []int64{100}; !slices.Equal(got, want) {
		t.Errorf("the first station put back %v, want %v", got, want)
	}
	if got, want := refused(firstResp.GetRefused()), []int64{101, 102, 103, 104, 105}; !slices.Equal(got, want) {
		t.Errorf("the first station refused %v, want %v (put back by the second)", got, want)
	}
	if got, want := seqs(secondResp.GetRedriven()), []int64{101, 102, 103, 104, 105}; !slices.Equal(got, want) {
		t.Errorf("the second station put back %v, want %v", got, want)
	}
	if got, want := refused(secondResp.GetRefused()), []int64{100}; !slices.Equal(got, want) {
		t.Errorf("the second station refused %v, want %v (claimed by the first)", got, want)
	}
	ranges, err := queue.TopicReader{Brokers: brokers, Topic: taskTopic}.Ranges(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tasks := int64(0)
	for _, r := range ranges {
		tasks += r.End - r.First
	}
	if tasks != letters {
		t.Fatalf("%d tasks on the task topic, want %d: each dead letter put back once", tasks, letters)
	}
	if n, err := rdb.Keys(t.Context(), "msg/dlq/claim/*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("claims left: %v, %v", n, err)
	}
}
