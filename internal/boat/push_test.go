package boat

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/boatpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
)

func ackLatencyCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func wantCode(t *testing.T, what string, err error, code codes.Code, detail errorpb.Code) {
	t.Helper()
	if status.Code(err) != code || grpcerr.DetailCode(err) != detail {
		t.Fatalf("%s: %v, want %s with detail %s", what, err, code, detail)
	}
}

// TestPushReplayReadyAndAcks follows a session through carrier's calls, as
// unary calls and on the Deliver stream:
// refusals of bad requests and unknown sids, live messages refused until the
// replay is finished (Ready sent once), an ACKed push answered with its
// seqs and timed, one without NEED_ACK not timed, and one never ACKed failing
// ACK_TIMEOUT and kicking the session.
func TestPushReplayReadyAndAcks(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"unary", "stream"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			tb := startBoat(t, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			in := tb.client(transport)
			msg := func(seq int64, ack bool) *msgpb.Message {
				m := &msgpb.Message{Seq: seq, Body: textBody("m")}
				if ack {
					m.Options = uint32(msgpb.Option_NEED_ACK)
				}
				return m
			}
			c := tb.connect(t, "u1")

			_, err := in.PushMessages(ctx, &boatpb.PushMessagesRequest{Msgs: []*msgpb.Message{msg(1, false)}})
			wantCode(t, "push without sid", err, codes.InvalidArgument, errorpb.Code_INVALID_REQUEST)
			_, err = in.PushMessages(ctx, &boatpb.PushMessagesRequest{Sid: c.sid})
			wantCode(t, "push without msgs", err, codes.InvalidArgument, errorpb.Code_INVALID_REQUEST)
			_, err = in.FinishReplay(ctx, &boatpb.FinishReplayRequest{})
			wantCode(t, "finish replay without sid", err, codes.InvalidArgument, errorpb.Code_INVALID_REQUEST)
			_, err = in.Kickout(ctx, &boatpb.KickoutRequest{})
			wantCode(t, "kickout without sid", err, codes.InvalidArgument, errorpb.Code_INVALID_REQUEST)
			_, err = in.PushMessages(ctx, &boatpb.PushMessagesRequest{Sid: "nope", Msgs: []*msgpb.Message{msg(1, false)}, Replay: true})
			wantCode(t, "push to an unknown sid", err, codes.NotFound, errorpb.Code_SESSION_NOT_FOUND)
			_, err = in.FinishReplay(ctx, &boatpb.FinishReplayRequest{Sid: "nope"})
			wantCode(t, "finish replay of an unknown sid", err, codes.NotFound, errorpb.Code_SESSION_NOT_FOUND)
			_, err = in.Kickout(ctx, &boatpb.KickoutRequest{Sid: "nope"})
			wantCode(t, "kickout of an unknown sid", err, codes.NotFound, errorpb.Code_SESSION_NOT_FOUND)

			// Live before the replay finished: refused.
			_, err = in.PushMessages(ctx, &boatpb.PushMessagesRequest{Sid: c.sid, Msgs: []*msgpb.Message{msg(1, false)}})
			wantCode(t, "live push before the replay finished", err, codes.FailedPrecondition, errorpb.Code_SESSION_NOT_READY)
			// NEED_ACK without a positive ack_wait.
			for _, w := range []time.Duration{0, -time.Second} {
				_, err = in.PushMessages(ctx, &boatpb.PushMessagesRequest{Sid: c.sid, Msgs: []*msgpb.Message{msg(1, true)},
					Replay: true, AckWait: durationpb.New(w)})
				wantCode(t, "NEED_ACK with ack_wait "+w.String(), err, codes.InvalidArgument, errorpb.Code_INVALID_REQUEST)
			}

			for range 2 { // the second is a no-op
				if _, err := in.FinishReplay(ctx, &boatpb.FinishReplayRequest{Sid: c.sid}); err != nil {
					t.Fatalf("finish replay: %v", err)
				}
			}
			if p, err := c.stream.Recv(); err != nil || p.GetReady() == nil {
				t.Fatalf("after finishing the replay: %v %v, want Ready", p, err)
			}

			// A live push with NEED_ACK is answered with the ACKed seqs.
			type result struct {
				resp *boatpb.PushMessagesResponse
				err  error
			}
			push := func(ackWait time.Duration, msgs ...*msgpb.Message) chan result {
				done := make(chan result, 1)
				go func() {
					resp, err := in.PushMessages(ctx, &boatpb.PushMessagesRequest{Sid: c.sid, Msgs: msgs, AckWait: durationpb.New(ackWait)})
					done <- result{resp, err}
				}()
				return done
			}
			done := push(10*time.Second, msg(10, true), msg(11, false), msg(12, true))
			p, err := c.stream.Recv()
			if err != nil || len(p.GetMessages().GetMsgs()) != 3 {
				t.Fatalf("recv: %v %v, want the three messages (no second Ready)", p, err)
			}
			if err := c.stream.Send(&msgpb.ClientPayload{Body: &msgpb.ClientPayload_Ack{Ack: &msgpb.Ack{Seqs: []int64{12, 10}}}}); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatalf("acked push: %v", r.err)
			}
			got := slices.Clone(r.resp.GetAckedSeqs())
			slices.Sort(got)
			if !slices.Equal(got, []int64{10, 12}) {
				t.Fatalf("acked seqs %v, want [10 12]", got)
			}
			if n := ackLatencyCount(t, tb.metrics.AckLatency); n != 1 {
				t.Fatalf("ack latency samples %d, want 1", n)
			}
			// Without NEED_ACK: answered once sent, not timed.
			done = push(0, msg(20, false))
			if p, err := c.stream.Recv(); err != nil || p.GetMessages().GetMsgs()[0].GetSeq() != 20 {
				t.Fatalf("recv: %v %v, want seq 20", p, err)
			}
			if r := <-done; r.err != nil || len(r.resp.GetAckedSeqs()) != 0 {
				t.Fatalf("push without NEED_ACK: %v %v", r.resp, r.err)
			}
			if n := ackLatencyCount(t, tb.metrics.AckLatency); n != 1 {
				t.Fatalf("ack latency samples %d after a push without NEED_ACK, want 1", n)
			}

			// Never ACKed: ACK_TIMEOUT, and the session is kicked for it.
			start := time.Now()
			done = push(300*time.Millisecond, msg(30, true))
			k := c.recvUntil(t, func(p *msgpb.ServerPayload) bool { return p.GetKickout() != nil }).GetKickout()
			if k.GetReason() != msgpb.KickoutReason_ACK_TIMEOUT || k.GetMessage() != kickMessage(msgpb.KickoutReason_ACK_TIMEOUT) {
				t.Fatalf("kickout %v, want ACK_TIMEOUT", k)
			}
			r = <-done
			wantCode(t, "push never ACKed", r.err, codes.DeadlineExceeded, errorpb.Code_ACK_TIMEOUT)
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("ACK timeout of 300ms answered after %s", took)
			}
			testutil.WaitFor(t, 5*time.Second, func() error {
				if got := promtest.ToFloat64(tb.metrics.Kickouts.WithLabelValues("ACK_TIMEOUT")); got != 1 {
					return testutil.Errorf("kickouts{ACK_TIMEOUT} %v", got)
				}
				return nil
			})
		})
	}
}

