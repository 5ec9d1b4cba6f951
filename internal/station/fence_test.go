package station

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/idgen"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// fenced fails unless err is the fence's Unavailable.
func fenced(t testing.TB, what string, err error) {
	t.Helper()
	if st := status.Convert(err); err != errFenced || st.Code() != codes.Unavailable || st.Message() != "node id claim lapsed; retry" {
		t.Fatalf("%s: %v, want Unavailable: node id claim lapsed", what, err)
	}
}

// While the node-id claim may have lapsed (never held, past its deadline,
// or fenced), no call that needs a seq publishes or records anything; once
// a claim is held again they go through.
func TestFenceRefusesIDsOnceClaimLapsed(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.KickPolicy = KickOlder })
	ctx := context.Background()
	if err := r.connect("ann", "ios", "100"); err != nil {
		t.Fatal(err)
	}
	r.tasks()
	logs := r.observe()
	gen := idgen.NewFenced()
	r.s.ids = gen
	push := &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "hi")}}

	check := func(when string) {
		t.Helper()
		seqs, err := r.s.Push(ctx, push)
		if seqs != nil {
			t.Fatalf("%s: push returned seqs %v", when, seqs)
		}
		fenced(t, when+": push", err)
		// A newer connect would kick 100; an older one would kick itself.
		fenced(t, when+": connect", r.connect("ann", "ios", "200"))
		fenced(t, when+": connect of a loser", r.connect("ann", "ios", "50"))
		fenced(t, when+": connect of another user", r.connect("bob", "web", "1"))
		fenced(t, when+": resume", r.s.Resume(ctx, "b2", []*stationpb.ResumedSession{{Uid: "cy", Sid: "1", Platform: "ios"}}))
		sids, err := r.s.Kickout(ctx, &pushpb.KickoutRequest{Uid: "ann"})
		if sids != nil {
			t.Fatalf("%s: kickout returned %v", when, sids)
		}
		fenced(t, when+": kickout", err)
		for uid, want := range map[string][]string{"ann": {"100"}, "bob": {}, "cy": {}} {
			if got := r.recorded(uid); !slices.Equal(got, want) {
				t.Fatalf("%s: %s has sessions %v, want %v", when, uid, got, want)
			}
		}
		r.noTasks(when)
		noWarning(t, logs, "could not undo")
		if n := logs.FilterMessageSnippet("no seq minted").Len(); n == 0 {
			t.Fatalf("%s: no warning that no seq was minted", when)
		}
	}
	check("never held")
	claim, err := gen.Hold(1, time.Now().Add(-time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	check("past the deadline")
	gen.Extend(claim, time.Now().Add(time.Minute))
	if seqs, err := r.s.Push(ctx, push); err != nil || len(seqs) != 1 {
		t.Fatalf("push under a held claim: %v, %v", seqs, err)
	}
	if _, tasks := r.tasks(); len(tasks) != 1 || tasks[0].GetToUid().GetMsgs()[0].GetSeq() == 0 {
		t.Fatalf("push under a held claim published %v", tasks)
	}
	gen.Fence(claim)
	check("fenced")
}
