package mqtt

import (
	"encoding/binary"
	"fmt"
)

// Encode appends p, encoded for protocol level, to dst. MQTT 3.1.1 drops
// properties and the reason codes it has no place for; the caller picks
// codes that level knows.
func Encode(dst []byte, p Packet, level byte) ([]byte, error) {
	e := &encoder{v5: level == V5}
	var first byte
	switch p := p.(type) {
	case *Connect:
		first = TypeConnect << 4
		e.str("MQTT")
		e.b = append(e.b, p.ProtocolLevel)
		e.v5 = p.ProtocolLevel == V5
		var flags byte
		if p.CleanStart {
			flags |= 0x02
		}
		if p.HasUsername {
			flags |= 0x80
		}
		if p.HasPassword {
			flags |= 0x40
		}
		e.b = append(e.b, flags)
		e.u16(p.KeepAlive)
		e.props(&p.Props)
		e.str(p.ClientID)
		if p.HasUsername {
			e.str(p.Username)
		}
		if p.HasPassword {
			e.bin(p.Password)
		}
	case *Connack:
		first = TypeConnack << 4
		var f byte
		if p.SessionPresent {
			f = 1
		}
		e.b = append(e.b, f, p.ReasonCode)
		e.props(&p.Props)
	case *Publish:
		if p.QoS > 2 {
			return dst, fmt.Errorf("mqtt: PUBLISH QoS %d", p.QoS)
		}
		first = TypePublish<<4 | p.QoS<<1
		if p.Dup {
			first |= 8
		}
		if p.Retain {
			first |= 1
		}
		e.str(p.Topic)
		if p.QoS > 0 {
			e.u16(p.PacketID)
		}
		e.props(&p.Props)
		e.b = append(e.b, p.Payload...)
	case *Ack:
		first = p.Type << 4
		if p.Type == TypePubrel {
			first |= 2
		}
		e.u16(p.PacketID)
		if e.v5 && (p.ReasonCode != 0 || !p.Props.empty()) {
			e.b = append(e.b, p.ReasonCode)
			e.props(&p.Props)
		}
	case *Subscribe:
		first = TypeSubscribe<<4 | 2
		e.u16(p.PacketID)
		e.props(&p.Props)
		for _, s := range p.Subs {
			e.str(s.Filter)
			e.b = append(e.b, s.QoS|s.Options)
		}
	case *Suback:
		first = TypeSuback << 4
		e.u16(p.PacketID)
		e.props(&p.Props)
		e.b = append(e.b, p.ReasonCodes...)
	case *Unsubscribe:
		first = TypeUnsubscribe<<4 | 2
		e.u16(p.PacketID)
		e.props(&p.Props)
		for _, f := range p.Filters {
			e.str(f)
		}
	case *Unsuback:
		first = TypeUnsuback << 4
		e.u16(p.PacketID)
		e.props(&p.Props)
		if e.v5 {
			e.b = append(e.b, p.ReasonCodes...)
		}
	case *Pingreq:
		first = TypePingreq << 4
	case *Pingresp:
		first = TypePingresp << 4
	case *Disconnect:
		first = TypeDisconnect << 4
		if e.v5 {
			e.b = append(e.b, p.ReasonCode)
			e.props(&p.Props)
		}
	default:
		return dst, fmt.Errorf("mqtt: cannot encode %T", p)
	}
	if len(e.b) > maxRemaining {
		return dst, fmt.Errorf("mqtt: packet body of %d bytes", len(e.b))
	}
	dst = append(dst, first)
	dst = appendVarint(dst, len(e.b))
	return append(dst, e.b...), nil
}

// Size is the encoded size of a packet whose body is n bytes.
func Size(n int) int { return 1 + len(appendVarint(nil, n)) + n }

