package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"google.golang.org/protobuf/types/known/anypb"

	"github.com/gomsg/gomsg/internal/boat"
	"github.com/gomsg/gomsg/internal/mqtt"
	"github.com/gomsg/gomsg/pb/msgpb"
)

// Device sessions over MQTT 5: one connection per session at boat's
// --mqtt-addr, the token as the CONNECT password, clean start false. The
// stream translates MQTT packets to the payloads the sessions read: CONNACK
// is Connected followed at once by Ready (MQTT has no Ready), a PUBLISH a
// Messages of one, a DISCONNECT a Kickout; an Ack is a PUBACK per seq.

// mqttDialer opens MQTT sessions to one boat, spreading them over source
// addresses as dialFrom does for gRPC.
type mqttDialer struct {
	addr   string
	spread int
	tls    *tls.Config
}

func (d *mqttDialer) dial(ctx context.Context, i int, token string) (clientStream, error) {
	hctx, cancel := context.WithTimeout(ctx, wsHandshakeTimeout)
	defer cancel()
	nc, err := dialFrom(i, d.spread)(hctx, d.addr)
	if err != nil {
		return nil, fmt.Errorf("mqtt dial: %w", err)
	}
	if d.tls != nil {
		cfg := d.tls
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(d.addr)
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("mqtt tls: %w", err)
		}
		nc = tc
	}
	s := &mqttStream{nc: nc, r: bufio.NewReaderSize(nc, 1024), ids: make(map[int64]uint16)}
	if err := s.write(&mqtt.Connect{ProtocolLevel: mqtt.V5, KeepAlive: 300, ClientID: "bench-" + strconv.Itoa(i),
		Password: []byte(token), HasPassword: true}); err != nil {
		_ = nc.Close()
		return nil, err
	}
	context.AfterFunc(ctx, func() { _ = nc.Close() })
	return s, nil
}

// mqttStream is a session's MQTT connection as a clientStream.
type mqttStream struct {
	nc    net.Conn
	r     *bufio.Reader
	wmu   sync.Mutex
	mu    sync.Mutex
	ids   map[int64]uint16 // seq → packet id of a QoS 1 PUBLISH not yet PUBACKed
	ready bool             // Ready is owed after the CONNACK
}

func (s *mqttStream) write(p mqtt.Packet) error {
	b, err := mqtt.Encode(nil, p, mqtt.V5)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err = s.nc.Write(b)
	return err
}

func (s *mqttStream) Send(p *msgpb.ClientPayload) error {
	ack := p.GetAck()
	if ack == nil {
		return fmt.Errorf("mqtt: the bench sends only ACKs over MQTT, not %T", p.GetBody())
	}
	for _, seq := range ack.GetSeqs() {
		s.mu.Lock()
		id, ok := s.ids[seq]
		delete(s.ids, seq)
		s.mu.Unlock()
		if !ok {
			continue
		}
		if err := s.write(&mqtt.Ack{Type: mqtt.TypePuback, PacketID: id}); err != nil {
			return err
		}
	}
	return nil
}

func (s *mqttStream) Recv() (*msgpb.ServerPayload, error) {
	if s.ready {
		s.ready = false
		return &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Ready{Ready: &msgpb.Ready{}}}, nil
	}
	for {
		p, err := mqtt.ReadPacket(s.r, mqtt.V5, wsMaxFrame)
		if err != nil {
			_ = s.nc.Close()
			return nil, err
		}
		switch p := p.(type) {
		case *mqtt.Connack:
			if p.ReasonCode != mqtt.Success {
				_ = s.nc.Close()
				return nil, fmt.Errorf("mqtt: CONNACK %#x: %s", p.ReasonCode, p.Props.ReasonString)
			}
			s.ready = true
			return &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Connected{Connected: &msgpb.Connected{
				Sid: p.Props.UserValue("sid"), Uid: p.Props.UserValue("uid")}}}, nil
		case *mqtt.Publish:
			m, err := mqttMessage(p)
			if err != nil {
				return nil, err
			}
			if p.QoS == 1 {
				s.mu.Lock()
				s.ids[m.GetSeq()] = p.PacketID
				s.mu.Unlock()
			}
			return &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Messages{Messages: &msgpb.Messages{Msgs: []*msgpb.Message{m}}}}, nil
		case *mqtt.Disconnect:
			return &msgpb.ServerPayload{Body: &msgpb.ServerPayload_Kickout{Kickout: &msgpb.Kickout{
				Reason: boat.MQTTKickReason(p.ReasonCode), Message: p.Props.ReasonString}}}, nil
		case *mqtt.Pingresp, *mqtt.Suback, *mqtt.Unsuback:
		default:
			return nil, fmt.Errorf("mqtt: unexpected %T", p)
		}
	}
}

// mqttMessage is the message a PUBLISH carries: a BytesValue body is its
// payload wrapped again (the bench pushes BytesValue bodies).
func mqttMessage(p *mqtt.Publish) (*msgpb.Message, error) {
	seq, err := strconv.ParseInt(p.Props.UserValue(boat.MQTTPropSeq), 10, 64)
	if err != nil {
		return nil, errors.New("mqtt: PUBLISH without a seq property")
	}
	opts, _ := strconv.ParseUint(p.Props.UserValue(boat.MQTTPropOptions), 10, 32)
	ts, _ := strconv.ParseInt(p.Props.UserValue(boat.MQTTPropTimestamp), 10, 64)
	typ := p.Props.UserValue(boat.MQTTPropType)
	value := p.Payload
	if typ == bytesValueURL && len(p.Payload) < 128 {
		value = append([]byte{0x0a, byte(len(p.Payload))}, p.Payload...)
	}
	return &msgpb.Message{Seq: seq, Options: uint32(opts), Timestamp: ts, Body: &anypb.Any{TypeUrl: typ, Value: value}}, nil
}