// TestKickoutEndsTheSession: carrier's Kickout sends the notice with its
// reason and returns once the session has ended and is no longer held.
func TestKickoutEndsTheSession(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, nil)
	c := tb.connect(t, "u1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := tb.internal.Kickout(ctx, &boatpb.KickoutRequest{Sid: c.sid, Reason: msgpb.KickoutReason_NEW_SESSION}); err != nil {
		t.Fatalf("kickout: %v", err)
	}
	if n := tb.Sessions(); n != 0 {
		t.Fatalf("%d sessions held once Kickout returned", n)
	}
	p, err := c.stream.Recv()
	if err != nil || p.GetKickout().GetReason() != msgpb.KickoutReason_NEW_SESSION ||
		p.GetKickout().GetMessage() != kickMessage(msgpb.KickoutReason_NEW_SESSION) {
		t.Fatalf("recv: %v %v, want the NEW_SESSION kickout", p, err)
	}
	if _, err := c.stream.Recv(); err == nil {
		t.Fatal("stream goes on after the kickout")
	}
	if got := promtest.ToFloat64(tb.metrics.Kickouts.WithLabelValues("NEW_SESSION")); got != 1 {
		t.Fatalf("kickouts{NEW_SESSION} %v, want 1", got)
	}
}

// rawOpen opens a stream with md as its metadata and returns the first
// payload's error (nil: Connected came).
func rawOpen(t *testing.T, addr string, md ...string) error {
	t.Helper()
	cc, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), md...), 10*time.Second)
	defer cancel()
	stream, err := msgpb.NewMsgClient(cc).Loop(ctx)
	if err != nil {
		return err
	}
	p, err := stream.Recv()
	if err == nil && p.GetConnected() == nil {
		t.Fatalf("first payload %v, want Connected", p)
	}
	return err
}

