package boat

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protobuf "google.golang.org/protobuf/proto"

	"github.com/gomsg/gomsg/pb/msgpb"
)

// encodedFrame is a ServerPayload marshalled once and sent as it is on many
// streams: a room frame goes to every member, and marshalling it once per
// batch instead of once per member is most of a broadcast's cost.
type encodedFrame struct {
	b []byte
}

// encodeFrame marshals p once for all the streams it goes to.
func encodeFrame(p *msgpb.ServerPayload) (*encodedFrame, error) {
	b, err := protobuf.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("marshal a room frame: %w", err)
	}
	return &encodedFrame{b: b}, nil
}

// frameCodec is the client server's codec: an encodedFrame passes through
// as its bytes (shared read-only by every stream it is sent on; nothing
// writes to a buffer it is handed, and a SliceBuffer's Free does nothing),
// everything else is grpc-go's proto codec.
type frameCodec struct {
	proto encoding.CodecV2
}

func newFrameCodec() frameCodec {
	return frameCodec{proto: encoding.GetCodecV2(proto.Name)}
}

func (c frameCodec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*encodedFrame); ok {
		return mem.BufferSlice{mem.SliceBuffer(f.b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c frameCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

func (c frameCodec) Name() string { return proto.Name }
