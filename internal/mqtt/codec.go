package mqtt

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"unicode/utf8"
)

// maxRemaining is the largest remaining length four varint bytes can say.
const maxRemaining = 268_435_455

// ReadPacket reads one packet of the given protocol level (0 before the
// CONNECT: only a CONNECT is taken, of either level). A packet whose total
// size is more than maxSize is refused with an *Error of code PacketTooLarge
// (wrapping ErrTooLarge) before its body is read.
func ReadPacket(r *bufio.Reader, level byte, maxSize int) (Packet, error) {
	first, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	remaining, n, err := readVarint(r)
	if err != nil {
		return nil, err
	}
	if total := 1 + n + remaining; total > maxSize {
		return nil, &Error{Code: PacketTooLarge, Msg: fmt.Sprintf("%v: %d bytes, at most %d", ErrTooLarge, total, maxSize), err: ErrTooLarge}
	}
	body := make([]byte, remaining)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return Decode(first, body, level)
}

// readVarint reads a remaining length: its value and how many bytes it took.
func readVarint(r io.ByteReader) (v, n int, err error) {
	mult := 1
	for {
		b, err := r.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, n, err
		}
		n++
		v += int(b&0x7f) * mult
		if b&0x80 == 0 {
			return v, n, nil
		}
		if n == 4 {
			return 0, n, malformed("variable byte integer longer than 4 bytes")
		}
		mult *= 128
	}
}

// Decode decodes a packet from its first byte and its body.
func Decode(first byte, body []byte, level byte) (Packet, error) {
	typ, flags := first>>4, first&0x0f
	if level == 0 && typ != TypeConnect {
		return nil, protocolErr("first packet is type %d, want CONNECT", typ)
	}
	if level != 0 && typ == TypeConnect {
		return nil, protocolErr("second CONNECT")
	}
	wantFlags := byte(0)
	switch typ {
	case TypePublish:
		wantFlags = flags // checked below
	case TypePubrel, TypeSubscribe, TypeUnsubscribe:
		wantFlags = 2
	}
	if flags != wantFlags {
		return nil, malformed("packet type %d with flags %#x", typ, flags)
	}
	d := &decoder{b: body, v5: level == V5}
	var p Packet
	switch typ {
	case TypeConnect:
		p = d.connect()
	case TypeConnack:
		p = d.connack()
	case TypePublish:
		p = d.publish(flags)
	case TypePuback, TypePubrec, TypePubrel, TypePubcomp:
		p = d.ack(typ)
	case TypeSubscribe:
		p = d.subscribe()
	case TypeSuback:
		s := &Suback{PacketID: d.u16()}
		d.props(&s.Props)
		s.ReasonCodes = d.rest()
		p = s
	case TypeUnsubscribe:
		p = d.unsubscribe()
	case TypeUnsuback:
		u := &Unsuback{PacketID: d.u16()}
		d.props(&u.Props)
		if d.v5 {
			u.ReasonCodes = d.rest()
		}
		p = u
	case TypePingreq:
		p = &Pingreq{}
	case TypePingresp:
		p = &Pingresp{}
	case TypeDisconnect:
		dc := &Disconnect{}
		if d.v5 && len(d.b) > 0 {
			dc.ReasonCode = d.byte()
			if len(d.b) > 0 {
				d.props(&dc.Props)
			}
		}
		p = dc
	default:
		return nil, protocolErr("packet type %d not supported", typ)
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) > 0 {
		return nil, malformed("%d bytes after a packet of type %d", len(d.b), typ)
	}
	return p, nil
}

// decoder reads a packet's body; the first error sticks.
type decoder struct {
	b   []byte
	v5  bool
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) need(n int) bool {
	if d.err != nil {
		return false
	}
	if len(d.b) < n {
		d.fail(malformed("packet ends early"))
		return false
	}
	return true
}