// TestConnectRefusals: a stream without a token, with one station refuses,
// while station is down, refused by station's own auth timeout, or whose
// station call outlasts --connect-timeout is refused with its own code and
// counted, and leaves no session held.
func TestConnectRefusals(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.ConnectTimeout = 300 * time.Millisecond })
	addr := tb.ClientAddr()
	connects := func(result string) float64 {
		return promtest.ToFloat64(tb.metrics.Connects.WithLabelValues(result))
	}
	limit := func(l string) float64 { return promtest.ToFloat64(tb.metrics.LimitRejections.WithLabelValues(l)) }

	err := rawOpen(t, addr)
	wantCode(t, "no token", err, codes.Unauthenticated, errorpb.Code_INVALID_TOKEN)
	err = rawOpen(t, addr, "authorization", "Basic u1/ios")
	wantCode(t, "no bearer token", err, codes.Unauthenticated, errorpb.Code_INVALID_TOKEN)
	if err := rawOpen(t, addr, "authorization", "Bearer  u1/ios "); err != nil {
		t.Fatalf("token with spaces around it: %v", err)
	}
	err = rawOpen(t, addr, "authorization", "Bearer bad")
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("token station refuses: %v, want Unauthenticated", err)
	}
	if got := connects("unauthenticated"); got != 3 {
		t.Fatalf("connects{unauthenticated} %v, want 3", got)
	}

	err = rawOpen(t, addr, "authorization", "Bearer limited/ios")
	if status.Code(err) != codes.DeadlineExceeded || grpcerr.DetailCode(err) != errorpb.Code_LIMIT_EXCEEDED ||
		strings.Contains(err.Error(), "--connect-timeout") {
		t.Fatalf("station's auth timeout: %v, want station's DeadlineExceeded LIMIT_EXCEEDED passed on", err)
	}
	if got := limit("connect_timeout"); got != 0 {
		t.Fatalf("station's auth timeout counted as --connect-timeout (%v)", got)
	}
	start := time.Now()
	err = rawOpen(t, addr, "authorization", "Bearer slow/ios")
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "--connect-timeout") {
		t.Fatalf("station slower than --connect-timeout: %v, want DeadlineExceeded naming --connect-timeout", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("connect timeout of 300ms answered after %s", took)
	}
	if got := limit("connect_timeout"); got != 1 {
		t.Fatalf("limit_rejections{connect_timeout} %v, want 1", got)
	}
	if got := connects("error"); got != 2 {
		t.Fatalf("connects{error} %v, want 2", got)
	}

	tb.station.down.Store(true)
	err = rawOpen(t, addr, "authorization", "Bearer u1/ios")
	tb.station.down.Store(false)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("station down: %v, want Unavailable", err)
	}
	if got := connects("unavailable"); got != 1 {
		t.Fatalf("connects{unavailable} %v, want 1", got)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := tb.Sessions(); n != 0 {
			return testutil.Errorf("%d sessions held after refused connects", n)
		}
		return nil
	})
}

