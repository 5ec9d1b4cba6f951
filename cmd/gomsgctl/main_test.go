package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/config"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// ctl runs gomsgctl in-process and returns its exit code and output.
func ctl(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-h"}, {"--help"}, {"help"},
		{"listen", "-h"}, {"push", "-h"}, {"push", "--help"}, {"online", "-h"}, {"version", "-h"},
		{"broadcast", "-h"}, {"rooms", "-h"},
		{"device", "-h"}, {"device", "--help"}, {"device", "help"},
		{"device", "register", "-h"}, {"device", "unregister", "-h"}, {"device", "list", "-h"},
	} {
		code, stdout, stderr := ctl(t, "", args...)
		if code != 0 {
			t.Errorf("gomsgctl %s: exit %d, want 0\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
		if !strings.Contains(stdout+stderr, "Usage") {
			t.Errorf("gomsgctl %s printed no usage:\n%s%s", strings.Join(args, " "), stdout, stderr)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"version", "--version"} {
		code, stdout, stderr := ctl(t, "", cmd)
		if code != 0 || !strings.HasPrefix(stdout, "gomsgctl ") || !strings.Contains(stdout, runtime.Version()) {
			t.Errorf("gomsgctl %s: exit %d, stdout %q, stderr %q; want exit 0 and \"gomsgctl … %s …\"",
				cmd, code, stdout, stderr, runtime.Version())
		}
	}
}

// TestUsageErrors: mistakes on the command line exit 2 before anything is
// dialled, with a message naming what is wrong.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "--uid", "alice", "--ack", "hello", "--offline"}, `option "--offline" after the message text "hello"`},
		{[]string{"push", "--uid", "alice", "hello", "world", "-ack"}, `option "-ack" after the message text "hello"`},
		{[]string{"push", "--uid", "alice", "hello", "--no-such-flag=1"}, `option "--no-such-flag=1" after the message text`},
		{[]string{"push", "--uid", "alice"}, "the message is required"},
		{[]string{"push", "hello"}, "--uid is required"},
		{[]string{"push", "--uid", "alice", "--body-file", "-", "hello"}, "either TEXT or --body-file, not both"},
		{[]string{"push", "--uid", "alice", "--bogus", "hello"}, "unknown flag --bogus"},
		{[]string{"listen", "--uid", "a", "--platform", "ios", "extra"}, `unexpected argument "extra"`},
		{[]string{"listen", "--uid", "a", "--platform", "ios", "--provider", "apns"}, "--provider needs --register-token"},
		{[]string{"online", "--uid", "a", "b"}, `unexpected argument "b"`},
		{[]string{"device", "list", "--uid", "a", "b"}, `unexpected argument "b"`},
		{[]string{"device", "remove"}, `unknown device command "remove"`},
		{[]string{"device"}, "want register, unregister or list"},
		{[]string{"version", "x"}, `unexpected argument "x"`},
		{[]string{"broadcast", "goal"}, "--room or --all is required"},
		{[]string{"broadcast", "--room", "m", "--all", "goal"}, "--all and --room exclude each other"},
		{[]string{"broadcast", "--room", "m", "--platform", "ios", "goal"}, "--platform and --without-platform go with --all"},
		{[]string{"broadcast", "--room", "m"}, "the message TEXT is required"},
		{[]string{"broadcast", "--room", "m", "goal", "--all"}, `option "--all" after the message text "goal"`},
		{[]string{"rooms"}, "--room is required"},
		{[]string{"rooms", "--room", "m", "x"}, `unexpected argument "x"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{nil, "Usage"},
	} {
		code, _, stderr := ctl(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("gomsgctl %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

func bodyText(t *testing.T, req *pushpb.PushRequest) string {
	t.Helper()
	if len(req.GetMsgBodies()) != 1 {
		t.Fatalf("%d bodies, want 1", len(req.GetMsgBodies()))
	}
	var s wrapperspb.StringValue
	if err := req.GetMsgBodies()[0].UnmarshalTo(&s); err != nil {
		t.Fatal(err)
	}
	return s.GetValue()
}

func TestPushRequest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "body.txt")
	fileBody := "line one\nline two --offline\n"
	if err := os.WriteFile(file, []byte(fileBody), 0o600); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("0123456789", 500_000) // 5 MB: far past what a command line holds
	for _, c := range []struct {
		name  string
		args  []string
		stdin string
		text  string
		opts  msgpb.Option
	}{
		{"text", []string{"--uid", "alice", "--ack", "--offline", "hello", "world"}, "", "hello world",
			msgpb.Option_NEED_ACK | msgpb.Option_NEED_OFFLINE},
		{"text after --", []string{"--uid", "alice", "--", "--offline"}, "", "--offline", 0},
		{"text after -- then more", []string{"--uid", "alice", "--", "-1", "degree", "-x"}, "", "-1 degree -x", 0},
		{"body file", []string{"--uid", "alice", "--offline", "--body-file", file}, "", fileBody, msgpb.Option_NEED_OFFLINE},
		{"stdin", []string{"--uid", "alice", "--body-file", "-"}, "from stdin\n", "from stdin\n", 0},
		{"receipts", []string{"--uid", "alice", "--ack", "--receipts", "tracked"}, "", "tracked",
			msgpb.Option_NEED_ACK | msgpb.Option_NEED_RECEIPTS},
		{"stdin 5 MB", []string{"--uid", "alice", "--body-file", "-", "--notify"}, big, big, msgpb.Option_NEED_NOTIFICATION},
		{"empty stdin", []string{"--uid", "alice", "--body-file", "-"}, "", "", 0},
	} {
		var errOut bytes.Buffer
		ep, req, err := pushRequest(c.args, strings.NewReader(c.stdin), &errOut)
		if err != nil {
			t.Errorf("%s: %v\n%s", c.name, err, errOut.String())
			continue
		}
		if ep.addr != "127.0.0.1:7200" {
			t.Errorf("%s: addr %q", c.name, ep.addr)
		}
		if got := bodyText(t, req); got != c.text {
			t.Errorf("%s: body of %d bytes %.40q…, want %d bytes %.40q…", c.name, len(got), got, len(c.text), c.text)
		}
		if req.GetMsgOptions() != uint32(c.opts) {
			t.Errorf("%s: options %b, want %b", c.name, req.GetMsgOptions(), c.opts)
		}
		if len(req.GetUids()) != 1 || req.GetUids()[0] != "alice" {
			t.Errorf("%s: uids %q", c.name, req.GetUids())
		}
	}
}

func TestPushIdempotencyKey(t *testing.T) {
	t.Parallel()
	var errOut bytes.Buffer
	_, req, err := pushRequest([]string{"--uid", "alice", "--idempotency-key", "order-17", "hi"}, strings.NewReader(""), &errOut)
	if err != nil || req.GetIdempotencyKey() != "order-17" {
		t.Fatalf("--idempotency-key order-17: key %q, %v %s", req.GetIdempotencyKey(), err, errOut.String())
	}
	_, req, err = pushRequest([]string{"--uid", "alice", "hi"}, strings.NewReader(""), &errOut)
	if err != nil || req.GetIdempotencyKey() != "" {
		t.Fatalf("without --idempotency-key: key %q, %v", req.GetIdempotencyKey(), err)
	}
}

func TestBodyFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte{0xff, 0xfe, 0x00}, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file, want string
	}{
		{filepath.Join(dir, "missing"), "no such file"},
		{bin, "not UTF-8"},
		{dir, "is a directory"},
	} {
		code, _, stderr := ctl(t, "", "push", "--uid", "alice", "--body-file", c.file)
		if code != 1 || !strings.Contains(stderr, "--body-file "+c.file) || !strings.Contains(stderr, c.want) {
			t.Errorf("--body-file %s: exit %d, stderr %q; want exit 1 naming the file and %q", c.file, code, stderr, c.want)
		}
	}
}

// Services refuse unknown GOMSG_* variables; gomsgctl's own must be on
// config.EnvOnly, or a shell that sets one for gomsgctl breaks a service
// started from it.
func TestEveryFlagVariableIsAllowedBesideServices(t *testing.T) {
	t.Parallel()
	flagLine := regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)
	seen := 0
	for _, args := range [][]string{{"listen", "-h"}, {"push", "-h"}, {"online", "-h"}, {"broadcast", "-h"}, {"rooms", "-h"},
		{"device", "register", "-h"}, {"device", "unregister", "-h"}, {"device", "list", "-h"}} {
		_, stdout, stderr := ctl(t, "", args...)
		for _, m := range flagLine.FindAllStringSubmatch(stdout+stderr, -1) {
			seen++
			if name := config.EnvName(m[1]); !slices.Contains(config.EnvOnly, name) {
				t.Errorf("gomsgctl %s: --%s's variable %s is not in config.EnvOnly", args[0], m[1], name)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("read only %d flags from the usage texts", seen)
	}
}

// A mistyped GOMSG_* variable is refused (exit 2, naming it and the closest
// one) before anything is sent: ignored, it would leave the command on a
// default such as the public dev key. gomsg's own variables are accepted.
func TestMistypedVariableIsRefused(t *testing.T) {
	t.Setenv("GOMSG_API_KYE", "a-real-key")
	code, stdout, stderr := ctl(t, "", "online", "--uid", "alice", "--push-addr", "127.0.0.1:1")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "GOMSG_API_KYE") || !strings.Contains(stderr, "did you mean GOMSG_API_KEY?") {
		t.Fatalf("GOMSG_API_KYE: exit %d, stdout %q, stderr %q; want exit 2 naming it and GOMSG_API_KEY", code, stdout, stderr)
	}
	if n := strings.Count(strings.TrimSpace(stderr), "\n"); n > 0 {
		t.Errorf("stderr has %d lines, want 1:\n%s", n+1, stderr)
	}
	os.Unsetenv("GOMSG_API_KYE")
	t.Setenv("GOMSG_REDIS_ADDRS", "127.0.0.1:6399") // gomsg's, in a shared shell
	t.Setenv("GOMSG_API_KEYS_GRACE", "2m")
	if code, _, stderr := ctl(t, "", "version"); code != 0 {
		t.Fatalf("gomsg's variables set: exit %d, %s", code, stderr)
	}
}

// A mistyped flag is one line naming it, the closest flag and -h, not the
// whole usage.
func TestMistypedFlagIsOneLine(t *testing.T) {
	t.Parallel()
	code, _, stderr := ctl(t, "", "push", "--uid", "alice", "--ofline", "hi")
	if code != 2 || !strings.Contains(stderr, "unknown flag --ofline (did you mean --offline?)") || !strings.Contains(stderr, `gomsgctl push -h`) {
		t.Fatalf("exit %d, stderr %q; want 2 naming --ofline, --offline and -h", code, stderr)
	}
	if strings.Contains(stderr, "Usage") || strings.Count(stderr, "\n") > 2 {
		t.Fatalf("stderr is the usage or more than 2 lines:\n%s", stderr)
	}
}

// listen --timeout that never got a session exits 1 saying so (and why the
// last attempt failed), not 0 as if it had listened.
func TestListenTimeoutWithoutSessionFails(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	code, stdout, stderr := ctl(t, "", "listen", "--addr", addr, "--uid", "alice", "--platform", "web", "--timeout", "1500ms")
	if code != 1 || stdout != "" || !strings.Contains(stderr, "no session within --timeout 1.5s") || !strings.Contains(stderr, "connection refused") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 saying no session was had, and why", code, stdout, stderr)
	}
}

// rooms prints its counts as JSON numbers (protojson would write int64 as
// strings), with protojson's field names.
func TestRoomCountsAreNumbers(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	resp := &pushpb.RoomOnlineResponse{Room: "lobby", Members: 3,
		Boats: []*pushpb.BoatMembers{{BoatId: "b1", Members: 2}, {BoatId: "b2", Members: 1}}, UnreachableBoats: []string{"b3"}}
	if err := printRooms(&b, resp); err != nil {
		t.Fatal(err)
	}
	want := `{"room":"lobby","members":3,"boats":[{"boatId":"b1","members":2},{"boatId":"b2","members":1}],"unreachableBoats":["b3"]}`
	if got := strings.TrimSpace(b.String()); got != want {
		t.Fatalf("rooms prints\n%s\nwant\n%s", got, want)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["members"].(float64); !ok {
		t.Fatalf("members is %T, want a number", m["members"])
	}
}
