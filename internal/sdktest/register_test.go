package sdktest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gomsg/gomsg/client"
	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/device"
	"github.com/gomsg/gomsg/internal/grpcx"
	"github.com/gomsg/gomsg/internal/platform"
	"github.com/gomsg/gomsg/internal/rkeys"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// withNotifiers gives ios the apns notifier, so that its devices may
// register tokens.
func withNotifiers(cfg *app.ClusterConfig) {
	p := platform.MustParse("ios:notify=apns,android:notify=fcm,web")
	cfg.Station.Station.Platforms, cfg.Carrier.Platforms = p, p
}

// sendHook is a dial option that calls hook with every payload the client
// sends, right after it was sent.
func sendHook(hook func(*msgpb.ClientPayload)) client.Option {
	return client.WithDialOptions(grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc,
		cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return &hookedStream{ClientStream: cs, hook: hook}, nil
	}))
}

type hookedStream struct {
	grpc.ClientStream
	hook func(*msgpb.ClientPayload)
}

func (s *hookedStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	if p, ok := m.(*msgpb.ClientPayload); ok {
		s.hook(p)
	}
	return err
}

// cancels cancels, when a payload is sent that match picks, the context
// registered last with arm.
type cancels struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	match  func(*msgpb.ClientPayload) bool
}

func (c *cancels) arm(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.cancel = cancel
	c.mu.Unlock()
	return ctx
}

func (c *cancels) sent(p *msgpb.ClientPayload) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil && c.match(p) {
		c.cancel()
		c.cancel = nil
	}
}

// registered reports whether uid's device hash holds token for ios/apns.
func (c *cluster) registered(uid, token string) bool {
	c.t.Helper()
	ok, err := c.rdb.HExists(context.Background(), rkeys.Of(c.rdb).Devices(uid), device.Field("ios", "apns", token)).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	return ok
}

// RegisterDevice writes the session's token under its uid and platform and
// returns the provider; a bad token is refused InvalidArgument naming the
// field. A call whose ctx ends right after its registration was sent,
// followed at once by another: the second waits for the first's answer,
// gets its own, and its token is written. Ten rounds.
func TestRegisterDevice(t *testing.T) {
	t.Parallel()
	c := startCluster(t, withNotifiers)
	gone := &cancels{match: func(p *msgpb.ClientPayload) bool {
		return p.GetRegisterDevice() != nil && p.GetRegisterDevice().GetToken() != "" && p.GetRegisterDevice().GetToken()[0] == 'g'
	}}
	var r recorder
	cl := c.run(&r, client.StaticToken(c.token("reg", "ios")), sendHook(gone.sent))
	r.waitState(t, client.Ready, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	provider, err := cl.RegisterDevice(ctx, "", "first-token")
	if err != nil || provider != "apns" {
		t.Fatalf("RegisterDevice: %q, %v; want apns, nil", provider, err)
	}
	if !c.registered("reg", "first-token") {
		t.Fatal("first-token not in Redis after RegisterDevice returned")
	}
	_, err = cl.RegisterDevice(ctx, "", "has space")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "device.token") {
		t.Fatalf("RegisterDevice of a bad token: %v, want InvalidArgument naming device.token", err)
	}

	for i := range 10 {
		_, err := cl.RegisterDevice(gone.arm(ctx), "", fmt.Sprint("gone-", i))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: the cancelled RegisterDevice: %v, want context.Canceled", i, err)
		}
		kept := fmt.Sprint("kept-", i)
		provider, err := cl.RegisterDevice(ctx, "", kept)
		if err != nil || provider != "apns" {
			t.Fatalf("round %d: RegisterDevice right after a cancelled one: %q, %v; want apns, nil", i, provider, err)
		}
		if !c.registered("reg", kept) {
			t.Fatalf("round %d: RegisterDevice(%s) returned success, but the token is not in Redis", i, kept)
		}
	}
}

// The boat echoes the id of a JoinRoom, LeaveRoom and RegisterDevice in
// its answer.
func TestBoatEchoesRequestIDs(t *testing.T) {
	t.Parallel()
	c := startCluster(t, withNotifiers)
	conn, err := grpcx.Dial(c.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := msgpb.NewMsgClient(conn).Loop(metadata.AppendToOutgoingContext(ctx,
		"authorization", "Bearer "+c.token("ida", "ios", "lobby")))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*msgpb.ClientPayload{
		{Body: &msgpb.ClientPayload_JoinRoom{JoinRoom: &msgpb.JoinRoom{Room: "lobby", Id: 7}}},
		{Body: &msgpb.ClientPayload_LeaveRoom{LeaveRoom: &msgpb.LeaveRoom{Room: "lobby", Id: 8}}},
		{Body: &msgpb.ClientPayload_RegisterDevice{RegisterDevice: &msgpb.RegisterDevice{Token: "echo", Id: 9}}},
	} {
		if err := stream.Send(p); err != nil {
			t.Fatal(err)
		}
	}
	var ids []int64
	for len(ids) < 3 {
		p, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if a := p.GetRoomAnswer(); a != nil {
			ids = append(ids, a.GetId())
		}
		if d := p.GetDeviceRegistered(); d != nil {
			ids = append(ids, d.GetId())
		}
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []int64{7, 8, 9}) {
		t.Fatalf("answers' ids %v, want 7, 8, 9", ids)
	}
}
