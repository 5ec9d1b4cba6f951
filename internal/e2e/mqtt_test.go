package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/app"
	"github.com/gomsg/gomsg/internal/auth"
	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/mqtt"
	"github.com/gomsg/gomsg/internal/testutil"
	"github.com/gomsg/gomsg/pb/pushpb"
)

// withMQTT turns boat's MQTT transport on.
func withMQTT() option {
	return func(c *app.ClusterConfig) { c.Boat.MQTTAddr = "127.0.0.1:0" }
}

// mqttDevice is a device session over MQTT, on a client written on the
// codec (the cross-check with mosquitto_sub is TestMQTTMosquittoSub).
type mqttDevice struct {
	t     *testing.T
	nc    net.Conn
	r     *bufio.Reader
	level byte
}

type mqttDial struct {
	uid, platform, username string
	token                   string // set: instead of a minted one
	cleanStart              bool
	receiveMax              uint16
	rooms                   []string
}

// dialMQTT connects and returns the device with the server's CONNACK.
func (e *env) dialMQTT(addr string, o mqttDial) (*mqttDevice, *mqtt.Connack) {
	e.t.Helper()
	token := o.token
	if token == "" {
		var err error
		if token, err = auth.Mint(secret, o.uid, o.platform, time.Hour, o.rooms...); err != nil {
			e.t.Fatal(err)
		}
	}
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		e.t.Fatalf("mqtt dial: %v", err)
	}
	e.t.Cleanup(func() { _ = nc.Close() })
	d := &mqttDevice{t: e.t, nc: nc, r: bufio.NewReader(nc), level: mqtt.V5}
	c := &mqtt.Connect{ProtocolLevel: mqtt.V5, CleanStart: o.cleanStart, KeepAlive: 30, ClientID: o.uid + "-dev",
		Username: o.username, HasUsername: o.username != "", Password: []byte(token), HasPassword: true}
	if o.receiveMax > 0 {
		c.Props.ReceiveMaximum = o.receiveMax
	}
	d.send(c)
	ack, ok := d.read().(*mqtt.Connack)
	if !ok {
		e.t.Fatal("first packet is no CONNACK")
	}
	return d, ack
}

func (d *mqttDevice) send(p mqtt.Packet) {
	d.t.Helper()
	b, err := mqtt.Encode(nil, p, d.level)
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := d.nc.Write(b); err != nil {
		d.t.Fatalf("mqtt write: %v", err)
	}
}

// next reads one packet; io.EOF once the server closed the connection.
func (d *mqttDevice) next() (mqtt.Packet, error) {
	_ = d.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	return mqtt.ReadPacket(d.r, d.level, 1<<22)
}

func (d *mqttDevice) read() mqtt.Packet {
	d.t.Helper()
	p, err := d.next()
	if err != nil {
		d.t.Fatalf("mqtt read: %v", err)
	}
	return p
}

func (d *mqttDevice) publish() *mqtt.Publish {
	d.t.Helper()
	p := d.read()
	pub, ok := p.(*mqtt.Publish)
	if !ok {
		d.t.Fatalf("got %T %+v, want a PUBLISH", p, p)
	}
	return pub
}

// disconnected reads up to the server's DISCONNECT and the close after it.
func (d *mqttDevice) disconnected() *mqtt.Disconnect {
	d.t.Helper()
	p := d.read()
	dc, ok := p.(*mqtt.Disconnect)
	if !ok {
		d.t.Fatalf("got %T %+v, want a DISCONNECT", p, p)
	}
	if _, err := d.next(); !errors.Is(err, io.EOF) {
		d.t.Fatalf("after DISCONNECT: %v, want the connection closed", err)
	}
	return dc
}

func pubSeq(t *testing.T, p *mqtt.Publish) int64 {
	t.Helper()
	seq, err := strconv.ParseInt(p.Props.UserValue(boat.MQTTPropSeq), 10, 64)
	if err != nil {
		t.Fatalf("PUBLISH seq property: %v", err)
	}
	return seq
}