func appendVarint(b []byte, v int) []byte {
	for {
		c := byte(v % 128)
		v /= 128
		if v > 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

type encoder struct {
	b  []byte
	v5 bool
}

func (e *encoder) u16(v uint16) { e.b = binary.BigEndian.AppendUint16(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }

func (e *encoder) bin(v []byte) {
	if len(v) > 0xffff {
		v = v[:0xffff]
	}
	e.u16(uint16(len(v)))
	e.b = append(e.b, v...)
}

func (e *encoder) str(s string) { e.bin([]byte(s)) }

func (p *Props) empty() bool {
	return p.Present == 0 && p.ReasonString == "" && len(p.User) == 0
}

// props appends p as an MQTT 5 property list (nothing in MQTT 3.1.1).
func (e *encoder) props(p *Props) {
	if !e.v5 {
		return
	}
	pe := &encoder{v5: true}
	has := func(id byte, nonZero bool) bool {
		if nonZero || p.Has(id) {
			pe.b = append(pe.b, id)
			return true
		}
		return false
	}
	if has(PropPayloadFormat, p.PayloadFormat != 0) {
		pe.b = append(pe.b, p.PayloadFormat)
	}
	if has(PropMessageExpiry, p.MessageExpiry != 0) {
		pe.u32(p.MessageExpiry)
	}
	if has(PropContentType, p.ContentType != "") {
		pe.str(p.ContentType)
	}
	if has(PropResponseTopic, p.ResponseTopic != "") {
		pe.str(p.ResponseTopic)
	}
	if has(PropCorrelationData, len(p.CorrelationData) > 0) {
		pe.bin(p.CorrelationData)
	}
	for _, id := range p.SubscriptionIDs {
		pe.b = appendVarint(append(pe.b, PropSubscriptionID), int(id))
	}
	if has(PropSessionExpiry, p.SessionExpiry != 0) {
		pe.u32(p.SessionExpiry)
	}
	if has(PropAssignedClientID, p.AssignedClientID != "") {
		pe.str(p.AssignedClientID)
	}
	if has(PropServerKeepAlive, p.ServerKeepAlive != 0) {
		pe.u16(p.ServerKeepAlive)
	}
	if has(PropAuthMethod, p.AuthMethod != "") {
		pe.str(p.AuthMethod)
	}
	if has(PropAuthData, len(p.AuthData) > 0) {
		pe.bin(p.AuthData)
	}
	if has(PropRequestProblemInfo, p.RequestProblemInfo != 0) {
		pe.b = append(pe.b, p.RequestProblemInfo)
	}
	if has(PropWillDelay, p.WillDelay != 0) {
		pe.u32(p.WillDelay)
	}
	if has(PropRequestResponseInfo, p.RequestResponseInfo != 0) {
		pe.b = append(pe.b, p.RequestResponseInfo)
	}
	if has(PropResponseInfo, p.ResponseInfo != "") {
		pe.str(p.ResponseInfo)
	}
	if has(PropServerReference, p.ServerReference != "") {
		pe.str(p.ServerReference)
	}
	if has(PropReasonString, p.ReasonString != "") {
		pe.str(p.ReasonString)
	}
	if has(PropReceiveMaximum, p.ReceiveMaximum != 0) {
		pe.u16(p.ReceiveMaximum)
	}
	if has(PropTopicAliasMaximum, p.TopicAliasMaximum != 0) {
		pe.u16(p.TopicAliasMaximum)
	}
	if has(PropTopicAlias, p.TopicAlias != 0) {
		pe.u16(p.TopicAlias)
	}
	if has(PropMaximumQoS, p.MaximumQoS != 0) {
		pe.b = append(pe.b, p.MaximumQoS)
	}
	if has(PropRetainAvailable, p.RetainAvailable != 0) {
		pe.b = append(pe.b, p.RetainAvailable)
	}
	for _, u := range p.User {
		pe.b = append(pe.b, PropUser)
		pe.str(u.Key)
		pe.str(u.Value)
	}
	if has(PropMaxPacketSize, p.MaxPacketSize != 0) {
		pe.u32(p.MaxPacketSize)
	}
	if has(PropWildcardAvailable, p.WildcardAvailable != 0) {
		pe.b = append(pe.b, p.WildcardAvailable)
	}
	if has(PropSubIDAvailable, p.SubIDAvailable != 0) {
		pe.b = append(pe.b, p.SubIDAvailable)
	}
	if has(PropSharedAvailable, p.SharedAvailable != 0) {
		pe.b = append(pe.b, p.SharedAvailable)
	}
	e.b = appendVarint(e.b, len(pe.b))
	e.b = append(e.b, pe.b...)
}
