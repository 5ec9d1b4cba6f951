package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/grpcerr"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/station"
	tu "github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/authpb"
	"github.com/gomsg/gomsg/pb/errorpb"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
	"github.com/gomsg/gomsg/pb/stationpb"
)

// limitRejections reads gomsg_limit_rejections_total{limit}.
func (e *env) limitRejections(limit string) float64 {
	return testutil.ToFloat64(e.gomsg.Metrics.LimitRejections.WithLabelValues(limit))
}

// pushJSON is a valid HTTP/JSON push of one text body to uid, padded to at
// least size bytes.
func pushJSON(uid string, size int) string {
	body := `{"uids":["` + uid + `"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"x"}]}`
	if pad := size - len(body); pad > 0 {
		body += strings.Repeat(" ", pad)
	}
	return body
}

// An HTTP/JSON body beyond --http-max-body-bytes is refused with 413,
// whether its size is announced (Content-Length) or not (chunked), and
// nothing is published; a body within the limit still works.
func TestHTTPBodyLimit(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.ClusterConfig) { c.Station.Station.HTTP.MaxBodyBytes = 16 << 10 })
	url := "http://" + e.gomsg.Station.PushHTTPAddr() + "/v1/push"
	big := pushJSON("ann", 20<<10)

	resp, err := postKeyed(url, strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(msg), "--http-max-body-bytes") {
		t.Fatalf("Content-Length body: %d %s, want 413 naming --http-max-body-bytes", resp.StatusCode, msg)
	}
	// A reader of unknown length makes the client send it chunked.
	resp, err = postKeyed(url, io.MultiReader(strings.NewReader(big)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body: status %d, want 413", resp.StatusCode)
	}
	if n := e.topicRecords(); n != 0 {
		t.Fatalf("%d task records after refused pushes, want 0", n)
	}
	if n := e.limitRejections("http_max_body_bytes"); n != 2 {
		t.Fatalf("gomsg_limit_rejections_total{limit=http_max_body_bytes} = %g, want 2", n)
	}
	// Within the limit, chunked or not, the push goes through.
	for _, r := range []io.Reader{strings.NewReader(pushJSON("ann", 8<<10)), io.MultiReader(strings.NewReader(pushJSON("ann", 8<<10)))} {
		resp, err := postKeyed(url, r)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("push within the limit: %d %s", resp.StatusCode, msg)
		}
	}
	if n := e.topicRecords(); n != 2 {
		t.Fatalf("%d task records after two accepted pushes, want 2", n)
	}
}

// Slow HTTP bodies are cut off by --http-read-timeout: none of many
// connections that trickle a body is held past it.
func TestHTTPSlowBodies(t *testing.T) {
	t.Parallel()
	const conns = 200
	e := start(t, func(c *app.ClusterConfig) { c.Station.Station.HTTP.ReadTimeout = 500 * time.Millisecond })
	addr := e.gomsg.Station.PushHTTPAddr()
	var wg sync.WaitGroup
	results := make(chan string, conns)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				results <- "dial: " + err.Error()
				return
			}
			defer c.Close()
			// The client's own guard: a server that never ends the
			// connection fails the test instead of hanging it.
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = fmt.Fprintf(c, "POST /v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer %s\r\nContent-Length: 1000\r\n\r\n{\"uids\":", apiKey)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			switch {
			case err == nil:
				resp.Body.Close()
				results <- resp.Status
			case err == io.EOF || err == io.ErrUnexpectedEOF || strings.Contains(err.Error(), "reset"):
				results <- "closed"
			case errors.Is(err, os.ErrDeadlineExceeded):
				results <- "still open after 10s"
			default:
				results <- err.Error()
			}
		}()
	}
	wg.Wait()
	close(results)
	seen := map[string]int{}
	for r := range results {
		seen[r]++
	}
	if seen["408 Request Timeout"]+seen["closed"] != conns {
		t.Fatalf("slow bodies ended as %v, want all %d answered 408 or closed", seen, conns)
	}
	if seen["408 Request Timeout"] == 0 {
		t.Fatalf("slow bodies ended as %v, want 408 answers", seen)
	}
	if n := e.topicRecords(); n != 0 {
		t.Fatalf("%d task records after slow bodies, want 0", n)
	}
}