// TestMQTTDevice: a device on MQTT 5 with clean start false gets the 1,000
// messages stored while it was offline as QoS 1 PUBLISHes on u/<uid>, in
// order, at most its Receive Maximum in flight; its PUBACKs are gomsg's
// ACKs (the store empties); then live ones. Its own topic is granted QoS 1,
// another user's is refused 0x87. A second session of the user on the
// platform (over gRPC) ends it with DISCONNECT 0x8E NEW_SESSION.
func TestMQTTDevice(t *testing.T) {
	t.Parallel()
	e := start(t, withMQTT(), withPlatforms(pullPlatforms))
	const n = 1000
	stored := e.pushBacklog("alice", "ios", "stored-", n)
	e.waitZcard("alice", "ios", n)

	d, ack := e.dialMQTT(e.gomsg.Boat.MQTTAddr(), mqttDial{uid: "alice", platform: "ios", username: "alice", receiveMax: 20})
	if ack.ReasonCode != mqtt.Success || !ack.SessionPresent || ack.Props.MaximumQoS != 1 || ack.Props.UserValue("uid") != "alice" {
		t.Fatalf("CONNACK %+v", ack)
	}
	d.send(&mqtt.Subscribe{PacketID: 1, Subs: []mqtt.Subscription{{Filter: "u/alice", QoS: 1}, {Filter: "u/bob", QoS: 1}}})
	var suback *mqtt.Suback
	var inflight []uint16
	for i := 0; i < n; {
		p := d.read()
		switch p := p.(type) {
		case *mqtt.Suback:
			suback = p
			continue
		case *mqtt.Publish:
			if p.Topic != "u/alice" || p.QoS != 1 || string(p.Payload) != fmt.Sprint("stored-", i) || pubSeq(t, p) != stored[i] {
				t.Fatalf("message %d: topic %s qos %d payload %q seq %d, want stored-%d seq %d", i, p.Topic, p.QoS, p.Payload, pubSeq(t, p), i, stored[i])
			}
			inflight = append(inflight, p.PacketID)
			i++
		default:
			t.Fatalf("after %d messages, %d in flight: got %T %+v", i, len(inflight), p, p)
		}
		// ACK in runs, when nothing more has arrived: the boat never has
		// more than 20 in flight.
		if len(inflight) > 20 {
			t.Fatalf("%d PUBLISHes in flight, Receive Maximum 20", len(inflight))
		}
		if d.r.Buffered() == 0 || i == n {
			for _, id := range inflight {
				d.send(&mqtt.Ack{Type: mqtt.TypePuback, PacketID: id})
			}
			inflight = nil
		}
	}
	if suback == nil {
		if suback, _ = d.read().(*mqtt.Suback); suback == nil {
			t.Fatal("no SUBACK")
		}
	}
	if !bytes.Equal(suback.ReasonCodes, []byte{mqtt.GrantedQoS1, mqtt.NotAuthorized}) || !strings.Contains(suback.Props.ReasonString, "u/bob") {
		t.Fatalf("SUBACK %+v, want [1 0x87] naming u/bob", suback)
	}
	e.waitZcard("alice", "ios", 0)

	seq := e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, MsgOptions: optAck | optOffline}, "live")
	p := d.publish()
	if string(p.Payload) != "live" || pubSeq(t, p) != seq || p.QoS != 1 || p.Props.UserValue(boat.MQTTPropOptions) != fmt.Sprint(optAck|optOffline) ||
		p.Props.ContentType != "text/plain; charset=utf-8" {
		t.Fatalf("live PUBLISH %+v", p)
	}
	// Ping goes through the session.
	d.send(&mqtt.Pingreq{})
	if _, ok := d.read().(*mqtt.Pingresp); !ok {
		t.Fatal("no PINGRESP")
	}
	d.send(&mqtt.Ack{Type: mqtt.TypePuback, PacketID: p.PacketID})
	// The ACK reached carrier: nothing is stored.
	e.waitZcard("alice", "ios", 0)

	e.dial("alice", "ios", true)
	dc := d.disconnected()
	if dc.ReasonCode != mqtt.SessionTakenOver || !strings.HasPrefix(dc.Props.ReasonString, "NEW_SESSION: ") || dc.Props.UserValue(boat.MQTTPropCloseCode) != "4601" {
		t.Fatalf("DISCONNECT %+v, want 0x8e NEW_SESSION close code 4601", dc)
	}
}

