package mqtt

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

func roundTrip(t *testing.T, p Packet, level byte) Packet {
	t.Helper()
	b, err := Encode(nil, p, level)
	if err != nil {
		t.Fatal(err)
	}
	read := level
	if _, ok := p.(*Connect); ok {
		read = 0
	}
	got, err := ReadPacket(bufio.NewReader(bytes.NewReader(b)), read, 1<<20)
	if err != nil {
		t.Fatalf("read back %T: %v", p, err)
	}
	return got
}

// TestRoundTrip: every packet type encodes and decodes to itself, in MQTT 5
// with properties.
func TestRoundTrip(t *testing.T) {
	for _, p := range []Packet{
		&Connect{ProtocolLevel: V5, CleanStart: true, KeepAlive: 30, ClientID: "dev-1", Username: "alice", HasUsername: true,
			Password: []byte("tok"), HasPassword: true, Props: Props{Present: 1<<PropSessionExpiry | 1<<PropReceiveMaximum, SessionExpiry: 3600, ReceiveMaximum: 10}},
		&Connack{SessionPresent: true, ReasonCode: NotAuthorized, Props: Props{Present: 1<<PropReasonString | 1<<PropRetainAvailable, ReasonString: "no"}},
		&Publish{QoS: 1, Topic: "u/alice", PacketID: 7, Payload: []byte("hi"),
			Props: Props{Present: 1 << PropUser, User: []UserProperty{{"seq", "1"}, {"seq", "2"}}}},
		&Publish{Topic: "r/lobby", Payload: []byte{}},
		&Ack{Type: TypePuback, PacketID: 9},
		&Ack{Type: TypePuback, PacketID: 9, ReasonCode: NoMatchingSubscribers, Props: Props{Present: 1 << PropReasonString, ReasonString: "x"}},
		&Subscribe{PacketID: 3, Subs: []Subscription{{Filter: "u/alice", QoS: 1}, {Filter: "r/a", Options: 4}}},
		&Suback{PacketID: 3, ReasonCodes: []byte{1, 0x87}},
		&Unsubscribe{PacketID: 4, Filters: []string{"r/a"}},
		&Unsuback{PacketID: 4, ReasonCodes: []byte{0}},
		&Pingreq{}, &Pingresp{},
		&Disconnect{ReasonCode: SessionTakenOver, Props: Props{Present: 1 << PropReasonString, ReasonString: "NEW_SESSION"}},
	} {
		got := roundTrip(t, p, V5)
		if !reflect.DeepEqual(got, p) {
			t.Errorf("round trip of %T:\n got %+v\nwant %+v", p, got, p)
		}
	}
}

// TestReadRefuses: bad input is an *Error with the reason code a server
// answers with.
func TestReadRefuses(t *testing.T) {
	connect := func(level byte, flags byte) []byte {
		b := []byte{0, 4, 'M', 'Q', 'T', 'T', level, flags, 0, 30}
		if level == V5 {
			b = append(b, 0)
		}
		b = append(b, 0, 1, 'c')
		return append([]byte{0x10, byte(len(b))}, b...)
	}
	for _, c := range []struct {
		name  string
		in    []byte
		level byte
		code  byte
	}{
		{"too large", []byte{0x30, 0xff, 0xff, 0x03}, V5, PacketTooLarge},
		{"varint of 5 bytes", []byte{0x30, 0xff, 0xff, 0xff, 0xff, 0x01}, V5, MalformedPacket},
		{"publish before connect", []byte{0x30, 0}, 0, ProtocolError},
		{"level 3", connect(3, 0), 0, UnsupportedProtocolVersion},
		{"will", connect(V5, 0x04), 0, NotAuthorized},
		{"reserved flag", connect(V5, 0x01), 0, MalformedPacket},
		{"qos 3", []byte{0x36, 5, 0, 1, 'a', 0, 1}, V5, MalformedPacket},
		{"subscribe flags", []byte{0x80, 6, 0, 1, 0, 1, 'a', 0}, V5, MalformedPacket},
		{"subscribe empty", []byte{0x82, 3, 0, 1, 0}, V5, ProtocolError},
		{"bad utf8", []byte{0x30, 5, 0, 2, 0xff, 0xfe, 0}, V5, MalformedPacket},
		{"nul in string", []byte{0x30, 5, 0, 2, 'a', 0, 0}, V5, MalformedPacket},
		{"unknown property", []byte{0x30, 7, 0, 1, 'a', 2, 0x3f, 0, 0}, V5, MalformedPacket},
		{"duplicate property", []byte{0x30, 8, 0, 1, 'a', 4, 1, 0, 1, 0}, V5, ProtocolError},
		{"trailing bytes", []byte{0xc0, 1, 0}, V5, MalformedPacket},
		{"second connect", connect(V5, 0), V5, ProtocolError},
	} {
		_, err := ReadPacket(bufio.NewReader(bytes.NewReader(c.in)), c.level, 1024)
		var e *Error
		if !errors.As(err, &e) || e.Code != c.code {
			t.Errorf("%s: got %v, want code %#x", c.name, err, c.code)
		}
	}
	if _, err := ReadPacket(bufio.NewReader(bytes.NewReader([]byte{0x30, 10, 0})), V5, 1024); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short body: %v", err)
	}
}

// TestTooLargeUnread: a packet over the bound is refused from its header;
// its body is never read.
func TestTooLargeUnread(t *testing.T) {
	r := &countingReader{r: bytes.NewReader(append([]byte{0x30, 0x80, 0x80, 0x40}, make([]byte, 1<<20)...))}
	_, err := ReadPacket(bufio.NewReaderSize(r, 16), V5, 1024)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if r.n > 16 {
		t.Fatalf("read %d bytes of a refused packet", r.n)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// TestV311: MQTT 3.1.1 packets carry no properties and no reason codes where
// the level has none.
func TestV311(t *testing.T) {
	b, _ := Encode(nil, &Connack{ReasonCode: 5, Props: Props{ReasonString: "dropped"}}, V311)
	if !bytes.Equal(b, []byte{0x20, 2, 0, 5}) {
		t.Fatalf("CONNACK 3.1.1: % x", b)
	}
	b, _ = Encode(nil, &Disconnect{ReasonCode: SessionTakenOver}, V311)
	if !bytes.Equal(b, []byte{0xe0, 0}) {
		t.Fatalf("DISCONNECT 3.1.1: % x", b)
	}
	got := roundTrip(t, &Connect{ProtocolLevel: V311, ClientID: "c", HasUsername: true, Username: "u", HasPassword: true, Password: []byte("p")}, V311)
	if c := got.(*Connect); c.ProtocolLevel != V311 || string(c.Password) != "p" {
		t.Fatalf("CONNECT 3.1.1: %+v", c)
	}
}