// A request header beyond --http-max-header-bytes is refused with 431.
func TestHTTPHeaderLimit(t *testing.T) {
	t.Parallel()
	e := start(t)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost,
		"http://"+e.gomsg.Station.PushHTTPAddr()+"/v1/push", strings.NewReader(pushJSON("ann", 0)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Padding", strings.Repeat("a", 128<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("128 KiB header: status %d, want 431", resp.StatusCode)
	}
	if n := e.topicRecords(); n != 0 {
		t.Fatalf("%d task records after a refused push, want 0", n)
	}
}

// A gRPC metadata list beyond --grpc-max-header-bytes (an 8 MB
// authorization header; grpc-go's own default would take 16 MB) is refused
// by the boat's transport: no session, no call to station.
func TestGRPCHeaderLimit(t *testing.T) {
	t.Parallel()
	e := start(t)
	conn, err := grpcx.Dial(e.boatAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	huge := "Bearer " + strings.Repeat("a", 8<<20)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", huge), 10*time.Second)
	defer cancel()
	stream, err := msgpb.NewMsgClient(conn).Loop(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if err == nil || status.Code(err) == codes.Unauthenticated {
		t.Fatalf("8 MB header: %v, want it refused before authentication", err)
	}
	connects := 0.0
	for _, r := range []string{"ok", "unauthenticated", "invalid", "unavailable", "error"} {
		connects += testutil.ToFloat64(e.gomsg.Metrics.Connects.WithLabelValues(r))
	}
	if connects != 0 {
		t.Fatalf("boat counted %g connects, want the stream refused before its handler", connects)
	}
	// The Push API (station) refuses it too.
	pctx, pcancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", huge), 10*time.Second)
	defer pcancel()
	_, err = e.push.Online(pctx, &pushpb.OnlineRequest{Uids: []string{"ann"}})
	if err == nil {
		t.Fatal("Push API took an 8 MB header")
	}
	if keys, _ := e.rdb.Keys(context.Background(), "*").Result(); len(keys) != 0 {
		t.Fatalf("refused calls left Redis keys %v", keys)
	}
}

// A gRPC message beyond --grpc-max-recv-bytes is ResourceExhausted before
// station reads it.
func TestGRPCRecvLimit(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.ClusterConfig) { c.GRPC.MaxRecvBytes = 1 << 20 })
	big, _ := anypb.New(wrapperspb.Bytes(make([]byte, 2<<20)))
	_, err := e.push.Push(context.Background(), &pushpb.PushRequest{Uids: []string{"ann"}, MsgBodies: []*anypb.Any{big}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("2 MiB push with --grpc-max-recv-bytes 1MiB: %v, want ResourceExhausted", err)
	}
	if n := e.topicRecords(); n != 0 {
		t.Fatalf("%d task records after a refused push, want 0", n)
	}
}

// A push whose uids × (bodies + notification) exceed --max-push-bytes is
// refused with ResourceExhausted naming the flag, and nothing is published;
// one within it is published whole.
func TestMaxPushBytes(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, queueOpt option) {
		e := start(t, queueOpt, func(c *app.ClusterConfig) { c.Station.Station.MaxPushBytes = 1 << 20 })
		body, _ := anypb.New(wrapperspb.Bytes(make([]byte, 60<<10)))
		uids := func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = fmt.Sprintf("u%d", i)
			}
			return out
		}
		// 20 × ~60 KiB ≈ 1.2 MiB.
		_, err := e.push.Push(context.Background(), &pushpb.PushRequest{Uids: uids(20), MsgBodies: []*anypb.Any{body},
			Notification: &pushpb.Notification{Title: "t", Body: "b"}})
		if status.Code(err) != codes.ResourceExhausted || grpcerr.DetailCode(err) != errorpb.Code_LIMIT_EXCEEDED ||
			!strings.Contains(err.Error(), "--max-push-bytes") {
			t.Fatalf("push of 20 × 60 KiB: %v, want ResourceExhausted LIMIT_EXCEEDED naming --max-push-bytes", err)
		}
		if n := e.topicRecords(); n != 0 {
			t.Fatalf("%d task records after a refused push, want 0", n)
		}
		if n := e.limitRejections("max_push_bytes"); n != 1 {
			t.Fatalf("gomsg_limit_rejections_total{limit=max_push_bytes} = %g, want 1", n)
		}
		// 10 × ~60 KiB fits.
		if _, err := e.push.Push(context.Background(), &pushpb.PushRequest{Uids: uids(10), MsgBodies: []*anypb.Any{body}}); err != nil {
			t.Fatalf("push of 10 × 60 KiB: %v", err)
		}
		if n := e.topicRecords(); n != 10 {
			t.Fatalf("%d task records after a push to 10 uids, want 10", n)
		}
	})
}