// TestMQTTCleanStart: clean start true is a live-only session: nothing
// stored is replayed, live messages come.
func TestMQTTCleanStart(t *testing.T) {
	t.Parallel()
	e := start(t, withMQTT())
	e.pushOffline("carol", "android", "stored-", 2)
	e.waitZcard("carol", "android", 2)
	d, ack := e.dialMQTT(e.gomsg.Boat.MQTTAddr(), mqttDial{uid: "carol", platform: "android", cleanStart: true})
	if ack.ReasonCode != mqtt.Success || ack.SessionPresent {
		t.Fatalf("CONNACK %+v", ack)
	}
	seq := e.pushText(&pushpb.PushRequest{Uids: []string{"carol"}, MsgOptions: optAck}, "live")
	p := d.publish()
	if string(p.Payload) != "live" || pubSeq(t, p) != seq {
		t.Fatalf("first PUBLISH %q seq %d, want the live one %d", p.Payload, pubSeq(t, p), seq)
	}
	if e.zcard("carol", "android") != 2 {
		t.Fatal("stored messages touched by a live-only session")
	}
}

// TestMQTTRefusals: a refused token is a CONNACK 0x86 with a reason string
// and nothing else; so are a user name that is not the token's uid and a
// missing password.
func TestMQTTRefusals(t *testing.T) {
	t.Parallel()
	e := start(t, withMQTT())
	addr := e.gomsg.Boat.MQTTAddr()
	bad, _ := auth.Mint("another secret at least 32 bytes long!!", "dave", "ios", time.Hour)
	for _, c := range []struct {
		name   string
		dial   mqttDial
		code   byte
		reason string
	}{
		{"bad token", mqttDial{uid: "dave", platform: "ios", token: bad}, mqtt.BadUserNameOrPassword, "INVALID_TOKEN"},
		{"user name", mqttDial{uid: "dave", platform: "ios", username: "eve"}, mqtt.BadUserNameOrPassword, `user name "eve" is not the token's uid`},
	} {
		d, ack := e.dialMQTT(addr, c.dial)
		if ack.ReasonCode != c.code || !strings.Contains(ack.Props.ReasonString, c.reason) || ack.Props.UserValue(boat.MQTTPropCloseCode) != "4516" {
			t.Errorf("%s: CONNACK %#x %q, want %#x with %q", c.name, ack.ReasonCode, ack.Props.ReasonString, c.code, c.reason)
		}
		if _, err := d.next(); !errors.Is(err, io.EOF) {
			t.Errorf("%s: after the refusal: %v, want the connection closed", c.name, err)
		}
	}
	// No password at all.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	d := &mqttDevice{t: t, nc: nc, r: bufio.NewReader(nc), level: mqtt.V5}
	d.send(&mqtt.Connect{ProtocolLevel: mqtt.V5, ClientID: "x"})
	if ack, ok := d.read().(*mqtt.Connack); !ok || ack.ReasonCode != mqtt.BadUserNameOrPassword || !strings.Contains(ack.Props.ReasonString, "password") {
		t.Fatalf("no password: %+v", ack)
	}
}

// TestMQTTAbuse: a malformed packet, a packet over the size bound and a
// PUBLISH from the device each end the session with DISCONNECT and a clear
// reason code; a connect past the connect rate gets CONNACK 0x9F.
func TestMQTTAbuse(t *testing.T) {
	t.Parallel()
	e := start(t, withMQTT(), func(c *app.ClusterConfig) {
		c.Boat.GRPC.MaxRecvBytes = 64 << 10
		c.Boat.ConnectRatePerIP = 5
	})
	addr := e.gomsg.Boat.MQTTAddr()
	raw := func(d *mqttDevice, b []byte) {
		if _, err := d.nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		do   func(d *mqttDevice)
		code byte
	}{
		{"malformed", func(d *mqttDevice) { raw(d, []byte{0x82, 3, 0, 1, 0x05}) }, mqtt.MalformedPacket},
		{"oversized", func(d *mqttDevice) { raw(d, []byte{0x82, 0x80, 0x80, 0x80, 0x01}) }, mqtt.PacketTooLarge},
		{"publish", func(d *mqttDevice) { d.send(&mqtt.Publish{Topic: "u/x", Payload: []byte("hi")}) }, mqtt.NotAuthorized},
	} {
		d, ack := e.dialMQTT(addr, mqttDial{uid: "mal-" + c.name, platform: "ios"})
		if ack.ReasonCode != mqtt.Success {
			t.Fatalf("%s: CONNACK %#x", c.name, ack.ReasonCode)
		}
		c.do(d)
		if dc := d.disconnected(); dc.ReasonCode != c.code || dc.Props.ReasonString == "" {
			t.Errorf("%s: DISCONNECT %#x %q, want %#x with a reason", c.name, dc.ReasonCode, dc.Props.ReasonString, c.code)
		}
	}
	// A CONNECT flood: past the per-address rate (5 a second, a burst of
	// 5), connects are refused.
	refused := 0
	for i := range 12 {
		_, ack := e.dialMQTT(addr, mqttDial{uid: fmt.Sprint("flood-", i), platform: "ios"})
		if ack.ReasonCode == mqtt.ConnectionRateExceeded && strings.Contains(ack.Props.ReasonString, "--connect-rate-per-ip") {
			refused++
		} else if ack.ReasonCode != mqtt.Success {
			t.Fatalf("flood connect %d: CONNACK %#x %q", i, ack.ReasonCode, ack.Props.ReasonString)
		}
	}
	if refused == 0 {
		t.Fatal("no connect refused past --connect-rate-per-ip")
	}
}

