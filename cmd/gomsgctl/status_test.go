package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/receipt"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/receiptpb"
)

// `gomsgctl status` against a station whose delivery store holds a seq's
// receipts: a line per target over every page, --json with every target,
// and an unknown seq is exit 1 naming NotFound.
func TestStatus(t *testing.T) {
	t.Parallel()
	const key = "status-test-key"
	r := testutil.StartRedis(t)
	cfg := app.ClusterConfig{
		Services: []string{"station"},
		Backends: app.Backends{KafkaBrokers: []string{testutil.StartKafkaBroker(t, 1, "gomsg.tasks").Addr},
			EtcdEndpoints: []string{testutil.StartEtcd(t)}, RedisAddrs: []string{r.Addr}, CreateTopics: true},
		Internal: app.InternalAuth{Token: "status-internal-token-0123456789"},
		Station: app.StationOptions{JWTSecret: "status-test-secret-at-least-32-bytes",
			APIKeys: apikey.Line(key, []apikey.Scope{apikey.Delivery}, "status"),
			Station: station.Config{PushGRPCAddr: "127.0.0.1:0", PushHTTPAddr: "", InternalAddr: "127.0.0.1:0"}},
	}
	c, err := app.StartCluster(context.Background(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	at := time.Date(2026, 11, 27, 18, 53, 30, 123e6, time.UTC).UnixMilli()
	rs := []*receiptpb.Receipt{
		{Seq: 77, Uid: "ann", Platform: "ios", State: receiptpb.State_ACCEPTED, At: at},
		{Seq: 77, Uid: "ann", Platform: "ios", State: receiptpb.State_DELIVERED, At: at + 17, Sid: "s1", BoatId: "boat-1", Acked: true},
		{Seq: 77, Uid: "ann", Platform: "web", State: receiptpb.State_ACCEPTED, At: at},
		{Seq: 77, Uid: "ann", Platform: "web", State: receiptpb.State_RETRIED, At: at + 1000, Attempt: 1, Detail: "boat-2 unreachable"},
		{Seq: 77, Uid: "ann", Platform: "web", State: receiptpb.State_STORED, At: at + 2500},
	}
	for i := range 3 {
		rs = append(rs, &receiptpb.Receipt{Seq: 77, Uid: fmt.Sprintf("u%d", i), Platform: "ios", State: receiptpb.State_ACCEPTED, At: at})
	}
	if err := receipt.NewStore(r.Client(t)).Write(context.Background(), time.Hour, rs); err != nil {
		t.Fatal(err)
	}
	args := func(more ...string) []string {
		return append([]string{"status", "--push-addr", c.Station.PushAddr(), "--api-key", key}, more...)
	}

	code, out, errOut := ctl(t, "", args("--seq", "77", "--page-size", "2")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `ann ios DELIVERED: ACCEPTED 2026-11-27T18:53:30.123Z, DELIVERED +17ms (sid s1, boat boat-1, acked)
ann web STORED: ACCEPTED 2026-11-27T18:53:30.123Z, RETRIED +1s (attempt 1, "boat-2 unreachable"), STORED +2.5s
u0 ios ACCEPTED: ACCEPTED 2026-11-27T18:53:30.123Z
u1 ios ACCEPTED: ACCEPTED 2026-11-27T18:53:30.123Z
u2 ios ACCEPTED: ACCEPTED 2026-11-27T18:53:30.123Z
`
	if out != want {
		t.Fatalf("status printed:\n%s\nwant:\n%s", out, want)
	}

	code, out, errOut = ctl(t, "", args("--seq", "77", "--uid", "ann", "--json", "--page-size", "1")...)
	if code != 0 {
		t.Fatalf("--json: exit %d: %s", code, errOut)
	}
	var resp pushpb.GetDeliveryResponse
	if err := protojson.Unmarshal([]byte(out), &resp); err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("--json printed %q: %v", out, err)
	}
	if resp.GetSeq() != 77 || len(resp.GetTargets()) != 2 || resp.GetTargets()[1].GetState() != receiptpb.State_STORED ||
		len(resp.GetTargets()[1].GetSteps()) != 3 || resp.GetNextPageToken() != "" {
		t.Fatalf("--json: %v", &resp)
	}

	code, _, errOut = ctl(t, "", args("--seq", "78")...)
	if code != 1 || !strings.Contains(errOut, "NotFound") || !strings.Contains(errOut, "no delivery record for seq 78") {
		t.Fatalf("unknown seq: exit %d, stderr %q; want 1 naming NotFound", code, errOut)
	}
	if code, _, errOut = ctl(t, "", "status"); code != 2 || !strings.Contains(errOut, "--seq is required") {
		t.Fatalf("no --seq: exit %d, stderr %q; want 2", code, errOut)
	}
}
