package app_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/carrier"
	"github.com/gomsg/gomsg/internal/client"
	"github.com/gomsg/gomsg/internal/embedded"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/internal/station"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const (
	consoleSecret = "console-test-secret-at-least-32-bytes-long"
	// The keys: the admin's has the console and every action scope, the
	// reader's only console, the backend's only push.
	adminKey   = "console-test-admin-key"
	readerKey  = "console-test-reader-key"
	backendKey = "console-test-backend-key"
	// deviceToken is a registered device token: no answer may hold it.
	deviceToken = "apns-device-token-0123456789abcdef-secret"
	// secretBody is a pushed message's text: only the dlq scope shows it.
	secretBody = "the-body-only-dlq-may-see"
	// bodyLimit is the console's --http-max-body-bytes in this test.
	bodyLimit = 16 << 10
)

// consoleEnv is a cluster of two boats, station (with the console) and
// carrier on a real redis-server, an embedded etcd and the in-process Kafka
// broker.
type consoleEnv struct {
	t       *testing.T
	cl      *app.Cluster
	base    string // the console's URL
	apiBase string // the Push API's HTTP/JSON URL
	push    pushpb.PushClient
	boats   map[string]string // boat id → client address
	etcd    string
	redis   *testutil.Redis
	logs    *observer.ObservedLogs
	kafka   *embedded.Kafka

	mu      sync.Mutex
	answers []string // every console answer body, for the leak check
}

// startConsoleCluster starts the cluster; services, when given, replace
// boat, station and carrier in the first process.
func startConsoleCluster(t *testing.T, services ...string) *consoleEnv {
	t.Helper()
	if len(services) == 0 {
		services = []string{"boat", "station", "carrier"}
	}
	e := &consoleEnv{t: t, etcd: testutil.StartEtcd(t), redis: testutil.StartRedis(t), boats: map[string]string{}}
	broker := testutil.StartKafkaBroker(t, 2, "gomsg.tasks", "gomsg.receipts")
	e.kafka = broker
	plat := platform.MustParse("ios:offline=1h/100:notify=log,web:offline=1h/100")
	keys := strings.Join([]string{
		apikey.Line(adminKey, []apikey.Scope{apikey.Console, apikey.Push, apikey.Kickout, apikey.DLQ, apikey.Broadcast, apikey.Delivery}, "admin"),
		apikey.Line(readerKey, []apikey.Scope{apikey.Console}, "reader"),
		apikey.Line(backendKey, []apikey.Scope{apikey.Push, apikey.Devices}, "backend"),
	}, "\n")
	cfg := app.ClusterConfig{
		Services: services,
		Backends: app.Backends{KafkaBrokers: []string{broker.Addr}, EtcdEndpoints: []string{e.etcd}, RedisAddrs: []string{e.redis.Addr},
			TaskTopic: "gomsg.tasks", TaskPartitions: 2, CreateTopics: true, ReceiptsTopic: "gomsg.receipts"},
		Internal: app.InternalAuth{Token: "console-internal-token-0123456789"},
		Station: app.StationOptions{JWTSecret: consoleSecret, APIKeys: keys, Station: station.Config{
			PushGRPCAddr: "127.0.0.1:0", PushHTTPAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0", ConsoleAddr: "127.0.0.1:0",
			Platforms: plat, HTTP: station.HTTPLimits{MaxBodyBytes: bodyLimit}}},
		Boat: boat.Config{ID: "boat-1", ClientAddr: "127.0.0.1:0", InternalAddr: "127.0.0.1:0"},
		Carrier: carrier.Config{Platforms: plat, AckWait: 2 * time.Second, CallTimeout: 500 * time.Millisecond,
			MaxRetries: 1, RetryBackoffMin: 50 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond},
	}
	core, obs := observer.New(zapcore.InfoLevel)
	e.logs = obs
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	cl, err := app.StartCluster(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() { _ = cl.Stop() })
	e.cl = cl
	e.boats["boat-1"] = cl.Boat.ClientAddr()
	two := cfg
	two.Services = []string{"boat"}
	two.StationAddr = cl.Station.InternalAddr()
	two.Boat.ID = "boat-2"
	cl2, err := app.StartCluster(context.Background(), two, zaptest.NewLogger(t).Named("boat-2"))
	if err != nil {
		t.Fatalf("start boat-2: %v", err)
	}
	t.Cleanup(func() { _ = cl2.Stop() })
	e.boats["boat-2"] = cl2.Boat.ClientAddr()
	e.base = "http://" + cl.Station.ConsoleAddr()
	e.apiBase = "http://" + cl.Station.PushHTTPAddr()
	conn, err := grpcx.Dial(cl.Station.PushAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.push = pushpb.NewPushClient(auth.WithBearer(conn, backendKey))
	return e
}

// do calls the console (or, with base, another server) and records the
// answer for the leak check.
func (e *consoleEnv) do(method, url, key, contentType, body string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(url, e.base) {
		e.mu.Lock()
		e.answers = append(e.answers, fmt.Sprintf("%s %s: %v %s", method, strings.SplitN(url, "?", 2)[0], resp.Header, b))
		e.mu.Unlock()
	}
	return resp, string(b)
}

func (e *consoleEnv) get(path, key string) (*http.Response, string) {
	return e.do(http.MethodGet, e.base+path, key, "", "")
}

func (e *consoleEnv) post(path, key, body string) (*http.Response, string) {
	return e.do(http.MethodPost, e.base+path, key, "application/json", body)
}

// wantStatus fails unless resp has code and its JSON error names text.
func wantStatus(t *testing.T, what string, resp *http.Response, body string, code int, status, text string) {
	t.Helper()
	if resp.StatusCode != code {
		t.Fatalf("%s: HTTP %d %s, want %d", what, resp.StatusCode, body, code)
	}
	if status == "" {
		return
	}
	var e struct{ Status, Message string }
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Status != status || !strings.Contains(e.Message, text) {
		t.Fatalf("%s: %s, want status %s and a message naming %q", what, body, status, text)
	}
}

// connect opens a session of uid on a boat, ACKing what it gets.
func (e *consoleEnv) connect(boatID, uid, platform string, rooms ...string) *client.Device {
	e.t.Helper()
	tok, err := auth.Mint(consoleSecret, uid, platform, time.Hour, rooms...)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := client.Connect(ctx, e.boats[boatID], tok)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(d.Close)
	for _, r := range rooms {
		if err := d.JoinRoom(r); err != nil {
			e.t.Fatal(err)
		}
	}
	go func() {
		for {
			p, err := d.Recv()
			if err != nil {
				return
			}
			if m := p.GetMessages(); m != nil {
				var seqs []int64
				for _, msg := range m.GetMsgs() {
					seqs = append(seqs, msg.GetSeq())
				}
				_ = d.Ack(seqs...)
			}
		}
	}()
	return d
}

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}

