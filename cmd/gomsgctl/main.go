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
	"syscall"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/client"
	"github.com/gomsg/gomsg/internal/config"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/pb/msgpb"
	"github.com/gomsg/gomsg/pb/pushpb"
)

const usage = `gomsgctl — gomsg's example client

Usage:
  gomsgctl listen --uid U --platform P [--count N] [--timeout D]
      connect as a device; print each message as a JSON line and ACK it
  gomsgctl push --uid U [--uid U2 …] [--platform P …] [--ack] [--offline] [--notify]
               [--title T] [--body-text B] [--sound S] [--badge N] [--collapse-id C]
               [--data k=v …] [--ttl D] TEXT
      push TEXT (a google.protobuf.StringValue) and print the returned seqs;
      the notification flags set what offline phones show (--notify; default body: TEXT)
  gomsgctl device register|unregister --uid U --platform P --token T [--provider X] [--app-id A]
  gomsgctl device list --uid U
      manage the device tokens mobile notifications go to
  gomsgctl online --uid U [--uid U2 …]
      list the users' sessions

push, online and device send --api-key (GOMSG_API_KEY; default: gomsg dev's public key).
Flags also come from GOMSG_* environment variables (--push-addr: GOMSG_PUSH_ADDR).
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "listen":
		err = listen(ctx, os.Args[2:], os.Stdout)
	case "push":
		err = push(ctx, os.Args[2:], os.Stdout)
	case "online":
		err = online(ctx, os.Args[2:], os.Stdout)
	case "device":
		err = deviceCmd(ctx, os.Args[2:], os.Stdout)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "gomsgctl: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "gomsgctl %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// printed is one received message as listen prints it.
type printed struct {
	Seq       int64    `json:"seq"`
	Options   []string `json:"options"`
	Timestamp int64    `json:"timestamp"`
	Body      any      `json:"body"`
}

func listen(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("listen", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7100", "boat's client stream address")
	uid := fs.String("uid", "", "user id (required)")
	platform := fs.String("platform", "", "platform (required)")
	secret := fs.String("jwt-secret", app.DevJWTSecret, "secret to sign the device token with")
	token := fs.String("token", "", "a device token to use as is, instead of signing one")
	count := fs.Int("count", 0, "exit after this many messages (0: run until interrupted)")
	timeout := fs.Duration("timeout", 0, "exit after this long (0: no limit)")
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if *token == "" {
		if *uid == "" || *platform == "" {
			return errors.New("--uid and --platform are required (or --token)")
		}
		var err error
		if *token, err = auth.Mint(*secret, *uid, *platform, 24*time.Hour); err != nil {
			return err
		}
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	d, err := client.Connect(ctx, *addr, *token)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer d.Close()
	fmt.Fprintf(os.Stderr, "connected: uid %s platform %s sid %s\n", d.UID, d.Platform, d.Sid)
	go func() {
		<-ctx.Done()
		d.Close()
	}()
	enc := json.NewEncoder(out)
	got := 0
	for {
		p, err := d.Recv()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		switch b := p.GetBody().(type) {
		case *msgpb.ServerPayload_Ready:
			fmt.Fprintln(os.Stderr, "ready: offline messages delivered; listening")
		case *msgpb.ServerPayload_Kickout:
			return fmt.Errorf("kicked out: %s (%s)", b.Kickout.GetReason(), b.Kickout.GetMessage())
		case *msgpb.ServerPayload_Messages:
			seqs := make([]int64, 0, len(b.Messages.GetMsgs()))
			for _, m := range b.Messages.GetMsgs() {
				if err := enc.Encode(printed{Seq: m.GetSeq(), Options: optionNames(m.GetOptions()),
					Timestamp: m.GetTimestamp(), Body: bodyValue(m.GetBody())}); err != nil {
					return err
				}
				seqs = append(seqs, m.GetSeq())
			}
			if err := d.Ack(seqs...); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
			got += len(seqs)
			if *count > 0 && got >= *count {
				return nil
			}
		}
	}
}

func optionNames(o uint32) []string {
	names := []string{}
	for _, opt := range []msgpb.Option{msgpb.Option_NEED_ACK, msgpb.Option_NEED_OFFLINE, msgpb.Option_NEED_NOTIFICATION} {
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

func push(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	addr := fs.String("push-addr", "127.0.0.1:7200", "station's Push API address (gRPC)")
	var uids, platforms, without repeated
	fs.Var(&uids, "uid", "target user (repeat for more)")
	fs.Var(&platforms, "platform", "only this platform (repeat for more; default: all)")
	fs.Var(&without, "without-platform", "not this platform (repeat for more)")
	ack := fs.Bool("ack", false, "NEED_ACK: delivered only once the device ACKs")
	off := fs.Bool("offline", false, "NEED_OFFLINE: store for platforms that are offline")
	notify := fs.Bool("notify", false, "NEED_NOTIFICATION: mobile notification for offline platforms")
	note := notificationFlags(fs)
	key := apiKeyFlag(fs)
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	if len(uids) == 0 {
		return errors.New("--uid is required")
	}
	if fs.NArg() == 0 {
		return errors.New("the message text is required")
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
	body, err := anypb.New(wrapperspb.String(strings.Join(fs.Args(), " ")))
	if err != nil {
		return err
	}
	api, ctx, done, err := pushAPI(ctx, *addr, *key)
	if err != nil {
		return err
	}
	defer done()
	resp, err := api.Push(ctx, &pushpb.PushRequest{
		Uids: uids, MsgBodies: []*anypb.Any{body}, MsgOptions: opts,
		PlatformConfig: &pushpb.PlatformConfig{Platforms: platforms, WithoutPlatforms: without},
		Notification:   note(),
	})
	if err != nil {
		return err
	}
	return json.NewEncoder(out).Encode(map[string][]int64{"seqs": resp.GetSeqs()})
}

func online(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("online", flag.ContinueOnError)
	addr := fs.String("push-addr", "127.0.0.1:7200", "station's Push API address (gRPC)")
	var uids repeated
	fs.Var(&uids, "uid", "user (repeat for more)")
	key := apiKeyFlag(fs)
	if err := config.Parse(fs, args); err != nil {
		return err
	}
	api, ctx, done, err := pushAPI(ctx, *addr, *key)
	if err != nil {
		return err
	}
	defer done()
	resp, err := api.Online(ctx, &pushpb.OnlineRequest{Uids: uids})
	if err != nil {
		return err
	}
	b, err := protojson.Marshal(resp)
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
	return fs.String("api-key", app.DevAPIKey, "Push API key, sent as authorization: Bearer (default: gomsg dev's public key)")
}

// pushAPI connects to the Push API at addr; calls get 30 seconds and carry
// the API key. done releases the connection.
func pushAPI(ctx context.Context, addr, key string) (pushpb.PushClient, context.Context, func(), error) {
	conn, err := grpcx.Dial(addr)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	return pushpb.NewPushClient(conn), ctx, func() { cancel(); _ = conn.Close() }, nil
}
