package station

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/queue"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/authpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// slowAuth is the business's auth service (the part a test stands in for):
// token "hang" is never answered, "late" is answered DeadlineExceeded at
// once (as a service ending the call at the propagated deadline does), any
// other names its uid on ios. It records the deadline of the last call.
type slowAuth struct {
	authpb.UnimplementedAuthServer
	mu       sync.Mutex
	deadline time.Time
}

func (a *slowAuth) Authenticate(ctx context.Context, r *authpb.AuthenticateRequest) (*authpb.AuthenticateResponse, error) {
	d, _ := ctx.Deadline()
	a.mu.Lock()
	a.deadline = d
	a.mu.Unlock()
	switch r.Token {
	case "hang":
		<-ctx.Done()
		return nil, ctx.Err()
	case "late":
		return nil, status.Error(codes.DeadlineExceeded, "deadline reached")
	}
	return &authpb.AuthenticateResponse{Uid: r.Token, Platform: "ios"}, nil
}

func (a *slowAuth) lastDeadline() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.deadline
}

func startAuth(t testing.TB) (*slowAuth, auth.Authenticator) {
	t.Helper()
	a := &slowAuth{}
	srv := grpc.NewServer()
	authpb.RegisterAuthServer(srv, a)
	return a, auth.NewRemote(testutil.ServeGRPC(t, srv))
}

// An auth service that does not answer within --auth-timeout fails the
// Connect with DeadlineExceeded naming --auth-timeout, unless the boat's own
// deadline comes first: then the error is the boat's and names no setting.
// Connect gives up a little before the boat's deadline (a quarter of the
// time left, at most 500ms), so its answer reaches the boat in time.
func TestConnectAuthTimeout(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *Config) { c.AuthTimeout = 300 * time.Millisecond })
	svc, authn := startAuth(t)
	r.s.auth = authn
	timeouts := func() float64 { return promtest.ToFloat64(r.s.metrics.LimitRejections.WithLabelValues("auth_timeout")) }

	if id, err := r.s.Connect(context.Background(), "ann", testBoat, "1"); err != nil || id.UID != "ann" {
		t.Fatalf("connect: %v, %v", id, err)
	}
	r.tasks()
	for _, token := range []string{"hang", "late"} {
		_, err := r.s.Connect(context.Background(), token, testBoat, "2")
		var ge *grpcerr.Error
		if !errors.As(err, &ge) || ge.Code != codes.DeadlineExceeded || ge.Detail != errorpb.Code_LIMIT_EXCEEDED ||
			ge.Error() != "--auth-timeout: authentication did not finish within 300ms" {
			t.Fatalf("auth answering %s: %v, want DeadlineExceeded naming --auth-timeout", token, err)
		}
	}
	if timeouts() != 2 {
		t.Fatalf("%v auth timeouts counted, want 2", timeouts())
	}

	// The boat's deadline (1s) comes before --auth-timeout (5s).
	r.s.cfg.AuthTimeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	d, _ := ctx.Deadline()
	_, err := r.s.Connect(ctx, "hang", testBoat, "3")
	var ge *grpcerr.Error
	if errors.As(err, &ge) || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("connect past the boat's deadline: %v, want the boat's DeadlineExceeded naming no setting", err)
	}
	if timeouts() != 2 {
		t.Fatalf("the boat's deadline counted as an auth timeout")
	}
	// Connect's own deadline was a quarter of the second before the boat's.
	if got := d.Sub(svc.lastDeadline()); got < 150*time.Millisecond || got > 300*time.Millisecond {
		t.Fatalf("auth service saw a deadline %s before the boat's, want about 250ms", got)
	}
	// With more time left, at most 500ms is kept back.
	ctx, cancel = context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	d, _ = ctx.Deadline()
	if _, err := r.s.Connect(ctx, "bob", testBoat, "4"); err != nil {
		t.Fatal(err)
	}
	if got := d.Sub(svc.lastDeadline()); got < 400*time.Millisecond || got > 550*time.Millisecond {
		t.Fatalf("auth service saw a deadline %s before the boat's, want about 500ms", got)
	}
	if got := r.recorded("hang"); len(got) != 0 {
		t.Fatalf("timed-out connects recorded %v", got)
	}
}

// ResetBoat logs what it removed, and nothing when there was nothing.
func TestResetBoatLogs(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	core, logs := observer.New(zapcore.InfoLevel)
	r.s.log = zap.New(core)
	ctx := context.Background()
	if err := r.s.Resume(ctx, "old", []*stationpb.ResumedSession{{Uid: "ann", Sid: "1", Platform: "ios"}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{1, 0} {
		if n, err := r.s.ResetBoat(ctx, "old", false); err != nil || n != want {
			t.Fatalf("ResetBoat = %d, %v; want %d", n, err, want)
		}
	}
	got := logs.FilterMessageSnippet("removed sessions").All()
	if len(got) != 1 || got[0].ContextMap()["sessions"] != int64(1) {
		t.Fatalf("removals logged: %v, want one of 1 session", got)
	}
}

// lateAck is the queue acknowledging a publish only once the caller's
// deadline has passed (the tasks are on Kafka, but the boat stopped waiting).
type lateAck struct{ Publisher }

func (l lateAck) Publish(ctx context.Context, recs ...queue.Record) error {
	if err := l.Publisher.Publish(ctx, recs...); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// A Connect whose tasks are acknowledged after its deadline fails with the
// deadline and removes the session record again: the boat, which stopped
// waiting, would never learn of it.
func TestConnectPastDeadlineUndoesRecord(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	logs := r.observe()
	r.s.queue = lateAck{r.s.queue}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := r.s.Connect(ctx, r.token("ann", "ios"), testBoat, "1")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("connect acknowledged late: %v, want DeadlineExceeded", err)
	}
	if got := r.recorded("ann"); len(got) != 0 {
		t.Fatalf("recorded %v after a connect past its deadline, want none", got)
	}
	noWarning(t, logs, "could not undo")
}