// Concurrent connects of one uid cannot pass --max-sessions-per-uid or
// --max-sessions-per-platform: the device is refused with ResourceExhausted
// LIMIT_EXCEEDED, and a refused connect records nothing and queues nothing.
func TestSessionCaps(t *testing.T) {
	t.Parallel()
	eachRedis(t, func(t *testing.T, redisOpt option) {
		e := start(t, func(c *app.ClusterConfig) {
			c.Station.Station.MaxSessionsPerUID = 8
			c.Station.Station.MaxSessionsPerPlatform = 4
			c.Station.Station.KickPolicy = station.KeepAll
		}, redisOpt)
		const attempts = 40
		var wg sync.WaitGroup
		var mu sync.Mutex
		accepted, refused := 0, 0
		for i := range attempts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := e.tryDial("ann", []string{"ios", "android", "web"}[i%3], false)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					accepted++
				case status.Code(err) == codes.ResourceExhausted && grpcerr.DetailCode(err) == errorpb.Code_LIMIT_EXCEEDED &&
					strings.Contains(err.Error(), "--max-sessions-per-"):
					refused++
				default:
					t.Errorf("connect: %v", err)
				}
			}()
		}
		wg.Wait()
		if accepted != 8 || refused != attempts-8 {
			t.Fatalf("%d accepted, %d refused; want 8 and %d", accepted, refused, attempts-8)
		}
		vals, err := e.rdb.HVals(context.Background(), e.keys.Sessions("ann")).Result()
		if err != nil || len(vals) != 8 {
			t.Fatalf("session hash holds %d (%v), want 8", len(vals), err)
		}
		per := map[string]int{}
		for _, v := range vals {
			per[strings.SplitN(v, "-", 2)[0]]++
		}
		for p, n := range per {
			if n > 4 {
				t.Fatalf("%d sessions on %s, want at most 4 (%v)", n, p, per)
			}
		}
		// keep-all: one offline-replay task per accepted session, none for refused ones.
		if n := e.topicRecords(); n != 8 {
			t.Fatalf("%d task records, want 8", n)
		}
		if n := e.limitRejections("max_sessions_per_uid") + e.limitRejections("max_sessions_per_platform"); n != attempts-8 {
			t.Fatalf("session cap rejections counted %g, want %d", n, attempts-8)
		}
		if n := e.gomsg.Boat.Sessions(); n != 8 {
			t.Fatalf("boat holds %d sessions, want 8", n)
		}
		// One platform alone stops at its own cap.
		for i := range 6 {
			_, err := e.tryDial("bob", "ios", false)
			if i < 4 && err != nil || i >= 4 && !strings.Contains(fmt.Sprint(err), "--max-sessions-per-platform") {
				t.Fatalf("connect %d of bob on ios: %v", i, err)
			}
		}
		if n := e.rdb.HLen(context.Background(), e.keys.Sessions("bob")).Val(); n != 4 {
			t.Fatalf("bob holds %d sessions, want 4", n)
		}
	})
}

// stuckAuth is an authpb.Auth service that never answers; it counts the
// calls it holds.
type stuckAuth struct {
	authpb.UnimplementedAuthServer
	held atomic.Int64
}

