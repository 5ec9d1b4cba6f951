package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/pb/pushpb"
)

// notificationFlags registers push's notification content flags and
// returns a function building the content after parsing (nil when no flag
// was given: horn then shows the message text).
func notificationFlags(fs *flag.FlagSet) func() *pushpb.Notification {
	title := fs.String("title", "", "notification title")
	body := fs.String("body-text", "", "notification body (default: the message TEXT)")
	sound := fs.String("sound", "", "notification sound")
	badge := fs.Int("badge", -1, "app icon badge (APNs); -1 leaves it alone")
	collapse := fs.String("collapse-id", "", "notifications with the same collapse id replace each other")
	ttl := fs.Duration("ttl", 0, "how long the provider keeps trying to reach the device")
	var data repeated
	fs.Var(&data, "data", "custom notification data key=value (repeat for more)")
	return func() *pushpb.Notification {
		n := &pushpb.Notification{Title: *title, Body: *body, Sound: *sound, CollapseId: *collapse,
			TtlSeconds: int64(*ttl / time.Second)}
		if *badge >= 0 {
			n.Badge = proto.Int32(int32(*badge))
		}
		for _, kv := range data {
			k, v, _ := strings.Cut(kv, "=")
			if n.Data == nil {
				n.Data = map[string]string{}
			}
			n.Data[k] = v
		}
		if proto.Equal(n, &pushpb.Notification{}) {
			return nil
		}
		return n
	}
}

const deviceUsage = `Usage:
  gomsgctl device register --uid U --platform P --token T [--provider X] [--app-id A]
  gomsgctl device unregister --uid U --platform P --token T
  gomsgctl device list --uid U

"gomsgctl device <register|unregister|list> -h" lists the flags.
`

// deviceCmd is `gomsgctl device register|unregister|list`.
func deviceCmd(ctx context.Context, args []string, out, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, deviceUsage)
		return usageErrorf("want register, unregister or list")
	}
	verb := args[0]
	switch verb {
	case "register", "unregister", "list":
	case "-h", "-help", "--help", "help":
		fmt.Fprint(out, deviceUsage)
		return flag.ErrHelp
	default:
		return usageErrorf("unknown device command %q: want register, unregister or list", verb)
	}
	fs := newFlagSet("device "+verb, "device "+verb+" --uid U [flags]", stderr)
	addr := fs.String("push-addr", "127.0.0.1:7200", "station's Push API address (gRPC)")
	d := &pushpb.Device{}
	fs.StringVar(&d.Uid, "uid", "", "user id (required)")
	fs.StringVar(&d.Platform, "platform", "", "platform (register, unregister)")
	fs.StringVar(&d.Token, "token", "", "the provider's device token (register, unregister)")
	fs.StringVar(&d.Provider, "provider", "", "apns, fcm or log (default: the platform's notifier)")
	fs.StringVar(&d.AppId, "app-id", "", "app / bundle id (APNs topic of this device)")
	tr := addTLSFlags(fs)
	key := apiKeyFlag(fs)
	if err := parse(fs, args[1:], false); err != nil {
		return err
	}
	c, ctx, done, err := pushAPI(ctx, *addr, tr, *key)
	if err != nil {
		return err
	}
	defer done()
	var resp proto.Message
	switch verb {
	case "register":
		resp, err = c.RegisterDevice(ctx, &pushpb.RegisterDeviceRequest{Device: d})
	case "unregister":
		resp, err = c.UnregisterDevice(ctx, &pushpb.UnregisterDeviceRequest{Device: d})
	case "list":
		resp, err = c.ListDevices(ctx, &pushpb.ListDevicesRequest{Uid: d.GetUid()})
	}
	if err != nil {
		return err
	}
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(resp)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(b))
	return err
}
