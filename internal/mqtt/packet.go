// Package mqtt is the MQTT packet codec boat's MQTT transport speaks: the
// packets a push-only broker needs (CONNECT/CONNACK, PUBLISH/PUBACK,
// SUBSCRIBE/SUBACK, UNSUBSCRIBE/UNSUBACK, PINGREQ/PINGRESP, DISCONNECT) in
// MQTT 5 and MQTT 3.1.1. A packet's size is checked against a bound before
// its body is read, so a peer cannot make the reader allocate more.
package mqtt

import (
	"errors"
	"fmt"
)

// Packet types (the high nibble of the fixed header's first byte).
const (
	TypeConnect     = 1
	TypeConnack     = 2
	TypePublish     = 3
	TypePuback      = 4
	TypePubrec      = 5
	TypePubrel      = 6
	TypePubcomp     = 7
	TypeSubscribe   = 8
	TypeSuback      = 9
	TypeUnsubscribe = 10
	TypeUnsuback    = 11
	TypePingreq     = 12
	TypePingresp    = 13
	TypeDisconnect  = 14
	TypeAuth        = 15
)

// Protocol levels of CONNECT.
const (
	V311 = 4
	V5   = 5
)

// MQTT 5 reason codes this package and its users name.
const (
	Success                     = 0x00
	GrantedQoS1                 = 0x01
	DisconnectWithWill          = 0x04
	NoMatchingSubscribers       = 0x10
	NoSubscriptionExisted       = 0x11
	UnspecifiedError            = 0x80
	MalformedPacket             = 0x81
	ProtocolError               = 0x82
	ImplementationSpecificError = 0x83
	UnsupportedProtocolVersion  = 0x84
	ClientIDNotValid            = 0x85
	BadUserNameOrPassword       = 0x86
	NotAuthorized               = 0x87
	ServerUnavailable           = 0x88
	ServerBusy                  = 0x89
	ServerShuttingDown          = 0x8B
	KeepAliveTimeout            = 0x8D
	SessionTakenOver            = 0x8E
	TopicFilterInvalid          = 0x8F
	TopicNameInvalid            = 0x90
	PacketIDInUse               = 0x91
	PacketIDNotFound            = 0x92
	ReceiveMaximumExceeded      = 0x93
	PacketTooLarge              = 0x95
	MessageRateTooHigh          = 0x96
	QuotaExceeded               = 0x97
	AdministrativeAction        = 0x98
	UseAnotherServer            = 0x9C
	QoSNotSupported             = 0x9B
	RetainNotSupported          = 0x9A
	SharedSubsNotSupported      = 0x9E
	ConnectionRateExceeded      = 0x9F
	WildcardSubsNotSupported    = 0xA2
)

// Error is a packet that cannot be read: Code is the reason code a server
// sends in the DISCONNECT (or CONNACK) that ends the connection.
type Error struct {
	Code byte
	Msg  string
	err  error
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.err }

func malformed(format string, a ...any) error {
	return &Error{Code: MalformedPacket, Msg: "malformed packet: " + fmt.Sprintf(format, a...)}
}

func protocolErr(format string, a ...any) error {
	return &Error{Code: ProtocolError, Msg: "protocol error: " + fmt.Sprintf(format, a...)}
}

// ErrTooLarge is wrapped by the error for a packet larger than the reader's
// bound.
var ErrTooLarge = errors.New("packet too large")

// Packet is one of the packet types below.
type Packet interface{ packetType() byte }

// Connect is a CONNECT. A will is refused by the reader (a push service
// publishes nothing for a device), so it has no fields here.
type Connect struct {
	ProtocolLevel byte
	CleanStart    bool
	KeepAlive     uint16
	ClientID      string
	Username      string
	HasUsername   bool
	Password      []byte
	HasPassword   bool
	Props         Props
}

// Connack is a CONNACK.
type Connack struct {
	SessionPresent bool
	ReasonCode     byte
	Props          Props
}

// Publish is a PUBLISH.
type Publish struct {
	Dup, Retain bool
	QoS         byte
	Topic       string
	PacketID    uint16
	Props       Props
	Payload     []byte
}

// Ack is a PUBACK (and, read, a PUBREC, PUBREL or PUBCOMP: Type says
// which).
type Ack struct {
	Type       byte
	PacketID   uint16
	ReasonCode byte
	Props      Props
}

// Subscription is one topic filter of a SUBSCRIBE with its options.
type Subscription struct {
	Filter string
	QoS    byte
	// Options are the remaining option bits (no local, retain as
	// published, retain handling), as sent.
	Options byte
}