func (d *decoder) byte() byte {
	if !d.need(1) {
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u16() uint16 {
	if !d.need(2) {
		return 0
	}
	v := binary.BigEndian.Uint16(d.b)
	d.b = d.b[2:]
	return v
}

func (d *decoder) u32() uint32 {
	if !d.need(4) {
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) varint() int {
	v, mult := 0, 1
	for i := range 4 {
		b := d.byte()
		if d.err != nil {
			return 0
		}
		v += int(b&0x7f) * mult
		if b&0x80 == 0 {
			return v
		}
		if i == 3 {
			d.fail(malformed("variable byte integer longer than 4 bytes"))
			return 0
		}
		mult *= 128
	}
	return v
}

func (d *decoder) binary() []byte {
	n := int(d.u16())
	if !d.need(n) {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// str reads a UTF-8 string: well-formed, without U+0000.
func (d *decoder) str() string {
	b := d.binary()
	if d.err != nil {
		return ""
	}
	if !validString(b) {
		d.fail(malformed("string is not well-formed UTF-8 without U+0000"))
		return ""
	}
	return string(b)
}

func validString(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c == 0 {
			return false
		}
	}
	return true
}

func (d *decoder) rest() []byte {
	v := d.b
	d.b = nil
	return v
}

// props reads an MQTT 5 property list (nothing in MQTT 3.1.1).
func (d *decoder) props(p *Props) {
	if !d.v5 || d.err != nil {
		return
	}
	n := d.varint()
	if !d.need(n) {
		return
	}
	sub := &decoder{b: d.b[:n], v5: true}
	d.b = d.b[n:]
	for len(sub.b) > 0 && sub.err == nil {
		id := sub.varint()
		if sub.err != nil {
			break
		}
		if id > 0x3f {
			sub.fail(malformed("property id %#x", id))
			break
		}
		if p.Has(byte(id)) && id != PropUser && id != PropSubscriptionID {
			sub.fail(protocolErr("property %#x given twice", id))
			break
		}
		p.Set(byte(id))
		switch id {
		case PropPayloadFormat:
			p.PayloadFormat = sub.byte()
		case PropMessageExpiry:
			p.MessageExpiry = sub.u32()
		case PropContentType:
			p.ContentType = sub.str()
		case PropResponseTopic:
			p.ResponseTopic = sub.str()
		case PropCorrelationData:
			p.CorrelationData = sub.binary()
		case PropSubscriptionID:
			v := sub.varint()
			if v == 0 && sub.err == nil {
				sub.fail(protocolErr("subscription identifier 0"))
			}
			p.SubscriptionIDs = append(p.SubscriptionIDs, uint32(v))
		case PropSessionExpiry:
			p.SessionExpiry = sub.u32()
		case PropAssignedClientID:
			p.AssignedClientID = sub.str()
		case PropServerKeepAlive:
			p.ServerKeepAlive = sub.u16()
		case PropAuthMethod:
			p.AuthMethod = sub.str()
		case PropAuthData:
			p.AuthData = sub.binary()
		case PropRequestProblemInfo:
			p.RequestProblemInfo = sub.byte()
		case PropWillDelay:
			p.WillDelay = sub.u32()
		case PropRequestResponseInfo:
			p.RequestResponseInfo = sub.byte()
		case PropResponseInfo:
			p.ResponseInfo = sub.str()
		case PropServerReference:
			p.ServerReference = sub.str()
		case PropReasonString:
			p.ReasonString = sub.str()
		case PropReceiveMaximum:
			if p.ReceiveMaximum = sub.u16(); p.ReceiveMaximum == 0 && sub.err == nil {
				sub.fail(protocolErr("receive maximum 0"))
			}
		case PropTopicAliasMaximum:
			p.TopicAliasMaximum = sub.u16()
		case PropTopicAlias:
			p.TopicAlias = sub.u16()
		case PropMaximumQoS:
			p.MaximumQoS = sub.byte()
		case PropRetainAvailable:
			p.RetainAvailable = sub.byte()
		case PropUser:
			k := sub.str()
			v := sub.str()
			p.User = append(p.User, UserProperty{Key: k, Value: v})
		case PropMaxPacketSize:
			if p.MaxPacketSize = sub.u32(); p.MaxPacketSize == 0 && sub.err == nil {
				sub.fail(protocolErr("maximum packet size 0"))
			}
		case PropWildcardAvailable:
			p.WildcardAvailable = sub.byte()
		case PropSubIDAvailable:
			p.SubIDAvailable = sub.byte()
		case PropSharedAvailable:
			p.SharedAvailable = sub.byte()
		default:
			sub.fail(malformed("unknown property id %#x", id))
		}
	}
	if sub.err != nil {
		d.fail(sub.err)
	}
}

func (d *decoder) connect() *Connect {
	c := &Connect{}
	name := d.str()
	c.ProtocolLevel = d.byte()
	if d.err != nil {
		return c
	}
	if name != "MQTT" || (c.ProtocolLevel != V5 && c.ProtocolLevel != V311) {
		d.fail(&Error{Code: UnsupportedProtocolVersion, Msg: fmt.Sprintf("protocol %q level %d: want MQTT 5 or 3.1.1", name, c.ProtocolLevel)})
		return c
	}
	d.v5 = c.ProtocolLevel == V5
	flags := d.byte()
	c.KeepAlive = d.u16()
	d.props(&c.Props)
	if d.err != nil {
		return c
	}
	if flags&1 != 0 {
		d.fail(malformed("CONNECT reserved flag set"))
		return c
	}
	c.CleanStart = flags&0x02 != 0
	if flags&0x04 != 0 {
		d.fail(&Error{Code: NotAuthorized, Msg: "a will is not accepted: this server publishes nothing for a device"})
		return c
	}
	if flags&0x38 != 0 {
		d.fail(malformed("will QoS or retain set without a will"))
		return c
	}
	c.HasUsername, c.HasPassword = flags&0x80 != 0, flags&0x40 != 0
	if !d.v5 && c.HasPassword && !c.HasUsername {
		d.fail(malformed("password without a user name"))
		return c
	}
	c.ClientID = d.str()
	if c.HasUsername {
		c.Username = d.str()
	}
	if c.HasPassword {
		c.Password = d.binary()
	}
	return c
}

func (d *decoder) connack() *Connack {
	c := &Connack{}
	f := d.byte()
	if f&^1 != 0 {
		d.fail(malformed("CONNACK flags %#x", f))
	}
	c.SessionPresent = f&1 != 0
	c.ReasonCode = d.byte()
	d.props(&c.Props)
	return c
}

func (d *decoder) publish(flags byte) *Publish {
	p := &Publish{Dup: flags&8 != 0, QoS: (flags >> 1) & 3, Retain: flags&1 != 0}
	if p.QoS == 3 {
		d.fail(malformed("PUBLISH QoS 3"))
		return p
	}
	p.Topic = d.str()
	if p.QoS > 0 {
		if p.PacketID = d.u16(); p.PacketID == 0 && d.err == nil {
			d.fail(malformed("PUBLISH packet identifier 0"))
		}
	}
	d.props(&p.Props)
	p.Payload = d.rest()
	return p
}

func (d *decoder) ack(typ byte) *Ack {
	a := &Ack{Type: typ, PacketID: d.u16()}
	if d.v5 && len(d.b) > 0 {
		a.ReasonCode = d.byte()
		if len(d.b) > 0 {
			d.props(&a.Props)
		}
	}
	return a
}

func (d *decoder) subscribe() *Subscribe {
	s := &Subscribe{PacketID: d.u16()}
	d.props(&s.Props)
	for len(d.b) > 0 && d.err == nil {
		f := d.str()
		o := d.byte()
		if d.err != nil {
			break
		}
		if o&0xc0 != 0 || o&3 == 3 || !d.v5 && o&0xfc != 0 {
			d.fail(malformed("subscription options %#x", o))
			break
		}
		s.Subs = append(s.Subs, Subscription{Filter: f, QoS: o & 3, Options: o &^ 3})
	}
	if len(s.Subs) == 0 && d.err == nil {
		d.fail(protocolErr("SUBSCRIBE without a topic filter"))
	}
	return s
}

func (d *decoder) unsubscribe() *Unsubscribe {
	u := &Unsubscribe{PacketID: d.u16()}
	d.props(&u.Props)
	for len(d.b) > 0 && d.err == nil {
		u.Filters = append(u.Filters, d.str())
	}
	if len(u.Filters) == 0 && d.err == nil {
		d.fail(protocolErr("UNSUBSCRIBE without a topic filter"))
	}
	return u
}