func (a *stuckAuth) Authenticate(ctx context.Context, _ *authpb.AuthenticateRequest) (*authpb.AuthenticateResponse, error) {
	a.held.Add(1)
	defer a.held.Add(-1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// startStuckAuth serves an authpb.Auth that never answers; it returns its
// address.
func startStuckAuth(t *testing.T) (string, *stuckAuth) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stuck := &stuckAuth{}
	srv := grpc.NewServer()
	authpb.RegisterAuthServer(srv, stuck)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return l.Addr().String(), stuck
}

// An auth service that never answers does not hang connects: each fails
// with DeadlineExceeded naming --auth-timeout, records nothing, and the
// call to the auth service is abandoned.
func TestAuthTimeout(t *testing.T) {
	t.Parallel()
	addr, stuck := startStuckAuth(t)
	e := start(t, func(c *app.ClusterConfig) {
		c.Station.AuthAddr = addr
		c.Station.Station.AuthTimeout = 300 * time.Millisecond
	})
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.tryDial("ann", "ios", false)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "--auth-timeout") {
			t.Fatalf("connect with a stuck auth service: %v, want DeadlineExceeded naming --auth-timeout", err)
		}
	}
	tu.WaitFor(t, 5*time.Second, func() error {
		if n := stuck.held.Load(); n != 0 {
			return fmt.Errorf("auth service still holds %d calls", n)
		}
		return nil
	})
	if keys, _ := e.rdb.Keys(context.Background(), "*").Result(); len(keys) != 0 {
		t.Fatalf("timed-out connects left Redis keys %v", keys)
	}
	if n := e.limitRejections("auth_timeout"); n != 10 {
		t.Fatalf("gomsg_limit_rejections_total{limit=auth_timeout} = %g, want 10", n)
	}
}

// sessionKeys counts the users with a recorded session.
func (e *env) sessionKeys() int {
	e.t.Helper()
	keys, err := e.rdb.Keys(context.Background(), "msg/u:*/ss").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return len(keys)
}

// Connects from one address beyond --connect-rate-per-ip, and from all
// beyond --connect-rate, are refused with ResourceExhausted naming the
// flag, and record nothing.
func TestConnectRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flag, limit string
		set         func(*app.ClusterConfig)
	}{
		{"--connect-rate-per-ip", "connect_rate_per_ip", func(c *app.ClusterConfig) { c.Boat.ConnectRatePerIP = 5 }},
		{"--connect-rate", "connect_rate", func(c *app.ClusterConfig) { c.Boat.ConnectRate = 5 }},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			t.Parallel()
			e := start(t, tc.set)
			const attempts = 30
			begin := time.Now()
			accepted, refused := 0, 0
			for i := range attempts {
				_, err := e.tryDial(fmt.Sprintf("u%d", i), "web", false)
				switch {
				case err == nil:
					accepted++
				case status.Code(err) == codes.ResourceExhausted && grpcerr.DetailCode(err) == errorpb.Code_LIMIT_EXCEEDED &&
					strings.Contains(err.Error(), tc.flag+":"):
					refused++
				default:
					t.Fatalf("connect %d: %v", i, err)
				}
			}
			// A burst of 5, then 5 a second.
			if most := 5 + int(time.Since(begin).Seconds()*5) + 1; accepted < 5 || accepted > most {
				t.Fatalf("%d of %d connects accepted in %s, want 5 to %d", accepted, attempts, time.Since(begin), most)
			}
			if n := e.sessionKeys(); n != accepted {
				t.Fatalf("%d users recorded, want the %d accepted", n, accepted)
			}
			if n := e.limitRejections(tc.limit); int(n) != refused {
				t.Fatalf("gomsg_limit_rejections_total{limit=%s} = %g, want %d", tc.limit, n, refused)
			}
		})
	}
}

// A boat holding --max-connections closes further connections as soon as
// it accepts them; once one ends, a new one is served.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.ClusterConfig) { c.Boat.MaxConnections = 3 })
	var devs []*device
	for i := range 3 {
		devs = append(devs, e.connect(fmt.Sprintf("u%d", i), "web", false))
	}
	if _, err := e.tryDial("u3", "web", false); status.Code(err) != codes.Unavailable {
		t.Fatalf("4th connection: %v, want it closed (Unavailable)", err)
	}
	if n := e.sessionKeys(); n != 3 {
		t.Fatalf("%d users recorded, want 3", n)
	}
	if n := e.limitRejections("max_connections"); n < 1 {
		t.Fatalf("gomsg_limit_rejections_total{limit=max_connections} = %g, want at least 1", n)
	}
	devs[0].Close()
	tu.WaitFor(t, 10*time.Second, func() error {
		d, err := e.tryDial("u3", "web", false)
		if err != nil {
			return err
		}
		d.waitReady(t)
		return nil
	})
}

