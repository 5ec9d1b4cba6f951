// Command gomsgctl is gomsg's example client: `listen` connects as a device,
// prints every message as a JSON line and ACKs it; `push` calls the Push API.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/client"
	"github.com/gomsg/gomsg/internal/apikey"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/buildinfo"
	"github.com/gomsg/gomsg/internal/config"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const usage = `gomsgctl — gomsg's example client

Usage:
  gomsgctl listen --uid U --platform P [--room R …] [--count N] [--timeout D] [--register-token T [--provider X]] [--pull N]
      connect as a device; print each message as a JSON line and ACK it;
      --room joins room R (the signed token allows exactly those rooms) and
      prints its broadcasts too, with "room" set;
      --register-token registers T as this device's notification token
  gomsgctl push --uid U [--uid U2 …] [--platform P …] [--ack] [--offline] [--notify] [--receipts]
               [--title T] [--body-text B] [--sound S] [--badge N] [--collapse-id C]
               [--data k=v …] [--ttl D] [--idempotency-key K]
               (TEXT | --body-file FILE | --body-file -)
      push TEXT, or the contents of FILE or of stdin ("-"), as a
      google.protobuf.StringValue and print the returned seqs; the notification
      flags set what offline phones show (--notify; default body: TEXT).
      --idempotency-key K: a retry with the same K returns the first seqs.
      --receipts: record the message's delivery steps as receipts (station
      refuses it unless --receipts-topic is set).
      Options go before TEXT; a TEXT that starts with "-" goes after --.
  gomsgctl device register|unregister --uid U --platform P --token T [--provider X] [--app-id A]
  gomsgctl device list --uid U
      manage the device tokens mobile notifications go to
  gomsgctl online --uid U [--uid U2 …]
      list the users' sessions
  gomsgctl broadcast (--room R [--room R2 …] | --all [--platform P …]) TEXT
      send TEXT to every member of the rooms, or to everyone online (of the
      platforms); at most once, never stored or notified; prints the seqs
  gomsgctl rooms --room R
      count the sessions in room R, per boat and in total
  gomsgctl status --seq N [--uid U] [--json]
      what became of a pushed message at each target (uid, platform): one
      line per target with each step (accepted, delivered, stored, replayed,
      notified, retried, …) and its time; --json prints the answer as JSON.
      (receipts on: --receipts-topic; kept for carrier's --delivery-retention)
  gomsgctl dlq list [--since D] [--uid U] [--reason R] [--limit N] [--json]
  gomsgctl dlq show --seq N
  gomsgctl dlq redrive (--seq N | --uid U | --since D | --all) [--rate R] [--dry-run]
  gomsgctl dlq purge --before D --yes
      act on carrier's dead-letter topic (a key with the dlq scope): list the
      waiting tasks newest first, show one in full (by its seq or a
      message's), put them back on the task topic at most R a second
      (printing each), purge what died before D (D: a duration before now
      such as 2h, an RFC 3339 time or a date)
  gomsgctl version
      print the version, VCS commit and Go version of this build

push, broadcast, rooms, online, status, device and dlq send --api-key (GOMSG_API_KEY; default: gomsg dev's public key).
"gomsgctl <command> -h" lists a command's flags. Flags also come from GOMSG_*
environment variables (--push-addr: GOMSG_PUSH_ADDR).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is gomsgctl with its arguments (without the program name) and streams;
// it returns the exit code: 0 done (or help asked for), 1 failed, 2 bad usage.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	// A mistyped GOMSG_* variable would be ignored without a word, and a
	// command would then fall back to a default — the public dev key, a
	// local address: refuse it, as gomsg's services do. gomsg's own
	// variables are accepted, since one shell often serves both.
	if cmd != "help" && cmd != "-h" && cmd != "-help" && cmd != "--help" {
		if err := config.CheckEnv(nil, config.ServiceEnv...); err != nil {
			fmt.Fprintf(stderr, "gomsgctl %s: %v\n", cmd, err)
			return 2
		}
	}
	var err error
	switch cmd {
	case "listen":
		err = listen(ctx, rest, stdout, stderr)
	case "push":
		err = push(ctx, rest, stdin, stdout, stderr)
	case "online":
		err = online(ctx, rest, stdout, stderr)
	case "broadcast":
		err = broadcast(ctx, rest, stdout, stderr)
	case "rooms":
		err = rooms(ctx, rest, stdout, stderr)
	case "status":
		err = statusCmd(ctx, rest, stdout, stderr)
	case "device":
		err = deviceCmd(ctx, rest, stdout, stderr)
	case "dlq":
		err = dlqCmd(ctx, rest, stdout, stderr)
	case "version", "-version", "--version":
		err = versionCmd(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "gomsgctl: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gomsgctl %s: %v\n(run \"gomsgctl %s -h\" for its flags)\n", cmd, err, cmd)
		return 2
	default:
		fmt.Fprintf(stderr, "gomsgctl %s: %v\n", cmd, err)
		if h := wrongPortHint(err); h != "" {
			fmt.Fprintf(stderr, "gomsgctl %s: %s\n", cmd, h)
		}
		return 1
	}
}

// wrongPortHint says what an error means when it is what another of gomsg's
// ports answers a Push API call with: a wrong --push-addr otherwise shows
// up as an unknown service, an internal token refused or an HTTP/2 framing
// error, none of which names the address as the mistake.
func wrongPortHint(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	const want = "--push-addr (GOMSG_PUSH_ADDR) must be station's Push API (gRPC; 127.0.0.1:7200 in gomsg dev)"
	msg := st.Message()
	switch {
	case st.Code() == codes.Unimplemented && strings.Contains(msg, "gomsg.push.Push"):
		return "the address answered but serves no Push API (boat's client port?): " + want
	case st.Code() == codes.Unauthenticated && strings.Contains(msg, "internal token"):
		return "the address is an internal port of the cluster: " + want
	case st.Code() == codes.Unavailable && strings.Contains(msg, "HTTP/1.1"):
		return "the address speaks HTTP/1.1 (the HTTP/JSON API, a WebSocket or an ops port?): " + want
	case st.Code() == codes.Unauthenticated && strings.Contains(msg, apikey.ErrInvalid.Error()):
		return "station does not know the key sent (--api-key, GOMSG_API_KEY, or gomsg dev's public key when neither is set); is --push-addr the cluster you meant?"
	}
	return ""
}

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ error }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// newFlagSet is a command's flag set; synopsis is the usage line after
// "gomsgctl ".
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gomsgctl %s\n\nFlags (also GOMSG_* environment variables):\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args into fs. Go's flag package stops at the first argument
// that is not a flag, so in `push --uid a hello --offline` the --offline
// would silently become text; parse refuses that instead, naming the
// option. Arguments after a "--" are taken as they are. takesArgs says
// whether the command takes arguments after its flags at all.
func parse(fs *flag.FlagSet, args []string, takesArgs bool) error {
	if err := config.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return nil
	}
	if !takesArgs {
		return usageErrorf("unexpected argument %q: this command takes only flags", rest[0])
	}
	if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
		return nil
	}
	for _, a := range rest[1:] {
		if strings.HasPrefix(a, "-") && a != "-" {
			return usageErrorf("option %q after the message text %q: options go before the text "+
				"(to send text that starts with \"-\", put -- before it)", a, rest[0])
		}
	}
	return nil
}

func versionCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "version", stderr)
	if err := parse(fs, args, false); err != nil {
		return err
	}
	_, err := fmt.Fprintln(stdout, "gomsgctl", buildinfo.Read())
	return err
}

// printed is one received message as listen prints it.
type printed struct {
	// Room is set for a room broadcast ("*" for a broadcast to everyone).
	Room string `json:"room,omitempty"`
	// Pulled is set for an offline message listen --pull pulled.
	Pulled    bool     `json:"pulled,omitempty"`
	Seq       int64    `json:"seq"`
	Options   []string `json:"options"`
	Timestamp int64    `json:"timestamp"`
	Body      any      `json:"body"`
}

func listen(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := newFlagSet("listen", "listen --uid U --platform P [flags]", stderr)
	addr := fs.String("addr", "127.0.0.1:7100", "boat's client stream address")
	uid := fs.String("uid", "", "user id (required)")
	platform := fs.String("platform", "", "platform (required)")
	secret := fs.String("jwt-secret", auth.DevSecret, "secret to sign the device token with")
	token := fs.String("token", "", "a device token to use as is, instead of signing one")
	count := fs.Int("count", 0, "exit after this many messages (0: run until interrupted)")
	timeout := fs.Duration("timeout", 0, "exit after this long (0: no limit)")
	regToken := fs.String("register-token", "", "register this notification token for the session's own uid and platform")
	provider := fs.String("provider", "", "provider of --register-token: apns, fcm or log (default: the platform's notifier)")
	pull := fs.Int("pull", 0, "connect in pull mode and pull the offline messages N at a time (1 to 100); 0: they are replayed at connect")
	var roomNames repeated
	fs.Var(&roomNames, "room", "join this room (repeat for more); a signed token allows exactly these rooms")
	tr := addTLSFlags(fs)
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if *provider != "" && *regToken == "" {
		return usageErrorf("--provider needs --register-token")
	}
	if *pull < 0 || *pull > 100 {
		return usageErrorf("--pull %d: want 1 to 100 (0: off)", *pull)
	}
	tlsConf, err := tr.config()
	if err != nil {
		return err
	}
	tokens := client.StaticToken(*token)
	if *token == "" {
		if *uid == "" || *platform == "" {
			return usageErrorf("--uid and --platform are required (or --token)")
		}
		// A fresh token for every connect.
		tokens = func(context.Context) (string, error) {
			return auth.Mint(*secret, *uid, *platform, 24*time.Hour, roomNames...)
		}
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	l := &listener{out: json.NewEncoder(out), stderr: stderr, count: *count, pull: *pull}
	ctx, l.stop = context.WithCancelCause(ctx)
	opts := []client.Option{client.WithManualAck(), client.WithHandler(l.message),
		client.WithRoomHandler(l.roomMessage), client.WithStateHandler(l.state),
		client.WithErrorHandler(func(err error) { l.stop(err) })}
	if *pull > 0 {
		opts = append(opts, client.WithPullOffline())
	}
	if tlsConf != nil {
		opts = append(opts, client.WithTLS(tlsConf))
	} else {
		opts = append(opts, client.WithInsecure())
	}
	if l.c, err = client.New(*addr, tokens, opts...); err != nil {
		return err
	}
	// Once connected: register the device token, then join the rooms.
	l.setup = func(ctx context.Context) error {
		if *regToken != "" {
			p, err := l.c.RegisterDevice(ctx, *provider, *regToken)
			if err != nil {
				return fmt.Errorf("register device token: %w", err)
			}
			fmt.Fprintf(stderr, "device token registered (provider %s)\n", p)
		}
		for _, r := range roomNames {
			if err := l.c.JoinRoom(ctx, r); err != nil {
				var se interface{ GRPCStatus() *status.Status }
				if errors.As(err, &se) {
					err = se.GRPCStatus().Err()
				}
				return fmt.Errorf("join room %s: %w", r, err)
			}
			fmt.Fprintf(stderr, "joined room %s\n", r)
		}
		if *pull > 0 {
			return l.pullAll(ctx)
		}
		return nil
	}
	err = l.c.Run(ctx)
	l.setupDone.Wait()
	var ke *client.KickoutError
	switch {
	case errors.As(err, &ke):
		return fmt.Errorf("kicked out: %s (%s)", ke.Reason, ke.Message)
	case err != nil:
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) && !errors.Is(cause, errEnough) {
		return cause
	}
	if !l.connected.Load() && errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		// --timeout is how long to listen, not a way to succeed without
		// ever having listened: a script must see that nothing connected.
		if last := l.lastErr.Load(); last != nil {
			return fmt.Errorf("no session within --timeout %s: %w", *timeout, *last)
		}
		return fmt.Errorf("no session within --timeout %s", *timeout)
	}
	return nil
}

// errEnough stops listen after --count messages.
var errEnough = errors.New("enough messages")

// listener is listen's client and what it prints.
type listener struct {
	c      *client.Client
	out    *json.Encoder
	stderr io.Writer
	count  int
	pull   int // --pull
	stop   context.CancelCauseFunc
	// mu orders the printing of pushed and pulled messages (they come
	// from different goroutines) and guards got.
	mu  sync.Mutex
	got int
	// setup runs once, after the first connect, in a goroutine of its own.
	setup     func(context.Context) error
	setupOnce sync.Once
	setupDone sync.WaitGroup
	// connected is set by the first session; lastErr is why the last
	// attempt failed.
	connected atomic.Bool
	lastErr   atomic.Pointer[error]
}

func (l *listener) state(sc client.StateChange) {
	switch sc.State {
	case client.Connected:
		s := sc.Session
		fmt.Fprintf(l.stderr, "connected: uid %s platform %s sid %s\n", s.UID, s.Platform, s.Sid)
		l.connected.Store(true)
		l.setupOnce.Do(func() {
			l.setupDone.Add(1)
			go func() {
				defer l.setupDone.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := l.setup(ctx); err != nil {
					l.stop(err)
				}
			}()
		})
	case client.Ready:
		if l.pull > 0 {
			fmt.Fprintln(l.stderr, "ready: listening (offline messages are pulled)")
		} else {
			fmt.Fprintln(l.stderr, "ready: offline messages delivered; listening")
		}
	case client.Disconnected:
		fmt.Fprintf(l.stderr, "disconnected: %v; reconnecting in %s\n", sc.Err, sc.RetryIn.Round(time.Millisecond))
		if sc.Err != nil {
			err := sc.Err
			l.lastErr.Store(&err)
		}
	}
}

// message prints a pushed message and ACKs it; at --count it stops, once
// the ACK is on its way (the client sends what was ACKed before it closes).
func (l *listener) message(ctx context.Context, m *msgpb.Message) error {
	if !l.print(printed{Seq: m.GetSeq(), Options: optionNames(m.GetOptions()),
		Timestamp: m.GetTimestamp(), Body: bodyValue(m.GetBody())}) {
		return nil
	}
	// An ACK lost with its session is sent again when the message comes
	// again.
	_ = l.c.Ack(m.GetSeq())
	l.stopAtCount()
	return nil
}

// roomMessage prints a room broadcast ("*" for a broadcast to everyone).
func (l *listener) roomMessage(_ context.Context, room string, m *msgpb.Message) {
	if room == "" {
		room = "*"
	}
	if l.print(printed{Room: room, Seq: m.GetSeq(), Options: optionNames(m.GetOptions()),
		Timestamp: m.GetTimestamp(), Body: bodyValue(m.GetBody())}) {
		l.stopAtCount()
	}
}

// pullAll pulls the offline messages --pull at a time, printing each and
// ACKing each page with the next Pull, until none is left or --count is
// reached.
func (l *listener) pullAll(ctx context.Context) error {
	var ack []int64
	total := 0
	for {
		msgs, more, err := l.c.Pull(ctx, l.pull, ack)
		if err != nil {
			return fmt.Errorf("pull offline messages: %w", err)
		}
		ack = ack[:0]
		for _, m := range msgs {
			if !l.print(printed{Pulled: true, Seq: m.GetSeq(), Options: optionNames(m.GetOptions()),
				Timestamp: m.GetTimestamp(), Body: bodyValue(m.GetBody())}) {
				break // --count reached already
			}
			ack = append(ack, m.GetSeq())
			total++
		}
		if l.reached() {
			// ACK what was printed before stopping (the rest comes
			// again).
			_, _, err := l.c.Pull(ctx, 1, ack)
			l.stopAtCount()
			if err != nil {
				return fmt.Errorf("ACK the pulled messages: %w", err)
			}
			return nil
		}
		if !more {
			break
		}
	}
	if len(ack) > 0 {
		if _, _, err := l.c.Pull(ctx, 1, ack); err != nil {
			return fmt.Errorf("ACK the last pulled page: %w", err)
		}
	}
	fmt.Fprintf(l.stderr, "pulled: %d offline messages\n", total)
	return nil
}

// print prints p unless --count was reached (false then, or when printing
// failed). The caller ACKs what was printed, then calls stopAtCount.
func (l *listener) print(p printed) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count > 0 && l.got >= l.count {
		return false
	}
	if err := l.out.Encode(p); err != nil {
		l.stop(err)
		return false
	}
	l.got++
	return true
}

// reached reports whether --count messages were printed.
func (l *listener) reached() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count > 0 && l.got >= l.count
}

// stopAtCount stops listen once --count messages were printed.
func (l *listener) stopAtCount() {
	if l.reached() {
		l.stop(errEnough)
	}
}

func optionNames(o uint32) []string {
	names := []string{}
	for _, opt := range []msgpb.Option{msgpb.Option_NEED_ACK, msgpb.Option_NEED_OFFLINE, msgpb.Option_NEED_NOTIFICATION, msgpb.Option_NEED_RECEIPTS} {
		if o&uint32(opt) != 0 {
			names = append(names, opt.String())
		}
	}
	return names
}

func bodyValue(a *anypb.Any) any {
	var s wrapperspb.StringValue
	if a.MessageIs(&s) && a.UnmarshalTo(&s) == nil {
		return s.GetValue()
	}
	raw, err := protojson.Marshal(a)
	if err != nil {
		return a.GetTypeUrl()
	}
	return json.RawMessage(raw)
}

func push(ctx context.Context, args []string, stdin io.Reader, out, stderr io.Writer) error {
	ep, req, err := pushRequest(args, stdin, stderr)
	if err != nil {
		return err
	}
	api, ctx, done, err := pushAPI(ctx, ep.addr, ep.tr, ep.key)
	if err != nil {
		return err
	}
	defer done()
	resp, err := api.Push(ctx, req)
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(map[string][]int64{"seqs": resp.GetSeqs()})
}

// endpoint is where and how a command reaches the Push API.
type endpoint struct {
	addr string
	tr   *transport
	key  string
}

// maxBodyFile bounds what --body-file reads; station's own limit
// (--max-body-bytes) is far lower and is the one that answers.
const maxBodyFile = 64 << 20

// pushRequest parses push's command line into the Push API address and the
// request; the body comes from TEXT or from --body-file (a file, or stdin
// for "-").
func pushRequest(args []string, stdin io.Reader, stderr io.Writer) (endpoint, *pushpb.PushRequest, error) {
	fs := newFlagSet("push", "push --uid U [flags] (TEXT | --body-file FILE | --body-file -)", stderr)
	addr := fs.String("push-addr", "127.0.0.1:7200", "station's Push API address (gRPC)")
	var uids, platforms, without repeated
	fs.Var(&uids, "uid", "target user (repeat for more)")
	fs.Var(&platforms, "platform", "only this platform (repeat for more; default: all)")
	fs.Var(&without, "without-platform", "not this platform (repeat for more)")
	ack := fs.Bool("ack", false, "NEED_ACK: delivered only once the device ACKs")
	off := fs.Bool("offline", false, "NEED_OFFLINE: store for platforms that are offline (without it a message to an offline platform is dropped)")
	notify := fs.Bool("notify", false, "NEED_NOTIFICATION: mobile notification for offline platforms")
	receipts := fs.Bool("receipts", false, "NEED_RECEIPTS: record the delivery steps as receipts (needs station's --receipts-topic)")
	bodyFile := fs.String("body-file", "", "read the message text from this file (\"-\": stdin) instead of TEXT, byte for byte")
	idemKey := fs.String("idempotency-key", "", "idempotency key: a retry with the same key and message within station's --idempotency-window returns the first seqs and sends nothing new")
	note := notificationFlags(fs)
	tr := addTLSFlags(fs)
	key := apiKeyFlag(fs)
	if err := parse(fs, args, true); err != nil {
		return endpoint{}, nil, err
	}
	if len(uids) == 0 {
		return endpoint{}, nil, usageErrorf("--uid is required")
	}
	var text string
	switch {
	case *bodyFile != "" && fs.NArg() > 0:
		return endpoint{}, nil, usageErrorf("the message is either TEXT or --body-file, not both (got --body-file %q and TEXT %q)", *bodyFile, fs.Arg(0))
	case *bodyFile != "":
		b, err := readBody(*bodyFile, stdin)
		if err != nil {
			return endpoint{}, nil, fmt.Errorf("--body-file %s: %w", *bodyFile, err)
		}
		text = string(b)
	case fs.NArg() > 0:
		text = strings.Join(fs.Args(), " ")
	default:
		return endpoint{}, nil, usageErrorf("the message is required: TEXT, or --body-file FILE (\"-\" reads stdin)")
	}
	var opts uint32
	if *ack {
		opts |= uint32(msgpb.Option_NEED_ACK)
	}
	if *off {
		opts |= uint32(msgpb.Option_NEED_OFFLINE)
	}
	if *notify {
		opts |= uint32(msgpb.Option_NEED_NOTIFICATION)
	}
	if *receipts {
		opts |= uint32(msgpb.Option_NEED_RECEIPTS)
	}
	body, err := anypb.New(wrapperspb.String(text))
	if err != nil {
		return endpoint{}, nil, err
	}
	return endpoint{addr: *addr, tr: tr, key: *key}, &pushpb.PushRequest{
		Uids: uids, MsgBodies: []*anypb.Any{body}, MsgOptions: opts,
		PlatformConfig: &pushpb.PlatformConfig{Platforms: platforms, WithoutPlatforms: without},
		Notification:   note(),
		IdempotencyKey: *idemKey,
	}, nil
}

// readBody reads a message body from name, or from stdin for "-". The body
// travels as a StringValue, so it must be UTF-8 text.
func readBody(name string, stdin io.Reader) ([]byte, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxBodyFile+1))
	switch {
	case err != nil:
		return nil, err
	case len(b) > maxBodyFile:
		return nil, fmt.Errorf("longer than %d MiB", maxBodyFile>>20)
	case !utf8.Valid(b):
		return nil, errors.New("not UTF-8 text (the body is sent as a google.protobuf.StringValue)")
	}
	return b, nil
}

func online(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := newFlagSet("online", "online --uid U [--uid U2 …] [flags]", stderr)
	addr := fs.String("push-addr", "127.0.0.1:7200", "station's Push API address (gRPC)")
	var uids repeated
	fs.Var(&uids, "uid", "user (repeat for more)")
	tr := addTLSFlags(fs)
	key := apiKeyFlag(fs)
	if err := parse(fs, args, false); err != nil {
		return err
	}
	api, ctx, done, err := pushAPI(ctx, *addr, tr, *key)
	if err != nil {
		return err
	}
	defer done()
	resp, err := api.Online(ctx, &pushpb.OnlineRequest{Uids: uids})
	if err != nil {
		return err
	}
	return printJSON(out, resp)
}

func broadcast(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := newFlagSet("broadcast", "broadcast (--room R [--room R2 …] | --all [--platform P …]) [flags] TEXT", stderr)
	addr := fs.String("push-addr", "127.0.0.1:7200", "station's Push API address (gRPC)")
	var roomNames, platforms, without repeated
	fs.Var(&roomNames, "room", "target room (repeat for more)")
	all := fs.Bool("all", false, "every online session instead of rooms")
	fs.Var(&platforms, "platform", "with --all: only this platform (repeat for more; default: all)")
	fs.Var(&without, "without-platform", "with --all: not this platform (repeat for more)")
	tr := addTLSFlags(fs)
	key := apiKeyFlag(fs)
	if err := parse(fs, args, true); err != nil {
		return err
	}
	switch {
	case *all && len(roomNames) > 0:
		return usageErrorf("--all and --room exclude each other")
	case !*all && len(roomNames) == 0:
		return usageErrorf("--room or --all is required")
	case !*all && len(platforms)+len(without) > 0:
		return usageErrorf("--platform and --without-platform go with --all (a room's members get its broadcasts on every platform)")
	case fs.NArg() == 0:
		return usageErrorf("the message TEXT is required")
	}
	body, err := anypb.New(wrapperspb.String(strings.Join(fs.Args(), " ")))
	if err != nil {
		return err
	}
	api, ctx, done, err := pushAPI(ctx, *addr, tr, *key)
	if err != nil {
		return err
	}
	defer done()
	var resp *pushpb.BroadcastResponse
	if *all {
		resp, err = api.BroadcastAll(ctx, &pushpb.BroadcastAllRequest{MsgBodies: []*anypb.Any{body},
			PlatformConfig: &pushpb.PlatformConfig{Platforms: platforms, WithoutPlatforms: without}})
	} else {
		resp, err = api.BroadcastRoom(ctx, &pushpb.BroadcastRoomRequest{Rooms: roomNames, MsgBodies: []*anypb.Any{body}})
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(map[string][]int64{"seqs": resp.GetSeqs()})
}

func rooms(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := newFlagSet("rooms", "rooms --room R [flags]", stderr)
	addr := fs.String("push-addr", "127.0.0.1:7200", "station's Push API address (gRPC)")
	room := fs.String("room", "", "the room to count (required)")
	tr := addTLSFlags(fs)
	key := apiKeyFlag(fs)
	if err := parse(fs, args, false); err != nil {
		return err
	}
	if *room == "" {
		return usageErrorf("--room is required")
	}
	api, ctx, done, err := pushAPI(ctx, *addr, tr, *key)
	if err != nil {
		return err
	}
	defer done()
	resp, err := api.RoomOnline(ctx, &pushpb.RoomOnlineRequest{Room: *room})
	if err != nil {
		return err
	}
	return printRooms(out, resp)
}

// printRooms prints rooms' answer as one JSON line.
func printRooms(out io.Writer, r *pushpb.RoomOnlineResponse) error {
	return json.NewEncoder(out).Encode(roomCounts(r))
}

// roomCount is rooms' answer as it prints it: counts as JSON numbers, where
// protojson would write an int64 as a string, and every field present.
type roomCount struct {
	Room             string       `json:"room"`
	Members          int64        `json:"members"`
	Boats            []boatMember `json:"boats"`
	UnreachableBoats []string     `json:"unreachableBoats"`
}

type boatMember struct {
	BoatID  string `json:"boatId"`
	Members int64  `json:"members"`
}

func roomCounts(r *pushpb.RoomOnlineResponse) roomCount {
	c := roomCount{Room: r.GetRoom(), Members: r.GetMembers(), Boats: []boatMember{}, UnreachableBoats: r.GetUnreachableBoats()}
	for _, b := range r.GetBoats() {
		c.Boats = append(c.Boats, boatMember{BoatID: b.GetBoatId(), Members: b.GetMembers()})
	}
	if c.UnreachableBoats == nil {
		c.UnreachableBoats = []string{}
	}
	return c
}

// printJSON prints an answer of the Push API as one line of protojson.
func printJSON(out io.Writer, m proto.Message) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// apiKeyFlag registers --api-key (GOMSG_API_KEY).
func apiKeyFlag(fs *flag.FlagSet) *string {
	return fs.String("api-key", apikey.DevKey, "Push API key, sent as authorization: Bearer (default: gomsg dev's public key)")
}

// pushAPI connects to the Push API at addr; calls get 30 seconds and carry
// the API key. done releases the connection.
func pushAPI(ctx context.Context, addr string, tr *transport, key string) (pushpb.PushClient, context.Context, func(), error) {
	dialTLS, err := tr.option()
	if err != nil {
		return nil, nil, nil, err
	}
	conn, err := grpcx.Dial(addr, dialTLS)
	if err != nil {
		return nil, nil, nil, err
	}
	if tr.hasCert() && key == apikey.DevKey {
		key = "" // the certificate is the credential
	}
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	return pushpb.NewPushClient(conn), ctx, func() { cancel(); _ = conn.Close() }, nil
}