// TestMQTTSlowConsumer: a device that never reads is kicked as a slow
// consumer: its connection ends within the write timeout and a bit.
func TestMQTTSlowConsumer(t *testing.T) {
	t.Parallel()
	e := start(t, withMQTT(), func(c *app.ClusterConfig) { c.Boat.WriteTimeout = 500 * time.Millisecond })
	d, ack := e.dialMQTT(e.gomsg.Boat.MQTTAddr(), mqttDial{uid: "slow", platform: "ios"})
	if ack.ReasonCode != mqtt.Success {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	big := strings.Repeat("x", 60<<10)
	for range 100 {
		_, err := e.push.Push(context.Background(), &pushpb.PushRequest{Uids: []string{"slow"}, MsgBodies: []*anypb.Any{text(big)}})
		if err != nil {
			t.Fatal(err)
		}
	}
	kicks := func() float64 {
		return promtest.ToFloat64(e.gomsg.Metrics.Kickouts.WithLabelValues("SLOW_CONSUMER"))
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if kicks() < 1 {
			return errors.New("not kicked as a slow consumer yet")
		}
		return nil
	})
	if n := promtest.ToFloat64(e.gomsg.Metrics.SessionsOnline.WithLabelValues("boat-1")); n != 0 {
		t.Fatalf("%v sessions online after the kick", n)
	}
	// The connection is closed: reading drains what was sent, then ends.
	for {
		if _, err := d.next(); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("after the kick: %v, want the connection closed", err)
			}
			break
		}
	}
}

// TestMQTTRooms: rooms are QoS 0 topics r/<room>; a SUBSCRIBE is granted
// for the rooms the token allows and refused 0x87 for the others; a
// broadcast reaches the room's topic; UNSUBSCRIBE leaves.
func TestMQTTRooms(t *testing.T) {
	t.Parallel()
	e := start(t, withMQTT())
	d, _ := e.dialMQTT(e.gomsg.Boat.MQTTAddr(), mqttDial{uid: "rita", platform: "web", rooms: []string{"lobby"}})
	d.send(&mqtt.Subscribe{PacketID: 5, Subs: []mqtt.Subscription{{Filter: "r/lobby"}, {Filter: "r/secret"}, {Filter: "r/#"}}})
	sa, ok := d.read().(*mqtt.Suback)
	if !ok || sa.PacketID != 5 || !bytes.Equal(sa.ReasonCodes, []byte{mqtt.Success, mqtt.NotAuthorized, mqtt.WildcardSubsNotSupported}) {
		t.Fatalf("SUBACK %+v, want [0 0x87 0xa2]", sa)
	}
	e.waitRoomOnline("lobby", 1)
	seqs := e.broadcast([]string{"lobby"}, "one", "two")
	for i, want := range []string{"one", "two"} {
		p := d.publish()
		if p.Topic != "r/lobby" || p.QoS != 0 || string(p.Payload) != want || pubSeq(t, p) != seqs[i] {
			t.Fatalf("room PUBLISH %s qos %d %q, want r/lobby qos 0 %q", p.Topic, p.QoS, p.Payload, want)
		}
	}
	d.send(&mqtt.Unsubscribe{PacketID: 6, Filters: []string{"r/lobby"}})
	if ua, ok := d.read().(*mqtt.Unsuback); !ok || !bytes.Equal(ua.ReasonCodes, []byte{mqtt.Success}) {
		t.Fatalf("UNSUBACK %+v", ua)
	}
	e.waitRoomOnline("lobby", 0)
}