// One connection carries at most --max-streams-per-connection sessions:
// a grpc-go client waits for a free stream, and the boat records no more.
func TestStreamsPerConnection(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.ClusterConfig) { c.Boat.MaxStreamsPerConnection = 2 })
	conn, err := grpcx.Dial(e.boatAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	open := func(uid string, timeout time.Duration) error {
		token, _ := auth.Mint(secret, uid, "web", time.Hour)
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token), timeout)
		stream, err := msgpb.NewMsgClient(conn).Loop(ctx)
		if err == nil {
			_, err = stream.Recv() // Connected
		}
		if err != nil {
			cancel()
			return err
		}
		t.Cleanup(cancel)
		return nil
	}
	for i := range 2 {
		if err := open(fmt.Sprintf("u%d", i), 10*time.Second); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	if err := open("u2", time.Second); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("3rd stream on one connection: %v, want it to wait (DeadlineExceeded)", err)
	}
	if n := e.sessionKeys(); n != 2 {
		t.Fatalf("%d users recorded, want 2", n)
	}
}

// A connect that does not finish within --connect-timeout (here: an auth
// service slower than it) fails with DeadlineExceeded naming the flag and
// leaves nothing recorded, on the boat or in Redis.
func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	addr, _ := startStuckAuth(t)
	e := start(t, func(c *app.ClusterConfig) {
		c.Station.AuthAddr = addr
		c.Station.Station.AuthTimeout = time.Minute
		c.Boat.ConnectTimeout = 500 * time.Millisecond
	})
	begin := time.Now()
	_, err := e.tryDial("ann", "ios", false)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "--connect-timeout") {
		t.Fatalf("connect with a slow auth service: %v, want DeadlineExceeded naming --connect-timeout", err)
	}
	if took := time.Since(begin); took > 3*time.Second {
		t.Fatalf("connect took %s to fail, want about 500ms", took)
	}
	if n := e.gomsg.Boat.Sessions(); n != 0 {
		t.Fatalf("boat holds %d sessions after a timed-out connect", n)
	}
	if keys, _ := e.rdb.Keys(context.Background(), "*").Result(); len(keys) != 0 {
		t.Fatalf("a timed-out connect left Redis keys %v", keys)
	}
	if n := e.limitRejections("connect_timeout"); n != 1 {
		t.Fatalf("gomsg_limit_rejections_total{limit=connect_timeout} = %g, want 1", n)
	}
}

// Connections that never open a stream do not stay: one that sends nothing
// is closed after --connect-timeout (its handshake), one that completes the
// HTTP/2 handshake but opens no stream after twice it (and grpc-go's 5s
// GOAWAY grace).
func TestIdleConnectionsClosed(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.ClusterConfig) { c.Boat.ConnectTimeout = 500 * time.Millisecond })
	for name, hello := range map[string]string{
		"silent":    "",
		"no stream": "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00",
	} {
		c, err := net.Dial("tcp", e.boatAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		begin := time.Now()
		if _, err := io.WriteString(c, hello); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, c)
		if err != nil {
			t.Fatalf("%s connection: %v after %s, want it closed by the boat", name, err, time.Since(begin))
		}
		// grpc-go gives a client that does not answer its GOAWAY ping 5s more.
		if took := time.Since(begin); took > 9*time.Second {
			t.Fatalf("%s connection closed after %s", name, took)
		}
		t.Logf("%s connection closed after %s", name, time.Since(begin))
	}
}

