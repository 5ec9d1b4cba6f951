package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/mqpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// `gomsgctl dlq` against a station whose dead-letter topic holds two
// records as carrier writes them: list (lines, filters, --json), show, a
// dry run, a redrive that puts the task back with retry_count 0 and
// redrive_count 1, purge refused without --yes and done with it, and a key
// without the dlq scope refused.
func TestDLQ(t *testing.T) {
	t.Parallel()
	const key, pushKey = "dlq-test-key", "dlq-push-key"
	r := testutil.StartRedis(t)
	broker := testutil.StartKafkaBroker(t, 1, "gomsg.tasks").Addr
	cfg := app.ClusterConfig{
		Services: []string{"station"},
		Backends: app.Backends{KafkaBrokers: []string{broker}, TaskPartitions: 2,
			EtcdEndpoints: []string{testutil.StartEtcd(t)}, RedisAddrs: []string{r.Addr}, CreateTopics: true},
		Internal: app.InternalAuth{Token: "dlq-internal-token-0123456789"},
		Station: app.StationOptions{JWTSecret: "dlq-test-secret-at-least-32-bytes-long",
			APIKeys: apikey.Line(key, []apikey.Scope{apikey.DLQ}, "ops") + ";" + apikey.Line(pushKey, []apikey.Scope{apikey.Push}, "app"),
			Station: station.Config{PushGRPCAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0"}},
	}
	c, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	prod := queue.NewProducer(queue.ProducerConfig{Brokers: []string{broker}}, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = prod.Close() })
	// deadLetter writes a dead letter as carrier does, for seq 100+i.
	deadLetter := func(uid string, i int, dead int64, redrives int32) {
		t.Helper()
		p := &mqpb.Payload{Seq: int64(100 + i), Timestamp: dead - 5000, RetryCount: 3, LastAttemptAt: dead, RedriveCount: redrives,
			Attempts: []*mqpb.Attempt{{At: dead - 1000, Error: "boat gone", Platforms: []string{"ios"}}, {At: dead, Error: "boat unreachable", Platforms: []string{"ios"}}},
			Body:     &mqpb.Payload_ToUid{ToUid: &mqpb.ToUid{Uid: uid, Platforms: []string{"ios"}, Msgs: []*msgpb.Message{{Seq: int64(200 + i)}}}}}
		v, err := proto.Marshal(&mqpb.DeadLetter{Payload: p, Reason: "failed 2 attempts; last: boat unreachable", DeadAt: dead + int64(i)})
		if err != nil {
			t.Fatal(err)
		}
		if err := prod.Publish(context.Background(), queue.Record{Topic: "gomsg.tasks.dlq", Key: uid, Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	dead := time.Now().Add(-time.Hour).UnixMilli()
	deadLetter("ann", 0, dead, 0)
	deadLetter("bob", 1, dead, 0)
	args := func(more ...string) []string {
		return append(append([]string{"dlq"}, more[0]), append([]string{"--push-addr", c.Station.PushAddr(), "--api-key", key}, more[1:]...)...)
	}
	run := func(want int, a ...string) string {
		t.Helper()
		code, out, errOut := ctl(t, "", a...)
		if code != want {
			t.Fatalf("gomsgctl %s: exit %d, want %d\n%s%s", strings.Join(a, " "), code, want, out, errOut)
		}
		return out + errOut
	}

	out := run(0, args("list")...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "seq 101 bob [ios] to_uid msgs [201] attempts 2 redrives 0 dead ") ||
		!strings.Contains(lines[0], `last "boat unreachable"`) || !strings.HasPrefix(lines[1], "seq 100 ann ") ||
		lines[2] != "2 shown of 2 dead letters matching" {
		t.Fatalf("dlq list printed:\n%s", out)
	}
	if out = run(0, args("list", "--uid", "ann", "--since", "2h", "--reason", "UNREACHABLE")...); !strings.Contains(out, "1 shown of 1") || !strings.Contains(out, "seq 100 ann") {
		t.Fatalf("dlq list --uid ann printed:\n%s", out)
	}
	if out = run(0, args("list", "--since", "30m")...); !strings.Contains(out, "0 shown of 0") {
		t.Fatalf("dlq list --since 30m printed:\n%s", out)
	}
	var lr pushpb.ListDeadLettersResponse
	if err := protojson.Unmarshal([]byte(run(0, args("list", "--json", "--limit", "1")...)), &lr); err != nil || lr.GetMatched() != 2 || len(lr.GetRecords()) != 1 || lr.GetRecords()[0].GetUid() != "bob" {
		t.Fatalf("dlq list --json --limit 1: %v %v", &lr, err)
	}
	var show pushpb.GetDeadLetterResponse
	if err := protojson.Unmarshal([]byte(run(0, args("show", "--seq", "200")...)), &show); err != nil ||
		show.GetSummary().GetUid() != "ann" || len(show.GetAttempts()) != 2 || show.GetAttempts()[0].GetError() != "boat gone" {
		t.Fatalf("dlq show --seq 200: %v %v", &show, err)
	}
	if out = run(1, args("show", "--seq", "999")...); !strings.Contains(out, "NotFound") {
		t.Fatalf("dlq show of an unknown seq printed:\n%s", out)
	}
	if out = run(1, args("list", "--limit", "5000")...); !strings.Contains(out, "InvalidArgument") || !strings.Contains(out, "limit") {
		t.Fatalf("dlq list --limit 5000 printed:\n%s", out)
	}

	tasks := queue.TopicReader{Brokers: []string{broker}, Topic: "gomsg.tasks"}
	count := func() int {
		t.Helper()
		rs, err := tasks.Ranges(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var n int
		for _, r := range rs {
			n += int(r.End - r.First)
		}
		return n
	}
	if out = run(0, args("redrive", "--all", "--dry-run")...); !strings.Contains(out, "would redrive: seq 100 ann") ||
		!strings.Contains(out, "would redrive: seq 101 bob") || !strings.HasSuffix(out, "would redrive 2, refused 0\n") || count() != 0 {
		t.Fatalf("dlq redrive --dry-run printed (task records %d):\n%s", count(), out)
	}
	if out = run(0, args("redrive", "--uid", "bob", "--rate", "50")...); !strings.Contains(out, "redriven: seq 101 bob") || !strings.HasSuffix(out, "redriven 1, refused 0\n") {
		t.Fatalf("dlq redrive --uid bob printed:\n%s", out)
	}
	rs, err := tasks.Ranges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []*mqpb.Payload
	for _, pr := range rs {
		if err := tasks.Read(context.Background(), pr.ID, pr.First, pr.End, func(m queue.Message) error {
			var p mqpb.Payload
			if m.Key != "bob" {
				return fmt.Errorf("task keyed %q, want bob", m.Key)
			}
			got = append(got, &p)
			return proto.Unmarshal(m.Value, &p)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0].GetSeq() != 101 || got[0].GetRetryCount() != 0 || got[0].GetRedriveCount() != 1 ||
		got[0].GetToUid().GetUid() != "bob" || len(got[0].GetAttempts()) != 2 {
		t.Fatalf("task topic holds %v, want bob's task once with retry_count 0 and redrive_count 1", got)
	}
	if out = run(0, args("list")...); !strings.Contains(out, "1 shown of 1") || strings.Contains(out, "bob") {
		t.Fatalf("dlq list after the redrive printed:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"redrive"}, "exactly one of"},
		{[]string{"redrive", "--all", "--uid", "ann"}, "exactly one of"},
		{[]string{"redrive", "--all", "--rate", "0"}, "--rate"},
		{[]string{"purge", "--before", "1m"}, "without --yes"},
		{[]string{"purge", "--yes"}, "--before is required"},
		{[]string{"list", "--since", "yesterday"}, "--since"},
		{[]string{"show"}, "--seq is required"},
		{[]string{"frobnicate"}, "unknown subcommand"},
	} {
		if out = run(2, append([]string{"dlq"}, c.args...)...); !strings.Contains(out, c.want) {
			t.Fatalf("gomsgctl dlq %s printed:\n%s\nwant it to name %q", strings.Join(c.args, " "), out, c.want)
		}
	}
	if out = run(0, args("list")...); !strings.Contains(out, "1 shown of 1") {
		t.Fatalf("refused purge changed the list:\n%s", out)
	}
	if out = run(0, args("purge", "--before", "1m", "--yes")...); !strings.HasPrefix(out, "purged 1 dead letters before ") {
		t.Fatalf("dlq purge printed:\n%s", out)
	}
	if out = run(0, args("list")...); !strings.Contains(out, "0 shown of 0") {
		t.Fatalf("dlq list after the purge printed:\n%s", out)
	}

	// A task past --dlq-max-redrives (3) is refused once and does not hold
	// back the others, even one task per call (--rate 0.05: batches of 1).
	recent := time.Now().Add(-10 * time.Second).UnixMilli()
	deadLetter("carl", 2, recent, 3)
	deadLetter("dan", 3, recent, 0)
	deadLetter("eve", 4, recent, 2)
	out = run(0, args("redrive", "--all", "--rate", "0.05")...)
	if strings.Count(out, "refused: seq 102 carl: already redriven 3 times") != 1 || !strings.Contains(out, "redriven: seq 103 dan") ||
		!strings.Contains(out, "redriven: seq 104 eve [ios] to_uid msgs [204] attempts 2 redrives 2") || !strings.HasSuffix(out, "redriven 2, refused 1\n") {
		t.Fatalf("dlq redrive --all past the bound printed:\n%s", out)
	}
	if out = run(0, args("list")...); !strings.Contains(out, "1 shown of 1") || !strings.Contains(out, "seq 102 carl") {
		t.Fatalf("dlq list after redriving past the bound printed:\n%s", out)
	}

	code, _, errOut := ctl(t, "", "dlq", "list", "--push-addr", c.Station.PushAddr(), "--api-key", pushKey)
	if code != 1 || !strings.Contains(errOut, "PermissionDenied") || !strings.Contains(errOut, `"dlq"`) {
		t.Fatalf("a key without the dlq scope: exit %d, stderr %q; want 1 naming PermissionDenied", code, errOut)
	}
}
