package carrier

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/metrics"
	"github.com/gomsg/gomsg/internal/offline"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// BenchmarkOfflineWrite compares offline writes through carrier's path (a
// task's NEED_OFFLINE messages for one user: marshal, one pipeline of
// write.lua, one clean.lua) with raw pipelined EVALSHA of the same write.lua
// for the same messages, on one real redis-server in the same run.
//
//	go test -run x -bench OfflineWrite -benchtime 3s ./internal/carrier
func BenchmarkOfflineWrite(b *testing.B) {
	rdb := testutil.StartRedis(b).Client(b)
	const batch = 10
	plats := platform.MustParse("ios:offline=1h/1000")
	c, err := New(Config{Brokers: []string{"unused:1"}, Platforms: plats}, zap.NewNop(), metrics.New(), nil,
		offline.New(rdb), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := anypb.New(wrapperspb.String(string(make([]byte, 100))))
	msgs := func(base int64) []*msgpb.Message {
		out := make([]*msgpb.Message, batch)
		ts := time.Now().UnixMilli()
		for j := range out {
			out[j] = &msgpb.Message{Seq: base + int64(j), Options: uint32(msgpb.Option_NEED_OFFLINE), Body: body, Timestamp: ts}
		}
		return out
	}

	var n1 int64
	b.Run("carrier_path", func(b *testing.B) {
		start := n1
		for b.Loop() {
			n1++
			if err := c.storeOffline(b.Context(), "c"+strconv.FormatInt(n1, 10), []string{"ios"}, msgs(1<<40+n1*batch)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((n1-start)*batch)/b.Elapsed().Seconds(), "msgs/s")
	})

	src, err := os.ReadFile("../offline/write.lua")
	if err != nil {
		b.Fatal(err)
	}
	script := redis.NewScript(string(src))
	if err := script.Load(b.Context(), rdb).Err(); err != nil {
		b.Fatal(err)
	}
	exp := time.Hour.Milliseconds()
	var n2 int64
	b.Run("raw_evalsha", func(b *testing.B) {
		start := n2
		for b.Loop() {
			n2++
			uid := "r" + strconv.FormatInt(n2, 10)
			batchMsgs := msgs(2<<40 + n2*batch)
			_, err := rdb.Pipelined(b.Context(), func(p redis.Pipeliner) error {
				for _, m := range batchMsgs {
					v, _ := proto.Marshal(m)
					seq := strconv.FormatInt(m.GetSeq(), 10)
					ts := strconv.FormatInt(m.GetTimestamp(), 10)
					script.EvalSha(b.Context(), p, []string{rkeys.Standalone.Offline(uid, "ios"), rkeys.Standalone.Body(uid, m.GetSeq()), rkeys.Standalone.Count(uid, m.GetSeq())},
						ts, seq, v, strconv.FormatInt(m.GetTimestamp()+exp, 10), strconv.FormatInt(exp, 10))
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((n2-start)*batch)/b.Elapsed().Seconds(), "msgs/s")
	})
}
