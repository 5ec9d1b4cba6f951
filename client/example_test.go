package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/gomsg/gomsg/client"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// fetchToken stands for the application's own login: it returns a device
// token signed by the application's backend.
func fetchToken(ctx context.Context) (string, error) { return os.Getenv("GOMSG_TOKEN"), nil }

// An application receives its pushed messages: each is handed over once
// and ACKed when the handler returns nil. The state handler makes a failing
// connect visible at once (the client retries by itself, silently
// otherwise): e.g. TLS, the default, against `gomsg dev`, which listens in
// plaintext and needs client.WithInsecure().
func Example() {
	c, err := client.New("boat.example.com:7100", fetchToken,
		client.WithHandler(func(ctx context.Context, m *msgpb.Message) error {
			var text wrapperspb.StringValue
			if err := m.GetBody().UnmarshalTo(&text); err != nil {
				return nil // not ours to read: drop it (ACKed)
			}
			fmt.Println(m.GetSeq(), text.GetValue())
			return nil
		}),
		client.WithStateHandler(func(sc client.StateChange) {
			if sc.State == client.Disconnected {
				log.Printf("gomsg: %v; trying again in %s", sc.Err, sc.RetryIn)
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := c.Run(ctx); errors.Is(err, client.ErrNewSession) {
		log.Print("signed in on another device of this platform")
	} else if err != nil {
		log.Fatal(err)
	}
}

// The state handler hears the session's life: the sid, uid and platform on
// Connected, the end of the offline replay on Ready, and why the session
// ended and when the client tries again on Disconnected.
func ExampleWithStateHandler() {
	c, err := client.New("127.0.0.1:7100", client.StaticToken("dev-token"), client.WithInsecure(),
		client.WithStateHandler(func(sc client.StateChange) {
			switch sc.State {
			case client.Connected:
				log.Printf("connected as %s on %s (session %s)", sc.Session.UID, sc.Session.Platform, sc.Session.Sid)
			case client.Ready:
				log.Print("caught up; live from now on")
			case client.Disconnected:
				log.Printf("disconnected: %v; again in %s", sc.Err, sc.RetryIn)
			case client.Closed:
				log.Printf("stopped: %v", sc.Err)
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	_ = c.Run(context.Background())
}

// With WithManualAck the application ACKs once the message is safely
// stored, here from another goroutine.
func ExampleClient_Ack() {
	stored := make(chan int64, 64)
	var c *client.Client
	c, err := client.New("boat.example.com:7100", fetchToken, client.WithManualAck(),
		client.WithHandler(func(ctx context.Context, m *msgpb.Message) error {
			go func() { stored <- m.GetSeq() }() // e.g. after a database commit
			return nil
		}))
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		for seq := range stored {
			_ = c.Ack(seq)
		}
	}()
	_ = c.Run(context.Background())
}

// Rooms are joined on the current session and every later one; their
// broadcasts reach the room handler.
func ExampleClient_JoinRoom() {
	c, err := client.New("boat.example.com:7100", fetchToken,
		client.WithRoomHandler(func(ctx context.Context, room string, m *msgpb.Message) {
			log.Printf("room %q: message %d", room, m.GetSeq())
		}),
		// gRPC keepalive: a boat closes a connection whose client pings
		// more often than every 10 s.
		client.WithDialOptions(grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Minute})))
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.JoinRoom(ctx, "match-42"); err != nil {
			log.Print(err) // e.g. PermissionDenied: the token does not allow the room
		}
	}()
	_ = c.Run(context.Background())
}

// The first failure is told at once: here a client that dials with TLS (the
// default) a server that does not speak it, as `gomsg dev` without
// WithInsecure. The connect fails Unavailable, whose close code (4014) is in
// the reconnect range: the client would try again after RetryIn.
func ExampleStateChange_firstFailure() {
	// A server that closes every connection at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()

	var c *client.Client
	c, err = client.New(ln.Addr().String(), client.StaticToken("dev-token"),
		client.WithStateHandler(func(sc client.StateChange) {
			if sc.State == client.Disconnected {
				fmt.Printf("disconnected: %s (close code %d, stops: %v)\n",
					status.Code(sc.Err), sc.CloseCode, msgpb.CloseStops(sc.CloseCode))
				_ = c.Close()
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("Run:", c.Run(context.Background()))
	// Output:
	// disconnected: Unavailable (close code 4014, stops: false)
	// Run: <nil>
}
