package station

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/idempotency"
	"github.com/gomsg/gomsg/internal/idgen"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// observe replaces the station's logger with one that records warnings.
func (r *rig) observe() *observer.ObservedLogs {
	core, logs := observer.New(zapcore.WarnLevel)
	r.s.log = zap.New(core)
	return logs
}

func noWarning(t testing.TB, logs *observer.ObservedLogs, snippet string) {
	t.Helper()
	if n := logs.FilterMessageSnippet(snippet).Len(); n != 0 {
		t.Fatalf("%d warnings %q logged: %v", n, snippet, logs.All())
	}
}

// A push with an idempotency key publishes once: a retry of the same
// request gets the first seqs back and publishes nothing; the key used for
// a different request is refused, and so is a retry while the first call
// is in flight. A failed push releases its key, so a retry publishes.
func TestIdempotentPush(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	r.s.cfg.Idempotency = idempotency.New(r.rdb)
	logs := r.observe()
	ctx := context.Background()
	req := &pushpb.PushRequest{Uids: []string{"ann", "bob"}, MsgBodies: []*anypb.Any{body(t, "one"), body(t, "two")}, IdempotencyKey: "k1"}

	seqs, err := r.s.Push(ctx, req)
	if err != nil || len(seqs) != 2 {
		t.Fatalf("first push: %v, %v", seqs, err)
	}
	keys, tasks := r.tasks()
	if !slices.Equal(keys, []string{"ann", "bob"}) || len(tasks) != 2 {
		t.Fatalf("first push published %v", keys)
	}
	for i := range 2 {
		again, err := r.s.Push(ctx, req)
		if err != nil || !slices.Equal(again, seqs) {
			t.Fatalf("retry %d: %v, %v; want the first seqs %v", i, again, err, seqs)
		}
		r.noTasks("retry of an idempotent push")
	}
	noWarning(t, logs, "idempotency key not")

	other := &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "three")}, IdempotencyKey: "k1"}
	got, err := r.s.Push(ctx, other)
	if got != nil {
		t.Fatalf("conflicting push returned %v", got)
	}
	refusedAs(t, "conflict", err, codes.InvalidArgument, "idempotency_key: was used within --idempotency-window for a different request")
	r.noTasks("conflicting push")

	// A first call still in flight: the key is reserved and not settled.
	inflight := &pushpb.PushRequest{Uids: []string{"cy"}, MsgBodies: []*anypb.Any{body(t, "four")}, IdempotencyKey: "k2"}
	fp, err := fingerprint(inflight)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.s.cfg.Idempotency.Reserve(ctx, "k2", fp, time.Minute); err != nil || res.State != idempotency.Reserved {
		t.Fatalf("reserve: %v, %v", res, err)
	}
	got, err = r.s.Push(ctx, inflight)
	if got != nil {
		t.Fatalf("push in flight returned %v", got)
	}
	refusedAs(t, "in flight", err, codes.Aborted, "idempotency_key: a push with this key is in progress; retry")
	r.noTasks("push in flight")

	// A push that fails (no id can be minted) releases its key.
	failing := &pushpb.PushRequest{Uids: []string{"dan"}, MsgBodies: []*anypb.Any{body(t, "five")}, IdempotencyKey: "k3"}
	ids := r.s.ids
	r.s.ids = idgen.NewFenced()
	if got, err := r.s.Push(ctx, failing); got != nil || err != errFenced {
		t.Fatalf("fenced push: %v, %v; want errFenced", got, err)
	}
	r.noTasks("failed push")
	noWarning(t, logs, "idempotency key not")
	r.s.ids = ids
	seqs, err = r.s.Push(ctx, failing)
	if err != nil || len(seqs) != 1 {
		t.Fatalf("retry after a failure: %v, %v; want published", seqs, err)
	}
	if keys, _ := r.tasks(); !slices.Equal(keys, []string{"dan"}) {
		t.Fatalf("retry after a failure published %v, want dan's task", keys)
	}
	// The key is remembered for --idempotency-window.
	if ttl := r.rdb.PTTL(ctx, rkeys.Of(r.rdb).Idempotency("k3")).Val(); ttl <= IdempotencyPending || ttl > r.s.cfg.IdempotencyWindow {
		t.Fatalf("key kept for %s, want about --idempotency-window (%s)", ttl, r.s.cfg.IdempotencyWindow)
	}

	// Without a store, or with a store that cannot answer, a keyed push is
	// refused as unavailable and nothing is published.
	r.s.cfg.Idempotency = nil
	got, err = r.s.Push(ctx, req)
	if got != nil {
		t.Fatalf("push without a store returned %v", got)
	}
	refusedAs(t, "no store", err, codes.Unavailable, "idempotency_key: this station has no idempotency store")
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	r.s.cfg.Idempotency = idempotency.New(dead)
	got, err = r.s.Push(ctx, req)
	if ge, ok := err.(*grpcerr.Error); got != nil || !ok || ge.Code != codes.Unavailable {
		t.Fatalf("push with a store down: %v, %v; want Unavailable", got, err)
	}
	r.noTasks("keyed pushes without a store")
	// A push without a key needs no store.
	if seqs, err := r.s.Push(ctx, &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "six")}}); err != nil || len(seqs) != 1 {
		t.Fatalf("unkeyed push: %v, %v", seqs, err)
	}
}

// The fingerprint ignores the key and nothing else.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	a := &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "one")}, IdempotencyKey: "k1",
		ExclusiveMsgOptions: map[string]uint32{"ann": 1, "bob": 2, "cy": 4}}
	b := &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "one")}, IdempotencyKey: "k2",
		ExclusiveMsgOptions: map[string]uint32{"cy": 4, "bob": 2, "ann": 1}}
	c := &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{body(t, "one!")}, IdempotencyKey: "k1"}
	fa, errA := fingerprint(a)
	fb, errB := fingerprint(b)
	fc, errC := fingerprint(c)
	if errA != nil || errB != nil || errC != nil || fa != fb || fa == fc || len(fa) != 64 {
		t.Fatalf("fingerprints %s %s %s (%v %v %v): want the first two equal, the third different", fa, fb, fc, errA, errB, errC)
	}
	if a.IdempotencyKey != "k1" {
		t.Fatalf("fingerprint changed the request's key to %q", a.IdempotencyKey)
	}
}