// TestConnectRateLimitThroughTheBoat: a connect beyond --connect-rate is
// refused ResourceExhausted and counted under its flag.
func TestConnectRateLimitThroughTheBoat(t *testing.T) {
	t.Parallel()
	tb := startBoat(t, nil, func(c *Config) { c.ConnectRate = 1 })
	tb.connect(t, "u1")
	err := rawOpen(t, tb.ClientAddr(), "authorization", "Bearer u2/ios")
	wantCode(t, "connect beyond the rate", err, codes.ResourceExhausted, errorpb.Code_LIMIT_EXCEEDED)
	if got := promtest.ToFloat64(tb.metrics.LimitRejections.WithLabelValues("connect_rate")); got != 1 {
		t.Fatalf("limit_rejections{connect_rate} %v, want 1", got)
	}
	if got := promtest.ToFloat64(tb.metrics.Connects.WithLabelValues("limited")); got != 1 {
		t.Fatalf("connects{limited} %v, want 1", got)
	}
}

// TestMaxConnections: connections beyond --max-connections are closed; one
// closing makes room for another.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	// The harness's health connection is one of the three.
	tb := startBoat(t, nil, func(c *Config) { c.MaxConnections = 3 })
	addr := tb.ClientAddr()
	cc, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer u1/ios"))
	defer cancel()
	stream, err := msgpb.NewMsgClient(cc).Loop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	tb.connect(t, "u2")
	if err := rawOpen(t, addr, "authorization", "Bearer u3/ios"); status.Code(err) != codes.Unavailable {
		t.Fatalf("connection beyond the cap: %v, want it closed (Unavailable)", err)
	}
	if got := promtest.ToFloat64(tb.metrics.LimitRejections.WithLabelValues("max_connections")); got < 1 {
		t.Fatalf("limit_rejections{max_connections} %v, want at least 1", got)
	}
	cancel()
	_ = cc.Close()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n := tb.conns.n.Load(); n != 2 {
			return testutil.Errorf("%d connections counted", n)
		}
		return nil
	})
	if err := rawOpen(t, addr, "authorization", "Bearer u4/ios"); err != nil {
		t.Fatalf("connection after one closed: %v", err)
	}
}

// TestBoatLogsAndRegistration: the boat registers its advertised address
// (the bound internal one by default), logs what a previous run left and
// each session's start and end at debug level, and leaves etcd at once when
// it stops.
func TestBoatLogsAndRegistration(t *testing.T) {
	t.Parallel()
	endpoint := testutil.StartEtcd(t)
	cli := testutil.EtcdClient(t, endpoint)
	st := startStation(t)
	st.removed.Store(3)
	core, logs := observer.New(zap.DebugLevel)
	tb := startBoatWith(t, boatOpts{etcd: cli, st: st, log: core})
	key := "/t/boats/b1"
	if resp, err := cli.Get(context.Background(), key); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != tb.InternalAddr() {
		t.Fatalf("registration %v %v, want %s at %s", resp, err, tb.InternalAddr(), key)
	}
	if e := logs.FilterMessage("cleared sessions of a previous run").All(); len(e) != 1 || e[0].ContextMap()["sessions"] != int32(3) {
		t.Fatalf("previous run's sessions logged %v, want once with 3", e)
	}
	c := tb.connect(t, "u1")
	c.cancel()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if logs.FilterMessage("session ended").FilterField(zap.String("sid", c.sid)).Len() != 1 {
			return testutil.Errorf("session end not logged")
		}
		return nil
	})
	if logs.FilterMessage("session connected").FilterField(zap.String("sid", c.sid)).Len() != 1 {
		t.Fatal("session start not logged")
	}
	tb.cancel()
	if err := <-tb.done; err != nil {
		t.Fatalf("run: %v", err)
	}
	tb.done <- nil // for the cleanup
	if resp, err := cli.Get(context.Background(), key); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("registration %v %v after the boat stopped, want none", resp, err)
	}
	if n := logs.FilterMessage("leave etcd").Len(); n != 0 {
		t.Fatalf("%d 'leave etcd' warnings after leaving", n)
	}

	// Advertised address; nothing cleared, nothing logged.
	st2 := startStation(t)
	core2, logs2 := observer.New(zap.InfoLevel)
	tb2 := startBoatWith(t, boatOpts{st: st2, log: core2, etcd: cli, edit: func(c *Config) {
		c.ID = "b2"
		c.AdvertiseAddr = "boat2.example:7000"
	}})
	if resp, err := cli.Get(context.Background(), "/t/boats/b2"); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "boat2.example:7000" {
		t.Fatalf("registration %v %v, want the advertised address", resp, err)
	}
	if n := logs2.FilterMessage("cleared sessions of a previous run").Len(); n != 0 {
		t.Fatalf("%d logs of cleared sessions when none were", n)
	}
	_ = tb2
}

