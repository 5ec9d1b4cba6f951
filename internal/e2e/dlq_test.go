package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/grpcx"
	tu "github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// pushOnlyKey is a key without the dlq scope.
const pushOnlyKey = "e2e-push-only-key"

// withDLQ bounds redrives at maxRedrives and adds pushOnlyKey.
func withDLQ(maxRedrives int) option {
	return func(c *app.ClusterConfig) {
		c.Station.DLQ.MaxRedrives = maxRedrives
		c.Station.APIKeys += ";" + apikey.Line(pushOnlyKey, []apikey.Scope{apikey.Push}, "push-only")
	}
}

// deadLetters polls ListDeadLetters until cond holds on its answer.
func (e *env) deadLetters(req *pushpb.ListDeadLettersRequest, cond func(*pushpb.ListDeadLettersResponse) error) *pushpb.ListDeadLettersResponse {
	e.t.Helper()
	var resp *pushpb.ListDeadLettersResponse
	tu.WaitFor(e.t, 30*time.Second, func() error {
		var err error
		if resp, err = e.push.ListDeadLetters(context.Background(), req); err != nil {
			return err
		}
		return cond(resp)
	})
	return resp
}

// failOn gives uid an ios session on a boat that is registered but never
// answers, so every delivery to uid's ios fails.
func (e *env) failOn(uid string) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := tu.EtcdClient(e.t, e.etcd).Put(ctx, "/gomsg/boats/dead-boat", fmt.Sprintf("127.0.0.1:%d", tu.FreePort(e.t))); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rdb.HSet(ctx, e.keys.Sessions(uid), "1", "ios-dead-boat").Err(); err != nil {
		e.t.Fatal(err)
	}
}

func wantCode(t *testing.T, what string, err error, code codes.Code, text string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), text) {
		t.Fatalf("%s: %v, want %s naming %q", what, err, code, text)
	}
}

// Tasks that fail every attempt land in the dead-letter list with their
// fields; a dry run publishes nothing; a redrive delivers a task once its
// cause is gone; one that fails again comes back with redrive count 1 and is
// then refused past --dlq-max-redrives; a purge needs confirm and empties
// the list before its time; bad filters and a key without the scope are
// refused — on a standalone Redis, on a Redis Cluster, and on NATS (whose
// dead-letter stream the tools read by subject and sequence).
func TestDeadLettersListRedrivePurge(t *testing.T) {
	t.Parallel()
	eachRedis(t, testDeadLetters)
}