// TestMQTTDrain: a draining boat ends its MQTT sessions with DISCONNECT 0x8B;
// the message the device had not PUBACKed is stored, and comes again when
// it reconnects (clean start false) to another boat.
func TestMQTTDrain(t *testing.T) {
	t.Parallel()
	e := start(t, withServices("station", "carrier"), withAckWait(30*time.Second))
	withID := func(id string) func(c *app.ClusterConfig) {
		return func(c *app.ClusterConfig) { c.Boat.ID = id; c.Boat.MQTTAddr = "127.0.0.1:0" }
	}
	b1 := e.startExtraWith(withID("boat-a"), "boat")
	e.waitBoat("boat-a")
	d, _ := e.dialMQTT(b1.Boat.MQTTAddr(), mqttDial{uid: "dan", platform: "ios"})
	seq := e.pushText(&pushpb.PushRequest{Uids: []string{"dan"}, MsgOptions: optAck | optOffline}, "in flight")
	if p := d.publish(); pubSeq(t, p) != seq {
		t.Fatalf("got seq %d, want %d", pubSeq(t, p), seq)
	}
	if err := b1.Stop(); err != nil {
		t.Fatal(err)
	}
	if dc := d.disconnected(); dc.ReasonCode != mqtt.ServerShuttingDown || !strings.HasPrefix(dc.Props.ReasonString, "SERVER_DRAINING") {
		t.Fatalf("DISCONNECT %+v, want 0x8b SERVER_DRAINING", dc)
	}
	e.waitZcard("dan", "ios", 1)
	b2 := e.startExtraWith(withID("boat-b"), "boat")
	e.waitBoat("boat-b")
	d2, _ := e.dialMQTT(b2.Boat.MQTTAddr(), mqttDial{uid: "dan", platform: "ios"})
	p := d2.publish()
	if pubSeq(t, p) != seq || string(p.Payload) != "in flight" {
		t.Fatalf("replayed %q seq %d, want seq %d", p.Payload, pubSeq(t, p), seq)
	}
	d2.send(&mqtt.Ack{Type: mqtt.TypePuback, PacketID: p.PacketID})
	e.waitZcard("dan", "ios", 0)
}

// TestMQTTMosquittoSub: Debian's mosquitto_sub, a client nobody here wrote,
// as the device: MQTT 5, clean start false, QoS 1 on u/<uid>; it gets the
// stored messages and then a live one, in order, and its PUBACKs empty the
// store.
func TestMQTTMosquittoSub(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("mosquitto_sub")
	if err != nil {
		t.Fatalf("mosquitto_sub is needed (Debian package mosquitto-clients; scripts/test.sh installs it): %v", err)
	}
	e := start(t, withMQTT())
	e.pushOffline("alice", "ios", "stored-", 3)
	e.waitZcard("alice", "ios", 3)
	token, _ := auth.Mint(secret, "alice", "ios", time.Hour)
	host, port, _ := net.SplitHostPort(e.gomsg.Boat.MQTTAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-V", "mqttv5", "-h", host, "-p", port, "-i", "dev-1", "-c",
		"-u", "alice", "-P", token, "-q", "1", "-t", "u/alice", "-v", "-C", "4")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.waitZcard("alice", "ios", 0) // replayed and PUBACKed
	e.pushText(&pushpb.PushRequest{Uids: []string{"alice"}, MsgOptions: optAck | optOffline}, "live")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mosquitto_sub: %v: %s", err, stderr.String())
	}
	want := "u/alice stored-0\nu/alice stored-1\nu/alice stored-2\nu/alice live\n"
	if out.String() != want {
		t.Fatalf("mosquitto_sub printed %q, want %q", out.String(), want)
	}
	e.waitZcard("alice", "ios", 0)
}