type clusterAnswer struct {
	Boats []struct {
		ID       string `json:"id"`
		Addr     string `json:"addr"`
		Sessions int64  `json:"sessions"`
		Rooms    int64  `json:"rooms"`
		LeaseTTL int64  `json:"leaseTtlS"`
	} `json:"boats"`
	Members []struct {
		Service string `json:"service"`
	} `json:"members"`
	DLQ struct {
		Available bool  `json:"available"`
		Records   int64 `json:"records"`
		OldestMs  int64 `json:"oldestMs"`
	} `json:"dlq"`
	Errors []string `json:"errors"`
}

// The console's endpoints on a running cluster: who may call what, what
// the pages show, that actions answer as the Push API does, and that no
// answer holds a device token or a key.
func TestConsoleEndpoints(t *testing.T) {
	e := startConsoleCluster(t)
	ctx := context.Background()

	t.Run("page and headers", func(t *testing.T) {
		resp, body := e.get("/", "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<script src="console.js"`) {
			t.Fatalf("GET /: HTTP %d %.200s", resp.StatusCode, body)
		}
		for _, path := range []string{"/", "/console.js", "/v1/console/cluster"} {
			key := ""
			if strings.HasPrefix(path, "/v1/") {
				key = readerKey
			}
			resp, _ := e.get(path, key)
			h := resp.Header
			if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("%s: Content-Security-Policy %q", path, csp)
			}
			if h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
				t.Errorf("%s: X-Frame-Options %q, X-Content-Type-Options %q, Referrer-Policy %q", path,
					h.Get("X-Frame-Options"), h.Get("X-Content-Type-Options"), h.Get("Referrer-Policy"))
			}
			if strings.HasPrefix(path, "/v1/") && h.Get("Cache-Control") != "no-store" {
				t.Errorf("%s: Cache-Control %q, want no-store", path, h.Get("Cache-Control"))
			}
			if h.Get("Set-Cookie") != "" || h.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("%s: Set-Cookie %q, Access-Control-Allow-Origin %q: want neither", path, h.Get("Set-Cookie"), h.Get("Access-Control-Allow-Origin"))
			}
		}
	})

	t.Run("401 without a key, 403 without the scope, 404 outside the console", func(t *testing.T) {
		resp, body := e.get("/v1/console/cluster", "")
		wantStatus(t, "no key", resp, body, http.StatusUnauthorized, "UNAUTHENTICATED", "no API key")
		if resp.Header.Get("WWW-Authenticate") == "" {
			t.Error("401 without WWW-Authenticate")
		}
		// A key in the URL is never read.
		resp, body = e.get("/v1/console/cluster?key="+adminKey+"&api_key="+adminKey, "")
		wantStatus(t, "key in the query", resp, body, http.StatusUnauthorized, "UNAUTHENTICATED", "no API key")
		// Nothing, not even which paths exist, is answered without a key.
		resp, body = e.post("/v1/devices/list", "", `{"uid":"alice"}`)
		wantStatus(t, "an unserved path without a key", resp, body, http.StatusUnauthorized, "UNAUTHENTICATED", "no API key")
		resp, body = e.get("/v1/console/cluster", "not-a-key")
		wantStatus(t, "unknown key", resp, body, http.StatusUnauthorized, "UNAUTHENTICATED", "not valid")
		resp, body = e.get("/v1/console/cluster", backendKey)
		wantStatus(t, "backend key (no console scope)", resp, body, http.StatusForbidden, "PERMISSION_DENIED", `"console"`)
		// The backend key may push through the Push API, not through the console.
		resp, body = e.post("/v1/push", backendKey, `{"uids":["alice"]}`)
		wantStatus(t, "backend key pushing through the console", resp, body, http.StatusForbidden, "PERMISSION_DENIED", `"console"`)
		for path, scope := range map[string]string{"/v1/push": "push", "/v1/kickout": "kickout", "/v1/dlq/list": "dlq",
			"/v1/dlq/show": "dlq", "/v1/dlq/redrive": "dlq", "/v1/broadcast/room": "broadcast"} {
			resp, body := e.post(path, readerKey, `{}`)
			wantStatus(t, "reader key on "+path, resp, body, http.StatusForbidden, "PERMISSION_DENIED", `"`+scope+`"`)
		}
		for _, path := range []string{"/v1/devices/list", "/v1/dlq/purge", "/v1/online", "/v1/broadcast/all", "/v1/devices/register"} {
			resp, body := e.post(path, adminKey, `{"uid":"alice"}`)
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s through the console: HTTP %d %s, want 404", path, resp.StatusCode, body)
			}
		}
		if resp, body := e.get("/openapi.json", adminKey); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /openapi.json through the console: HTTP %d %.100s, want 404", resp.StatusCode, body)
		}
	})

	t.Run("whoami", func(t *testing.T) {
		resp, body := e.get("/v1/console/whoami", readerKey)
		w := decode[struct {
			Name   string
			Scopes []string
		}](t, body)
		if resp.StatusCode != http.StatusOK || w.Name != "reader" || strings.Join(w.Scopes, ",") != "console" {
			t.Fatalf("whoami: HTTP %d %s", resp.StatusCode, body)
		}
	})

	// alice on boat-1, bob on boat-2 twice (ios and web).
	e.connect("boat-1", "alice", "web", "lobby", "news")
	e.connect("boat-2", "bob", "ios")
	e.connect("boat-2", "bob", "web")

	t.Run("cluster shows both boats and their sessions", func(t *testing.T) {
		var c clusterAnswer
		testutil.WaitFor(t, 15*time.Second, func() error {
			_, body := e.get("/v1/console/cluster", readerKey)
			c = decode[clusterAnswer](t, body)
			got, rooms := map[string]int64{}, map[string]int64{}
			for _, b := range c.Boats {
				got[b.ID], rooms[b.ID] = b.Sessions, b.Rooms
			}
			if len(c.Boats) != 2 || got["boat-1"] != 1 || got["boat-2"] != 2 || rooms["boat-1"] != 2 || rooms["boat-2"] != 0 {
				return fmt.Errorf("boats %+v, want boat-1 with 1 session in 2 rooms and boat-2 with 2 in none", c.Boats)
			}
			return nil
		})
		for _, b := range c.Boats {
			if b.Addr == "" || b.LeaseTTL <= 0 {
				t.Errorf("boat %s: address %q, lease %d s left", b.ID, b.Addr, b.LeaseTTL)
			}
		}
		services := map[string]int{}
		for _, m := range c.Members {
			services[m.Service]++
		}
		if services["station"] != 1 || services["boat:boat-1"] != 1 || services["boat:boat-2"] != 1 || len(c.Members) != 3 {
			t.Errorf("members by service %v, want a station and boats boat-1 and boat-2", services)
		}
		if !c.DLQ.Available || c.DLQ.Records != 0 || len(c.Errors) != 0 {
			t.Errorf("dlq %+v, errors %v: want an empty dead-letter list and no errors", c.DLQ, c.Errors)
		}
		// Carrier runs in station's process here: its delivery rates are
		// shown, and the lag of its groups is read.
		_, body := e.get("/v1/console/cluster", readerKey)
		f := decode[figuresAnswer](t, body)
		if len(f.Rates.Series) != 9 || f.Rates.Series[4].Name != "deliveries acked" || f.Rates.Series[8].Name != "deliveries dead-lettered" {
			t.Errorf("rates %+v, want station's 4 series and carrier's 5", f.Rates.Series)
		}
		if !f.Lag.Available || len(f.Lag.Topics) != 4 || f.Lag.Topics[0].Group != "gomsg-carrier" || f.Lag.Topics[0].Error != "" {
			t.Errorf("lag %+v, want the 4 groups of carrier, read without error", f.Lag)
		}
	})

	t.Run("user shows sessions, backlog and devices with hashed tokens", func(t *testing.T) {
		if _, err := e.push.RegisterDevice(ctx, &pushpb.RegisterDeviceRequest{Device: &pushpb.Device{Uid: "bob", Platform: "ios", Token: deviceToken}}); err != nil {
			t.Fatal(err)
		}
		// Stored for carol, who is offline.
		if _, err := e.push.Push(ctx, &pushpb.PushRequest{Uids: []string{"carol"}, MsgOptions: uint32(msgpb.Option_NEED_OFFLINE),
			MsgBodies: []*anypb.Any{textBody(secretBody)}}); err != nil {
			t.Fatal(err)
		}
		resp, body := e.get("/v1/console/user?uid=bob", readerKey)
		u := decode[struct {
			Sessions []struct {
				Sid, Platform string
				BoatID        string `json:"boatId"`
				SinceMs       int64  `json:"sinceMs"`
			}
			Devices []struct {
				Platform    string
				TokenSHA256 string `json:"tokenSha256"`
			}
		}](t, body)
		if resp.StatusCode != http.StatusOK || len(u.Sessions) != 2 {
			t.Fatalf("user bob: HTTP %d %s, want 2 sessions", resp.StatusCode, body)
		}
		for _, s := range u.Sessions {
			if s.BoatID != "boat-2" || s.Sid == "" || time.Since(time.UnixMilli(s.SinceMs)) > time.Minute || time.Since(time.UnixMilli(s.SinceMs)) < 0 {
				t.Errorf("bob's session %+v: want boat-2, a sid and a connect time within the last minute", s)
			}
		}
		sum := sha256.Sum256([]byte(deviceToken))
		if len(u.Devices) != 1 || u.Devices[0].Platform != "ios" || u.Devices[0].TokenSHA256 != hex.EncodeToString(sum[:8]) {
			t.Fatalf("bob's devices %+v, want the ios one as the start of its token's SHA-256", u.Devices)
		}
		testutil.WaitFor(t, 15*time.Second, func() error {
			_, body := e.get("/v1/console/user?uid=carol", readerKey)
			c := decode[struct {
				Offline []struct {
					Platform string
					Count    int64
					Newest   []string
				}
			}](t, body)
			for _, b := range c.Offline {
				if b.Platform == "ios" && b.Count == 1 && len(b.Newest) == 1 {
					return nil
				}
			}
			return fmt.Errorf("carol's backlog %s, want 1 on ios", body)
		})
	})

	t.Run("bad input gets the API's errors", func(t *testing.T) {
		resp, body := e.get("/v1/console/user?uid=", readerKey)
		wantStatus(t, "user without uid", resp, body, http.StatusBadRequest, "INVALID_ARGUMENT", "uid")
		for _, c := range []struct{ path, body, field string }{
			{"/v1/push", `{"uids":[]}`, "uids"},
			{"/v1/push", `{"uids":["alice"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"x"}],"platformConfig":{"platforms":["nope"]}}`, "platform"},
			{"/v1/kickout", `{"uid":""}`, "uid"},
			{"/v1/delivery", `{"seq":"0"}`, "seq"},
			{"/v1/dlq/show", `{}`, "seq"},
			{"/v1/push", `{"uids":["alice"],"msgOption":1}`, "msgOption"},
		} {
			resp, body := e.post(c.path, adminKey, c.body)
			wantStatus(t, "console "+c.path+" "+c.body, resp, body, http.StatusBadRequest, "INVALID_ARGUMENT", c.field)
			apiResp, apiBody := e.do(http.MethodPost, e.apiBase+c.path, adminKey, "application/json", c.body)
			if apiResp.StatusCode != resp.StatusCode || apiBody != body {
				t.Errorf("%s %s: console answered %d %s, the Push API %d %s: want the same", c.path, c.body, resp.StatusCode, body, apiResp.StatusCode, apiBody)
			}
		}
	})

	t.Run("a form post and a large body are refused", func(t *testing.T) {
		// What a cross-site form could send: no Authorization header, and
		// not JSON either.
		resp, body := e.do(http.MethodPost, e.base+"/v1/push", "", "application/x-www-form-urlencoded", "uids=alice")
		wantStatus(t, "form post", resp, body, http.StatusUnauthorized, "UNAUTHENTICATED", "")
		resp, body = e.do(http.MethodPost, e.base+"/v1/push", adminKey, "text/plain",
			`{"uids":["alice"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"x"}]}`)
		wantStatus(t, "text/plain body", resp, body, http.StatusUnsupportedMediaType, "INVALID_ARGUMENT", "not JSON")
		big := `{"uids":["alice"],"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"` + strings.Repeat("x", bodyLimit) + `"}]}`
		resp, body = e.post("/v1/push", adminKey, big)
		wantStatus(t, "body past --http-max-body-bytes", resp, body, http.StatusRequestEntityTooLarge, "RESOURCE_EXHAUSTED", "http-max-body-bytes")
	})

	t.Run("push, delivery and kickout", func(t *testing.T) {
		resp, body := e.post("/v1/push", adminKey, `{"uids":["alice"],"platformConfig":{"platforms":["web"]},"msgOptions":9,`+
			`"msgBodies":[{"@type":"type.googleapis.com/google.protobuf.StringValue","value":"hello alice"}]}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("push: HTTP %d %s", resp.StatusCode, body)
		}
		seqs := decode[struct{ Seqs []string }](t, body).Seqs
		if len(seqs) != 1 {
			t.Fatalf("push: %s, want one seq", body)
		}
		testutil.WaitFor(t, 15*time.Second, func() error {
			resp, body := e.post("/v1/delivery", readerKey, `{"seq":"`+seqs[0]+`"}`)
			d := decode[struct {
				Targets []struct{ UID, Platform, State string }
			}](t, body)
			if resp.StatusCode != http.StatusOK || len(d.Targets) != 1 || d.Targets[0].State != "DELIVERED" {
				return fmt.Errorf("delivery of %s: HTTP %d %s, want alice/web DELIVERED", seqs[0], resp.StatusCode, body)
			}
			return nil
		})
		if strings.Contains(body, "hello alice") {
			t.Errorf("a delivery answer holds the body: %s", body)
		}
		_, body = e.get("/v1/console/user?uid=bob", readerKey)
		sid := decode[struct {
			Sessions []struct{ Sid, Platform string }
		}](t, body).Sessions[0].Sid
		resp, body = e.post("/v1/kickout", adminKey, `{"uid":"bob","sid":"`+sid+`"}`)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, sid) {
			t.Fatalf("kickout: HTTP %d %s", resp.StatusCode, body)
		}
		testutil.WaitFor(t, 15*time.Second, func() error {
			_, body := e.get("/v1/console/user?uid=bob", readerKey)
			if strings.Contains(body, `"`+sid+`"`) {
				return fmt.Errorf("bob still has session %s: %s", sid, body)
			}
			return nil
		})
	})

	t.Run("dead letters: list, show, redrive", func(t *testing.T) {
		failOn(t, e, "dave")
		if _, err := e.push.Push(ctx, &pushpb.PushRequest{Uids: []string{"dave"}, PlatformConfig: &pushpb.PlatformConfig{Platforms: []string{"ios"}},
			MsgBodies: []*anypb.Any{textBody(secretBody)}}); err != nil {
			t.Fatal(err)
		}
		var seq string
		testutil.WaitFor(t, 30*time.Second, func() error {
			resp, body := e.post("/v1/dlq/list", adminKey, `{"uid":"dave"}`)
			l := decode[struct {
				Records []struct{ Seq string }
			}](t, body)
			if resp.StatusCode != http.StatusOK || len(l.Records) != 1 {
				return fmt.Errorf("dlq list: HTTP %d %s, want dave's one record", resp.StatusCode, body)
			}
			seq = l.Records[0].Seq
			return nil
		})
		resp, body := e.post("/v1/dlq/show", adminKey, `{"seq":"`+seq+`"}`)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, secretBody) {
			t.Fatalf("dlq show: HTTP %d %s, want the record with its body", resp.StatusCode, body)
		}
		_, body = e.get("/v1/console/cluster", readerKey)
		if c := decode[clusterAnswer](t, body); c.DLQ.Records != 1 || time.Since(time.UnixMilli(c.DLQ.OldestMs)) > time.Minute {
			t.Errorf("cluster dlq %+v, want 1 record that died within the last minute", c.DLQ)
		}
		resp, body = e.post("/v1/dlq/redrive", readerKey, `{"seq":"`+seq+`"}`)
		wantStatus(t, "redrive with the reader key", resp, body, http.StatusForbidden, "PERMISSION_DENIED", "dlq")
		resp, body = e.post("/v1/dlq/redrive", adminKey, `{"seq":"`+seq+`"}`)
		r := decode[struct {
			Redriven []struct{ Seq string }
		}](t, body)
		if resp.StatusCode != http.StatusOK || len(r.Redriven) != 1 || r.Redriven[0].Seq != seq {
			t.Fatalf("redrive: HTTP %d %s, want %s redriven", resp.StatusCode, body, seq)
		}
	})

	t.Run("every action is logged with the key's name", func(t *testing.T) {
		want := map[string]int{"/v1/push": http.StatusOK, "/v1/kickout": http.StatusOK, "/v1/dlq/show": http.StatusOK, "/v1/dlq/redrive": http.StatusOK}
		got := map[string]bool{}
		for _, en := range e.logs.FilterMessage("console action").All() {
			f := en.ContextMap()
			if f["key"] == "admin" && f["status"] == int64(want[f["action"].(string)]) {
				got[f["action"].(string)] = true
			}
		}
		for a := range want {
			if !got[a] {
				t.Errorf("no console action line for %s with key admin and status %d", a, want[a])
			}
		}
	})

	t.Run("no token, key or body where the scope does not show it", func(t *testing.T) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if len(e.answers) < 30 {
			t.Fatalf("only %d answers recorded", len(e.answers))
		}
		for _, a := range e.answers {
			for _, secret := range []string{deviceToken, adminKey, readerKey, backendKey} {
				if strings.Contains(a, secret) {
					t.Errorf("an answer holds %q: %.300s", secret, a)
				}
			}
			if strings.Contains(a, secretBody) && !strings.Contains(a, "/v1/dlq/show") {
				t.Errorf("an answer outside dlq show holds a message body: %.300s", a)
			}
		}
	})
}

func textBody(s string) *anypb.Any {
	a, err := anypb.New(wrapperspb.String(s))
	if err != nil {
		panic(err)
	}
	return a
}

// failOn gives uid an ios session on a boat that is registered but never
// answers, so every delivery to uid's ios fails.
func failOn(t *testing.T, e *consoleEnv, uid string) {
	t.Helper()
	ctx := context.Background()
	if _, err := testutil.EtcdClient(t, e.etcd).Put(ctx, "/gomsg/boats/dead-boat", fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))); err != nil {
		t.Fatal(err)
	}
	rdb := e.redis.Client(t)
	if err := rdb.HSet(ctx, rkeys.Of(rdb).Sessions(uid), "1", "ios-dead-boat").Err(); err != nil {
		t.Fatal(err)
	}
}
