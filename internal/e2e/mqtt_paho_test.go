package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/mqtt"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// TestMQTTPahoClient: Eclipse Paho's Go client for MQTT 5, a client library
// nobody here wrote, as the device: with clean start false it gets the
// stored messages in order and then live ones, its automatic PUBACKs empty
// the store, and a new session of the same user ends it with DISCONNECT
// 0x8E (session taken over) saying NEW_SESSION.
func TestMQTTPahoClient(t *testing.T) {
	t.Parallel()
	e := start(t, withMQTT())
	const n = 50
	stored := e.pushOffline("alice", "ios", "stored-", n)
	e.waitZcard("alice", "ios", n)

	var mu sync.Mutex
	var got []int64
	var bodies []string
	disconnected := make(chan *paho.Disconnect, 1)
	nc, err := net.DialTimeout("tcp", e.gomsg.Boat.MQTTAddr(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{
		ClientID: "paho-1",
		Conn:     nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			seq, err := strconv.ParseInt(pr.Packet.Properties.User.Get(boat.MQTTPropSeq), 10, 64)
			if err != nil || pr.Packet.Topic != "u/alice" || pr.Packet.QoS != 1 {
				t.Errorf("PUBLISH topic %s qos %d seq %q", pr.Packet.Topic, pr.Packet.QoS, pr.Packet.Properties.User.Get(boat.MQTTPropSeq))
			}
			mu.Lock()
			got = append(got, seq)
			bodies = append(bodies, string(pr.Packet.Payload))
			mu.Unlock()
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) { disconnected <- d },
	})
	token, err := auth.Mint(secret, "alice", "ios", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	expiry := uint32(3600)
	ack, err := c.Connect(ctx, &paho.Connect{ClientID: "paho-1", KeepAlive: 30, CleanStart: false,
		Username: "alice", UsernameFlag: true, Password: []byte(token), PasswordFlag: true,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil || ack.ReasonCode != mqtt.Success {
		t.Fatalf("connect: %v, %+v", err, ack)
	}
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "u/alice", QoS: 1}}})
	if err != nil || len(sa.Reasons) != 1 || sa.Reasons[0] != 1 {
		t.Fatalf("subscribe: %v, %+v", err, sa)
	}
	e.waitZcard("alice", "ios", 0) // replayed and PUBACKed by the library
	live := e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, MsgOptions: optAck | optOffline}, "live")
	want := append(slices.Clone(stored), live)
	testutil.WaitFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < len(want) {
			return fmt.Errorf("%d of %d messages received", len(got), len(want))
		}
		return nil
	})
	mu.Lock()
	if !slices.Equal(got, want) {
		t.Errorf("seqs %v, want %v", got, want)
	}
	for i, b := range bodies[:n] {
		if b != fmt.Sprint("stored-", i) {
			t.Errorf("message %d: %q, want stored-%d", i, b, i)
		}
	}
	if bodies[n] != "live" {
		t.Errorf("live message %q", bodies[n])
	}
	mu.Unlock()
	e.waitZcard("alice", "ios", 0) // the live one's PUBACK reached carrier

	e.dial("alice", "ios", true)
	select {
	case d := <-disconnected:
		if d.ReasonCode != mqtt.SessionTakenOver || d.Properties == nil || !strings.HasPrefix(d.Properties.ReasonString, "NEW_SESSION") {
			t.Errorf("DISCONNECT %+v, want 0x8e NEW_SESSION", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no DISCONNECT after a new session of the same user")
	}
}