// Subscribe is a SUBSCRIBE.
type Subscribe struct {
	PacketID uint16
	Props    Props
	Subs     []Subscription
}

// Suback is a SUBACK: one reason code per filter, in order.
type Suback struct {
	PacketID    uint16
	Props       Props
	ReasonCodes []byte
}

// Unsubscribe is an UNSUBSCRIBE.
type Unsubscribe struct {
	PacketID uint16
	Props    Props
	Filters  []string
}

// Unsuback is an UNSUBACK (MQTT 3.1.1 sends no reason codes).
type Unsuback struct {
	PacketID    uint16
	Props       Props
	ReasonCodes []byte
}

// Pingreq is a PINGREQ.
type Pingreq struct{}

// Pingresp is a PINGRESP.
type Pingresp struct{}

// Disconnect is a DISCONNECT (MQTT 3.1.1: no reason code; a server never
// sends one).
type Disconnect struct {
	ReasonCode byte
	Props      Props
}

func (*Connect) packetType() byte     { return TypeConnect }
func (*Connack) packetType() byte     { return TypeConnack }
func (*Publish) packetType() byte     { return TypePublish }
func (a *Ack) packetType() byte       { return a.Type }
func (*Subscribe) packetType() byte   { return TypeSubscribe }
func (*Suback) packetType() byte      { return TypeSuback }
func (*Unsubscribe) packetType() byte { return TypeUnsubscribe }
func (*Unsuback) packetType() byte    { return TypeUnsuback }
func (*Pingreq) packetType() byte     { return TypePingreq }
func (*Pingresp) packetType() byte    { return TypePingresp }
func (*Disconnect) packetType() byte  { return TypeDisconnect }

// UserProperty is an MQTT 5 user property.
type UserProperty struct{ Key, Value string }

// Property identifiers.
const (
	PropPayloadFormat       = 0x01
	PropMessageExpiry       = 0x02
	PropContentType         = 0x03
	PropResponseTopic       = 0x08
	PropCorrelationData     = 0x09
	PropSubscriptionID      = 0x0B
	PropSessionExpiry       = 0x11
	PropAssignedClientID    = 0x12
	PropServerKeepAlive     = 0x13
	PropAuthMethod          = 0x15
	PropAuthData            = 0x16
	PropRequestProblemInfo  = 0x17
	PropWillDelay           = 0x18
	PropRequestResponseInfo = 0x19
	PropResponseInfo        = 0x1A
	PropServerReference     = 0x1C
	PropReasonString        = 0x1F
	PropReceiveMaximum      = 0x21
	PropTopicAliasMaximum   = 0x22
	PropTopicAlias          = 0x23
	PropMaximumQoS          = 0x24
	PropRetainAvailable     = 0x25
	PropUser                = 0x26
	PropMaxPacketSize       = 0x27
	PropWildcardAvailable   = 0x28
	PropSubIDAvailable      = 0x29
	PropSharedAvailable     = 0x2A
)

// Props are a packet's MQTT 5 properties. Present has bit 1<<id set for
// each property read; on write, a property is written when its bit is set
// or its value is not zero.
type Props struct {
	Present uint64

	PayloadFormat       byte
	MessageExpiry       uint32
	ContentType         string
	ResponseTopic       string
	CorrelationData     []byte
	SubscriptionIDs     []uint32
	SessionExpiry       uint32
	AssignedClientID    string
	ServerKeepAlive     uint16
	AuthMethod          string
	AuthData            []byte
	RequestProblemInfo  byte
	WillDelay           uint32
	RequestResponseInfo byte
	ResponseInfo        string
	ServerReference     string
	ReasonString        string
	ReceiveMaximum      uint16
	TopicAliasMaximum   uint16
	TopicAlias          uint16
	MaximumQoS          byte
	RetainAvailable     byte
	User                []UserProperty
	MaxPacketSize       uint32
	WildcardAvailable   byte
	SubIDAvailable      byte
	SharedAvailable     byte
}

// Has reports whether property id was read (or set with Set).
func (p *Props) Has(id byte) bool { return p.Present&(1<<id) != 0 }

// UserValue is the value of the first user property named key; "" when
// there is none.
func (p *Props) UserValue(key string) string {
	for _, u := range p.User {
		if u.Key == key {
			return u.Value
		}
	}
	return ""
}

// Set marks property id to be written even when its value is zero.
func (p *Props) Set(id byte) { p.Present |= 1 << id }