// Clients that go away while station records their session leave no
// session behind: the boat awaits station's answer and undoes it.
func TestAbortedConnectsLeaveNoGhosts(t *testing.T) {
	t.Parallel()
	e := start(t)
	const workers, each = 20, 15
	var wg sync.WaitGroup
	var uids []string
	for w := range workers {
		for i := range each {
			uids = append(uids, fmt.Sprintf("g%d-%d", w, i))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := grpcx.Dial(e.boatAddr)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			for i := range each {
				token, _ := auth.Mint(secret, fmt.Sprintf("g%d-%d", w, i), "web", time.Hour)
				ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token))
				if _, err := msgpb.NewMsgClient(conn).Loop(ctx); err == nil {
					// Give up somewhere within station's Connect.
					time.Sleep(time.Duration((w*each+i)%12) * time.Millisecond)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	aborted := testutil.ToFloat64(e.gomsg.Metrics.Connects.WithLabelValues("aborted"))
	ok := testutil.ToFloat64(e.gomsg.Metrics.Connects.WithLabelValues("ok"))
	t.Logf("%d connects aborted: %g answered after the client left, %g connected before it left", workers*each, aborted, ok)
	tu.WaitFor(t, 15*time.Second, func() error {
		if n := e.gomsg.Boat.Sessions(); n != 0 {
			return fmt.Errorf("boat holds %d sessions", n)
		}
		resp, err := e.push.Online(context.Background(), &pushpb.OnlineRequest{Uids: uids})
		if err != nil {
			return err
		}
		var ghosts []string
		for _, u := range resp.GetUsers() {
			for _, s := range u.GetSessions() {
				ghosts = append(ghosts, u.GetUid()+"/"+s.GetSid())
			}
		}
		if len(ghosts) > 0 {
			return fmt.Errorf("%d sessions reported online with no client: %v", len(ghosts), ghosts)
		}
		return nil
	})
}

// slowAuth answers after a fixed delay.
type slowAuth struct {
	authpb.UnimplementedAuthServer
	delay time.Duration
}

func (a slowAuth) Authenticate(ctx context.Context, r *authpb.AuthenticateRequest) (*authpb.AuthenticateResponse, error) {
	select {
	case <-time.After(a.delay):
		return &authpb.AuthenticateResponse{Uid: r.GetToken(), Platform: "web"}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// slowReplies is a TCP proxy to addr that holds every byte the server sends
// for delay (a slow link back to the caller).
func slowReplies(t *testing.T, addr string, delay time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if err != nil {
						return
					}
					chunk := append([]byte(nil), buf[:n]...)
					time.Sleep(delay)
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// Station finishes a Connect early enough before the caller's deadline for
// its answer to travel back: a caller (a boat at --connect-timeout) whose
// answer would arrive too late gets an error and nothing is recorded,
// rather than a session recorded that the caller never learns of. Here
// authentication takes 200ms, answers travel 30ms, and the caller waits
// 215ms: an answer sent at ~205ms would arrive after the caller gave up.
func TestStationConnectFinishesBeforeDeadline(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	authpb.RegisterAuthServer(srv, slowAuth{delay: 200 * time.Millisecond})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	e := start(t, withServices("station"), func(c *app.ClusterConfig) { c.Station.AuthAddr = l.Addr().String() })
	conn, err := grpcx.Dial(slowReplies(t, e.gomsg.Station.InternalAddr(), 30*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st := stationpb.NewStationClient(auth.WithBearer(conn, internalToken))
	// The connection is up before the measured calls.
	if _, err := st.ResetBoat(context.Background(), &stationpb.ResetBoatRequest{BoatId: "boat-x"}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 215*time.Millisecond)
		_, err := st.Connect(ctx, &stationpb.ConnectRequest{Token: fmt.Sprintf("d%d", i), BoatId: "boat-x", Sid: fmt.Sprint(1000 + i)})
		cancel()
		if err == nil {
			t.Fatalf("connect %d answered within 215ms; the test's timing does not hold", i)
		}
	}
	tu.WaitFor(t, 5*time.Second, func() error {
		if n := e.sessionKeys(); n != 0 {
			return fmt.Errorf("%d users recorded after connects that failed", n)
		}
		return nil
	})
}

// A session recorded for a boat that the boat does not hold (the record of
// a connect whose answer never reached it) is reported ended by the boat's
// sweep; the sessions it holds stay.
func TestGhostSweep(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.ClusterConfig) { c.Boat.GhostSweep = 200 * time.Millisecond })
	alive := e.connect("alive", "web", false)
	ctx := context.Background()
	// What station's Connect writes, for a sid boat-1 never held.
	e.rdb.HSet(ctx, e.keys.Sessions("ghost"), "12345", "web-boat-1")
	e.rdb.SAdd(ctx, e.keys.BoatSessions("boat-1"), "ghost 12345")
	tu.WaitFor(t, 10*time.Second, func() error {
		resp, err := e.push.Online(ctx, &pushpb.OnlineRequest{Uids: []string{"ghost", "alive"}})
		if err != nil {
			return err
		}
		if n := len(resp.GetUsers()[0].GetSessions()); n != 0 {
			return fmt.Errorf("ghost still has %d sessions", n)
		}
		if n := len(resp.GetUsers()[1].GetSessions()); n != 1 {
			return fmt.Errorf("alive has %d sessions, want its 1", n)
		}
		return nil
	})
	if n := e.rdb.SCard(ctx, e.keys.BoatSessions("boat-1")).Val(); n != 1 {
		t.Fatalf("boat index holds %d, want alive's 1", n)
	}
	_ = alive
}

// A client that ignores the boat's advertised header-list limit and sends
// an 8 MB authorization header anyway (raw HTTP/2 frames) is refused by
// the transport: the boat's handler never runs and station is never asked.
func TestGRPCHeaderLimitRawHTTP2(t *testing.T) {
	t.Parallel()
	e := start(t)
	c, err := net.Dial("tcp", e.boatAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/gomsg.msg.Msg/Loop"},
		{":authority", "boat"}, {"content-type", "application/grpc"}, {"te", "trailers"},
		{"authorization", "Bearer " + strings.Repeat("a", 8<<20)}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	go func() {
		// The server may stop reading once it has refused: write errors
		// are expected.
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			return
		}
		fr := http2.NewFramer(c, nil)
		if fr.WriteSettings() != nil {
			return
		}
		b := block.Bytes()
		const chunk = 16 << 10
		if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:chunk]}) != nil {
			return
		}
		for b = b[chunk:]; len(b) > 0; {
			n := min(chunk, len(b))
			if fr.WriteContinuation(1, n == len(b), b[:n]) != nil {
				return
			}
			b = b[n:]
		}
	}()
	fr := http2.NewFramer(io.Discard, c)
	fr.MaxHeaderListSize = 1 << 20
	refused := ""
	for refused == "" {
		f, err := fr.ReadFrame()
		if err != nil {
			refused = "connection closed: " + err.Error()
			break
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			refused = "RST_STREAM " + f.ErrCode.String()
		case *http2.GoAwayFrame:
			refused = "GOAWAY " + f.ErrCode.String()
		case *http2.MetaHeadersFrame:
			refused = fmt.Sprintf("response headers %v", f.Fields)
		}
	}
	t.Logf("8 MB header: %s", refused)
	connects := 0.0
	for _, r := range []string{"ok", "unauthenticated", "invalid", "unavailable", "limited", "error"} {
		connects += testutil.ToFloat64(e.gomsg.Metrics.Connects.WithLabelValues(r))
	}
	if connects != 0 || e.gomsg.Boat.Sessions() != 0 {
		t.Fatalf("boat ran its handler (%g connects counted) for an 8 MB header", connects)
	}
}

// Sessions recorded on boats that are gone do not lock a user out at the
// caps: a connect at a cap first drops them.
func TestSessionCapsIgnoreDeadBoats(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *app.ClusterConfig) {
		c.Station.Station.MaxSessionsPerPlatform = 2
		c.Station.Station.KickPolicy = station.KeepAll
	})
	ctx := context.Background()
	for _, sid := range []string{"1", "2"} {
		e.rdb.HSet(ctx, e.keys.Sessions("zed"), sid, "ios-gone-boat")
		e.rdb.SAdd(ctx, e.keys.BoatSessions("gone-boat"), "zed "+sid)
	}
	e.connect("zed", "ios", false)
	vals := e.rdb.HVals(ctx, e.keys.Sessions("zed")).Val()
	if len(vals) != 1 || vals[0] != "ios-boat-1" {
		t.Fatalf("zed's sessions %v, want only the new one on boat-1", vals)
	}
	// Live sessions still count.
	e.connect("zed", "ios", false)
	if _, err := e.tryDial("zed", "ios", false); !strings.Contains(fmt.Sprint(err), "--max-sessions-per-platform") {
		t.Fatalf("3rd live session: %v, want refused by --max-sessions-per-platform", err)
	}
}

// postKeyed posts a JSON body with the test API key; a reader of unknown
// length goes chunked.
func postKeyed(url string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	return http.DefaultClient.Do(req)
}