// TestMQTT311AndKeepAlive: an MQTT 3.1.1 client gets its messages the same
// way (PUBACK is the ACK), and a refused token is the 3.1.1 return code 4;
// an MQTT 5 client silent past 1.5 times its keep alive is ended with
// DISCONNECT 0x8D.
func TestMQTT311AndKeepAlive(t *testing.T) {
	t.Parallel()
	e := start(t, withMQTT())
	addr := e.gomsg.Boat.MQTTAddr()
	dial311 := func(token string) (*mqttDevice, *mqtt.Connack) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		d := &mqttDevice{t: t, nc: nc, r: bufio.NewReader(nc), level: mqtt.V311}
		d.send(&mqtt.Connect{ProtocolLevel: mqtt.V311, KeepAlive: 30, ClientID: "old-1", Password: []byte(token), HasPassword: true,
			Username: "olga", HasUsername: true})
		ack, _ := d.read().(*mqtt.Connack)
		return d, ack
	}
	bad, _ := auth.Mint("another secret at least 32 bytes long!!", "olga", "ios", time.Hour)
	if _, ack := dial311(bad); ack == nil || ack.ReasonCode != 4 {
		t.Fatalf("3.1.1 refused token: CONNACK %+v, want return code 4", ack)
	}
	token, _ := auth.Mint(secret, "olga", "ios", time.Hour)
	d, ack := dial311(token)
	if ack == nil || ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("3.1.1 CONNACK %+v", ack)
	}
	seq := e.pushText(&pushpb.PushRequest{Uids: []string{"olga"}, MsgOptions: optAck | optOffline}, "old")
	p := d.publish()
	if string(p.Payload) != "old" || p.QoS != 1 || p.Topic != "u/olga" {
		t.Fatalf("3.1.1 PUBLISH %+v", p)
	}
	d.send(&mqtt.Ack{Type: mqtt.TypePuback, PacketID: p.PacketID})
	if e.waitZcard("olga", "ios", 0); seq == 0 {
		t.Fatal("no seq")
	}

	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	k := &mqttDevice{t: t, nc: nc, r: bufio.NewReader(nc), level: mqtt.V5}
	token, _ = auth.Mint(secret, "kim", "ios", time.Hour)
	k.send(&mqtt.Connect{ProtocolLevel: mqtt.V5, KeepAlive: 1, ClientID: "k", Password: []byte(token), HasPassword: true})
	if ack, ok := k.read().(*mqtt.Connack); !ok || ack.ReasonCode != mqtt.Success {
		t.Fatalf("CONNACK %+v", ack)
	}
	start := time.Now()
	if dc := k.disconnected(); dc.ReasonCode != mqtt.KeepAliveTimeout {
		t.Fatalf("DISCONNECT %+v, want 0x8d", dc)
	}
	if el := time.Since(start); el < time.Second || el > 5*time.Second {
		t.Fatalf("keep alive of 1 s ended the session after %v, want about 1.5 s", el)
	}
}

// TestMQTTRefusedPipelined: a SUBSCRIBE sent right behind a CONNECT that is
// refused once station answered (a user name not the token's uid) leaves
// nothing of the session waiting: the cluster's stop, which waits for every
// session goroutine, ends in time.
func TestMQTTRefusedPipelined(t *testing.T) {
	t.Parallel()
	e := start(t, withMQTT())
	addr := e.gomsg.Boat.MQTTAddr()
	token, _ := auth.Mint(secret, "fay", "ios", time.Hour)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	d := &mqttDevice{t: t, nc: nc, r: bufio.NewReader(nc), level: mqtt.V5}
	d.send(&mqtt.Connect{ProtocolLevel: mqtt.V5, ClientID: "f", Username: "eve", HasUsername: true, Password: []byte(token), HasPassword: true})
	d.send(&mqtt.Subscribe{PacketID: 1, Subs: []mqtt.Subscription{{Filter: "u/fay", QoS: 1}}})
	if ack, ok := d.read().(*mqtt.Connack); !ok || ack.ReasonCode != mqtt.BadUserNameOrPassword {
		t.Fatalf("pipelined: %+v", ack)
	}
	_ = nc.Close()
	stopped := make(chan error, 1)
	go func() { stopped <- e.gomsg.Stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cluster did not stop within 20 s: a refused MQTT session's goroutine is still waiting")
	}
}