// TestIdleConnectionClosed: a client connection that opens no stream is
// closed twice --connect-timeout after it went idle.
func TestIdleConnectionClosed(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	tb := startBoat(t, nil, func(c *Config) { c.ConnectTimeout = timeout })
	cc, err := grpcx.Dial(tb.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			t.Fatalf("connection %s, never ready", s)
		}
	}
	ready := time.Now()
	if !cc.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatal("idle connection still open after 10s")
	}
	if took := time.Since(ready); took < 2*timeout-300*time.Millisecond || took > 2*timeout+2*time.Second {
		t.Fatalf("idle connection closed after %s, want twice --connect-timeout (%s)", took, 2*timeout)
	}
}

// TestConnectAbortedWhileStationAnswers: a client that goes away while
// station records its session gets no session: it is undone (reported ended
// to station) and counted aborted, not connected.
func TestConnectAbortedWhileStationAnswers(t *testing.T) {
	t.Parallel()
	st := startStation(t)
	gate := make(chan struct{})
	st.mu.Lock()
	st.connectGate = gate
	st.mu.Unlock()
	// Closed once boat's side of the stream sees the client's cancel.
	serverCanceled := make(chan struct{})
	tb := startBoatWith(t, boatOpts{st: st, stream: func(ctx context.Context) {
		context.AfterFunc(ctx, func() { close(serverCanceled) })
	}})
	cc, err := grpcx.Dial(tb.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer held/ios"))
	defer cancel()
	stream, err := msgpb.NewMsgClient(cc).Loop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sid string
	testutil.WaitFor(t, 5*time.Second, func() error {
		st.mu.Lock()
		defer st.mu.Unlock()
		if len(st.heldSids) == 0 {
			return testutil.Errorf("station not asked yet")
		}
		sid = st.heldSids[0]
		return nil
	})
	cancel()
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("recv after cancel: %v", err)
	}
	// The cancel travels to boat as a RST_STREAM: station answers only
	// once boat has seen it.
	select {
	case <-serverCanceled:
	case <-time.After(5 * time.Second):
		t.Fatal("boat's stream context not cancelled 5s after the client cancelled")
	}
	close(gate)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := promtest.ToFloat64(tb.metrics.Connects.WithLabelValues("aborted")); got != 1 {
			return testutil.Errorf("connects{aborted} %v", got)
		}
		if n := st.reported()[sid]; n != 1 {
			return testutil.Errorf("aborted session reported %d times", n)
		}
		return nil
	})
	if got := promtest.ToFloat64(tb.metrics.Connects.WithLabelValues("ok")); got != 0 {
		t.Fatalf("connects{ok} %v for an aborted connect", got)
	}
	if n := tb.Sessions(); n != 0 {
		t.Fatalf("%d sessions held after an aborted connect", n)
	}
}

// A device refused for its token leaves a WARN line — why, and from where —
// that never repeats the token, so an operator can see a client stuck on a
// bad token or someone guessing tokens.
func TestTokenRefusalsAreLogged(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.WarnLevel)
	tb := startBoatWith(t, boatOpts{log: core})
	_ = rawOpen(t, tb.ClientAddr())
	_ = rawOpen(t, tb.ClientAddr(), "authorization", "Bearer secret-xyz")
	got := logs.FilterMessage("device connect refused").AllUntimed()
	if len(got) != 2 {
		t.Fatalf("%d refusal lines, want 2: %v", len(got), got)
	}
	for i, want := range []string{"missing token", "bad token"} {
		f := got[i].ContextMap()
		if f["reason"] != want || !strings.HasPrefix(fmt.Sprint(f["peer"]), "127.0.0.1:") {
			t.Errorf("line %d: %v, want reason %q and the device's address", i, f, want)
		}
		if strings.Contains(fmt.Sprint(f), "secret-xyz") {
			t.Errorf("line %d repeats the token: %v", i, f)
		}
	}
}