func testDeadLetters(t *testing.T, redisOpt option) {
	const maxRetries = 1
	e := start(t, withRetries(maxRetries), withDLQ(1), redisOpt)
	ctx := context.Background()
	e.failOn("alice")
	e.failOn("bob")
	ios := &pushpb.PlatformConfig{Platforms: []string{"ios"}}
	before := time.Now().UnixMilli()
	seqA := e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, PlatformConfig: ios}, "for alice")
	seqB := e.pushText(&pushpb.PushRequest{Uids: []string{"bob"}, PlatformConfig: ios}, "for bob")

	list := e.deadLetters(&pushpb.ListDeadLettersRequest{}, func(r *pushpb.ListDeadLettersResponse) error {
		if r.GetMatched() != 2 {
			return fmt.Errorf("%d dead letters, want 2", r.GetMatched())
		}
		return nil
	})
	recs := list.GetRecords()
	if len(recs) != 2 || recs[0].GetDeadAt() < recs[1].GetDeadAt() {
		t.Fatalf("list %v, want 2 records newest first", recs)
	}
	for _, r := range recs {
		want := map[string]int64{"alice": seqA, "bob": seqB}[r.GetUid()]
		if want == 0 || !slices.Equal(r.GetMsgSeqs(), []int64{want}) || !slices.Equal(r.GetPlatforms(), []string{"ios"}) ||
			r.GetAttempts() != maxRetries+1 || r.GetLastError() == "" || r.GetReason() == "" || r.GetKind() != "to_uid" ||
			r.GetRedriveCount() != 0 || r.GetDeadAt() < before || r.GetDeadAt() > time.Now().UnixMilli() || r.GetSeq() == 0 {
			t.Fatalf("dead letter %v: want uid alice or bob with its message's seq, [ios], %d attempts, a reason, not redriven", r, maxRetries+1)
		}
	}
	// Filters: by uid, by reason text, by time, by limit.
	if r, err := e.push.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{Uid: "bob"}); err != nil || r.GetMatched() != 1 || r.GetRecords()[0].GetUid() != "bob" {
		t.Fatalf("list uid bob: %v %v, want bob's one", r, err)
	}
	if r, err := e.push.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{Reason: "no such failure"}); err != nil || r.GetMatched() != 0 {
		t.Fatalf("list by an unknown reason: %v %v, want none", r, err)
	}
	if r, err := e.push.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{Reason: strings.ToUpper(recs[0].GetLastError()[:6])}); err != nil || r.GetMatched() != 2 {
		t.Fatalf("list by reason text: %v %v, want both", r, err)
	}
	if r, err := e.push.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{SinceMs: recs[0].GetDeadAt() + 1}); err != nil || r.GetMatched() != 0 {
		t.Fatalf("list since after the newest: %v %v, want none", r, err)
	}
	if r, err := e.push.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{Limit: 1}); err != nil || r.GetMatched() != 2 || len(r.GetRecords()) != 1 || r.GetRecords()[0].GetSeq() != recs[0].GetSeq() {
		t.Fatalf("list limit 1: %v %v, want the newest of 2", r, err)
	}

	// Show, by a message's seq: the record in full.
	full, err := e.push.GetDeadLetter(ctx, &pushpb.GetDeadLetterRequest{Seq: seqA})
	if err != nil {
		t.Fatal(err)
	}
	if full.GetSummary().GetUid() != "alice" || len(full.GetAttempts()) != maxRetries+1 || len(full.GetMsgs()) != 1 ||
		bodyText(t, full.GetMsgs()[0]) != "for alice" || full.GetCreatedAt() < before {
		t.Fatalf("show %d: %v, want alice's task with its message and %d attempts", seqA, full, maxRetries+1)
	}
	_, err = e.push.GetDeadLetter(ctx, &pushpb.GetDeadLetterRequest{Seq: 12345})
	wantCode(t, "show an unknown seq", err, codes.NotFound, "12345")

	// Bad input names the field; a key without the scope is refused.
	for _, c := range []struct {
		name string
		call func() error
		text string
	}{
		{"list limit", func() error {
			_, err := e.push.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{Limit: -1})
			return err
		}, "limit"},
		{"list since", func() error {
			_, err := e.push.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{SinceMs: time.Now().Add(time.Hour).UnixMilli()})
			return err
		}, "since_ms"},
		{"show no seq", func() error { _, err := e.push.GetDeadLetter(ctx, &pushpb.GetDeadLetterRequest{}); return err }, "seq"},
		{"redrive two selectors", func() error {
			_, err := e.push.RedriveDeadLetters(ctx, &pushpb.RedriveDeadLettersRequest{Uid: "bob", All: true})
			return err
		}, "selector"},
		{"redrive no selector", func() error {
			_, err := e.push.RedriveDeadLetters(ctx, &pushpb.RedriveDeadLettersRequest{})
			return err
		}, "selector"},
		{"redrive rate", func() error {
			_, err := e.push.RedriveDeadLetters(ctx, &pushpb.RedriveDeadLettersRequest{All: true, Rate: 1e6})
			return err
		}, "rate"},
		{"purge before", func() error {
			_, err := e.push.PurgeDeadLetters(ctx, &pushpb.PurgeDeadLettersRequest{BeforeMs: time.Now().Add(time.Hour).UnixMilli(), Confirm: true})
			return err
		}, "before_ms"},
	} {
		wantCode(t, c.name, c.call(), codes.InvalidArgument, c.text)
	}
	// The same over HTTP/JSON.
	base := "http://" + e.gomsg.Station.PushHTTPAddr()
	resp, body := httpDo(t, http.MethodPost, base+"/v1/dlq/list", "application/json", `{"uid":"bob"}`)
	var hl struct {
		Records []struct {
			UID     string   `json:"uid"`
			MsgSeqs []string `json:"msgSeqs"`
		} `json:"records"`
		Matched string `json:"matched"`
	}
	if err := json.Unmarshal(body, &hl); resp.StatusCode != http.StatusOK || err != nil || hl.Matched != "1" || len(hl.Records) != 1 ||
		hl.Records[0].UID != "bob" || !slices.Equal(hl.Records[0].MsgSeqs, []string{strconv.FormatInt(seqB, 10)}) {
		t.Fatalf("POST /v1/dlq/list: HTTP %d %s (%v), want bob's one record", resp.StatusCode, body, err)
	}
	resp, body = httpDo(t, http.MethodPost, base+"/v1/dlq/purge", "application/json", fmt.Sprintf(`{"beforeMs":"%d"}`, time.Now().UnixMilli()))
	wantHTTPError(t, "POST /v1/dlq/purge without confirm", resp, body, http.StatusBadRequest, int(codes.InvalidArgument), "INVALID_ARGUMENT", "confirm")

	conn, err := grpcx.Dial(e.gomsg.Station.PushAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pushOnly := pushpb.NewPushClient(auth.WithBearer(conn, pushOnlyKey))
	_, err = pushOnly.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{})
	wantCode(t, "list with a push-only key", err, codes.PermissionDenied, "dlq")
	_, err = pushOnly.RedriveDeadLetters(ctx, &pushpb.RedriveDeadLettersRequest{All: true})
	wantCode(t, "redrive with a push-only key", err, codes.PermissionDenied, "dlq")

	// A dry run says what it would do and publishes nothing.
	tasks := e.topicRecords()
	dry, err := e.push.RedriveDeadLetters(ctx, &pushpb.RedriveDeadLettersRequest{All: true, DryRun: true})
	if err != nil || len(dry.GetRedriven()) != 2 || !dry.GetDryRun() || dry.GetRedriven()[0].GetSeq() != recs[1].GetSeq() ||
		dry.GetRedriven()[1].GetSeq() != recs[0].GetSeq() {
		t.Fatalf("dry run: %v %v, want both, oldest first", dry, err)
	}
	if got := e.topicRecords(); got != tasks {
		t.Fatalf("a dry run wrote %d task records", got-tasks)
	}

	// Bob's cause is gone: his dead session is removed and he is online.
	if err := e.rdb.HDel(ctx, e.keys.Sessions("bob"), "1").Err(); err != nil {
		t.Fatal(err)
	}
	bobIOS := e.connect("bob", "ios", true)
	red, err := e.push.RedriveDeadLetters(ctx, &pushpb.RedriveDeadLettersRequest{Uid: "bob", Rate: 100})
	if err != nil || len(red.GetRedriven()) != 1 || red.GetRedriven()[0].GetUid() != "bob" || len(red.GetRefused()) != 0 {
		t.Fatalf("redrive bob: %v %v, want bob's one task", red, err)
	}
	got := bobIOS.waitCount(t, 1)
	if len(got) != 1 || got[0].GetSeq() != seqB || bodyText(t, got[0]) != "for bob" {
		t.Fatalf("bob got %v, want seq %d once", got, seqB)
	}

	// Alice's cause is still there: her redriven task dies again, with
	// redrive count 1, and the record it came from leaves the list.
	if red, err = e.push.RedriveDeadLetters(ctx, &pushpb.RedriveDeadLettersRequest{Seq: seqA}); err != nil || len(red.GetRedriven()) != 1 {
		t.Fatalf("redrive alice: %v %v", red, err)
	}
	list = e.deadLetters(&pushpb.ListDeadLettersRequest{}, func(r *pushpb.ListDeadLettersResponse) error {
		if r.GetMatched() != 1 || r.GetRecords()[0].GetRedriveCount() != 1 {
			return fmt.Errorf("list %v, want alice's task alone, redriven once", r.GetRecords())
		}
		return nil
	})
	if a := list.GetRecords()[0]; a.GetUid() != "alice" || !slices.Equal(a.GetMsgSeqs(), []int64{seqA}) || a.GetAttempts() != 2*(maxRetries+1) {
		t.Fatalf("alice's dead letter again: %v, want seq %d with %d attempts in all", a, seqA, 2*(maxRetries+1))
	}
	if got := bobIOS.received(); len(got) != 1 {
		t.Fatalf("bob got %d messages after alice's redrive, want still 1", len(got))
	}

	// Past the bound it is refused, and stays.
	tasks = e.topicRecords()
	red, err = e.push.RedriveDeadLetters(ctx, &pushpb.RedriveDeadLettersRequest{All: true})
	if err != nil || len(red.GetRedriven()) != 0 || len(red.GetRefused()) != 1 || red.GetRefused()[0].GetSeq() != list.GetRecords()[0].GetSeq() ||
		!strings.Contains(red.GetRefused()[0].GetReason(), "--dlq-max-redrives 1") {
		t.Fatalf("redrive past the bound: %v %v, want alice's refused naming --dlq-max-redrives", red, err)
	}
	if got := e.topicRecords(); got != tasks {
		t.Fatalf("a refused redrive wrote %d task records", got-tasks)
	}
	if r, err := e.push.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{}); err != nil || r.GetMatched() != 1 {
		t.Fatalf("after a refused redrive: %v %v, want alice's still listed", r, err)
	}

	// Purge: not without confirm; with it, what died before the time leaves.
	_, err = e.push.PurgeDeadLetters(ctx, &pushpb.PurgeDeadLettersRequest{BeforeMs: time.Now().UnixMilli()})
	wantCode(t, "purge without confirm", err, codes.InvalidArgument, "confirm")
	if r, err := e.push.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{}); err != nil || r.GetMatched() != 1 {
		t.Fatalf("after a refused purge: %v %v, want alice's still listed", r, err)
	}
	if p, err := e.push.PurgeDeadLetters(ctx, &pushpb.PurgeDeadLettersRequest{BeforeMs: before, Confirm: true}); err != nil || p.GetPurged() != 0 {
		t.Fatalf("purge before the first dead letter: %v %v, want 0", p, err)
	}
	p, err := e.push.PurgeDeadLetters(ctx, &pushpb.PurgeDeadLettersRequest{BeforeMs: time.Now().UnixMilli(), Confirm: true})
	if err != nil || p.GetPurged() != 1 {
		t.Fatalf("purge: %v %v, want 1", p, err)
	}
	if r, err := e.push.ListDeadLetters(ctx, &pushpb.ListDeadLettersRequest{}); err != nil || r.GetMatched() != 0 {
		t.Fatalf("after the purge: %v %v, want none", r, err)
	}
	if n, err := e.rdb.HLen(ctx, e.keys.DLQHandled()).Result(); err != nil || n != 0 {
		t.Fatalf("%d redrive marks left after the purge (%v), want 0", n, err)
	}
	_, err = e.push.GetDeadLetter(ctx, &pushpb.GetDeadLetterRequest{Seq: seqA})
	wantCode(t, "show a purged seq", err, codes.NotFound, "no waiting dead letter")
}
