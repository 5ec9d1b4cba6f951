package mqtt

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzReadPacket: any input is read without a panic, within the size bound;
// what is read encodes to bytes that read back to the same encoding.
func FuzzReadPacket(f *testing.F) {
	for _, p := range []Packet{
		&Connect{ProtocolLevel: V5, ClientID: "d", HasUsername: true, Username: "u", HasPassword: true, Password: []byte("t"),
			Props: Props{Present: 1 << PropSessionExpiry, SessionExpiry: 60}},
		&Publish{QoS: 1, Topic: "u/a", PacketID: 1, Payload: []byte("x"), Props: Props{User: []UserProperty{{"k", "v"}}}},
		&Subscribe{PacketID: 1, Subs: []Subscription{{Filter: "u/a", QoS: 1}}},
		&Ack{Type: TypePuback, PacketID: 1},
		&Disconnect{ReasonCode: 0x8e, Props: Props{ReasonString: "r"}},
	} {
		b, _ := Encode(nil, p, V5)
		f.Add(b, byte(V5))
	}
	f.Add([]byte{0xc0, 0}, byte(V311))
	f.Fuzz(func(t *testing.T, in []byte, level byte) {
		level %= 6
		const max = 4096
		p, err := ReadPacket(bufio.NewReader(bytes.NewReader(in)), level, max)
		if err != nil {
			return
		}
		if level == 0 {
			level = p.(*Connect).ProtocolLevel
		}
		b1, err := Encode(nil, p, level)
		if err != nil {
			t.Fatalf("encode %T read from % x: %v", p, in, err)
		}
		read := level
		if _, ok := p.(*Connect); ok {
			read = 0
		}
		p2, err := ReadPacket(bufio.NewReader(bytes.NewReader(b1)), read, 1<<20)
		if err != nil {
			t.Fatalf("re-read %T (% x): %v", p, b1, err)
		}
		b2, _ := Encode(nil, p2, level)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("encoding not stable:\n% x\n% x", b1, b2)
		}
	})
}
