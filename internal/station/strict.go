package station

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gomsg/gomsg/internal/grpcerr"
)

// Strict input on both Push API transports. A request is refused
// InvalidArgument naming what is wrong, rather than accepted in a form the
// caller did not mean or answered Internal:
//
//   - HTTP/JSON: one JSON object and nothing after it (a second object would
//     otherwise be ignored silently); 32-bit numbers and floats as JSON
//     numbers, not strings ("msgOptions":"1" is refused). 64-bit integers
//     may be strings, as proto3's JSON mapping writes them, since JavaScript
//     cannot hold them as numbers.
//   - both: a string that is not valid UTF-8 is refused naming its field.
//     Over gRPC the protobuf decoder fails before any handler runs, which
//     gRPC reports as Internal; the push server's codec notes the field and
//     an interceptor refuses the call.

// strictJSON is the gateway's JSON marshaler with the checks above on
// every request body.
type strictJSON struct {
	*runtime.JSONPb
}

func (m strictJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		body, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return io.EOF // no body: the gateway takes the empty request
		}
		msg, ok := v.(proto.Message)
		if !ok {
			return m.JSONPb.NewDecoder(bytes.NewReader(body)).Decode(v)
		}
		if err := checkJSON(body, msg.ProtoReflect().Descriptor()); err != nil {
			return err
		}
		return m.JSONPb.Unmarshal(body, v)
	})
}

// checkJSON checks body holds one JSON value and nothing else, its numbers
// and strings as checkValue says.
func checkJSON(body []byte, md protoreflect.MessageDescriptor) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil // protojson names the syntax error
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON object at byte %d: send one object per request", dec.InputOffset())
	}
	return checkValue(v, md, "", !utf8.Valid(body))
}

// checkValue walks a decoded JSON object along its message descriptor.
// badUTF8 says the body holds invalid UTF-8, which encoding/json turned
// into U+FFFD: the first string holding one names the field.
func checkValue(v any, md protoreflect.MessageDescriptor, path string, badUTF8 bool) error {
	obj, ok := v.(map[string]any)
	if !ok || isWellKnown(md) {
		if badUTF8 && hasReplacement(v) {
			return fmt.Errorf("%s: is not valid UTF-8", strings.TrimPrefix(path, "."))
		}
		return nil
	}
	for name, val := range obj {
		fd := md.Fields().ByJSONName(name)
		if fd == nil {
			fd = md.Fields().ByTextName(name)
		}
		if fd == nil {
			if badUTF8 && hasReplacement(val) {
				return fmt.Errorf("%s: is not valid UTF-8", strings.TrimPrefix(path+"."+name, "."))
			}
			continue // protojson names the unknown field
		}
		field := strings.TrimPrefix(path+"."+fd.TextName(), ".")
		switch {
		case fd.IsMap():
			m, _ := val.(map[string]any)
			for k, mv := range m {
				if badUTF8 && strings.ContainsRune(k, utf8.RuneError) {
					return fmt.Errorf("%s: key is not valid UTF-8", field)
				}
				if err := checkScalar(mv, fd.MapValue(), field+"["+k+"]", badUTF8); err != nil {
					return err
				}
			}
		case fd.IsList():
			l, _ := val.([]any)
			for i, lv := range l {
				if err := checkScalar(lv, fd, field+"["+strconv.Itoa(i)+"]", badUTF8); err != nil {
					return err
				}
			}
		default:
			if err := checkScalar(val, fd, field, badUTF8); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkScalar(v any, fd protoreflect.FieldDescriptor, field string, badUTF8 bool) error {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkValue(v, fd.Message(), field, badUTF8)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.FloatKind, protoreflect.DoubleKind:
		if s, ok := v.(string); ok && s != "NaN" && s != "Infinity" && s != "-Infinity" {
			return fmt.Errorf("%s: %q is a string: send the number without quotes", field, s)
		}
	case protoreflect.StringKind:
		if s, ok := v.(string); ok && badUTF8 && strings.ContainsRune(s, utf8.RuneError) {
			return fmt.Errorf("%s: is not valid UTF-8", field)
		}
	}
	return nil
}

// isWellKnown: google.protobuf types have JSON forms of their own (Any's
// "@type", Duration's "30s"), which protojson checks.
func isWellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

func hasReplacement(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.ContainsRune(x, utf8.RuneError)
	case []any:
		for _, e := range x {
			if hasReplacement(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, utf8.RuneError) || hasReplacement(e) {
				return true
			}
		}
	}
	return false
}

// pushCodec is the push server's protobuf codec: grpc-go's own (with its
// pooled buffers), except that a request whose strings are not valid UTF-8
// decodes without error and badUTF8 remembers the field; refuseBadUTF8 then
// refuses the call. Only a failed decode costs anything more.
type pushCodec struct {
	encoding.CodecV2
	badUTF8 *sync.Map // proto.Message → field name
}

func newPushCodec() pushCodec {
	return pushCodec{CodecV2: encoding.GetCodecV2(grpcproto.Name), badUTF8: &sync.Map{}}
}

func (c pushCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	if m, ok := v.(proto.Message); ok && err != nil && strings.Contains(err.Error(), "invalid UTF-8") {
		field := invalidUTF8Field(data.Materialize(), m.ProtoReflect().Descriptor(), "")
		if field == "" {
			field = "request"
		}
		c.badUTF8.Store(m, field)
		return nil
	}
	return err
}

// refuseBadUTF8 refuses a call whose request the codec found invalid UTF-8
// in, naming the field.
func (c pushCodec) refuseBadUTF8(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if field, ok := c.badUTF8.LoadAndDelete(req); ok {
		return nil, grpcerr.Status(grpcerr.Invalid(field.(string), "is not valid UTF-8"))
	}
	return h(ctx, req)
}

// invalidUTF8Field names the first string field of the wire message b
// (of md) that is not valid UTF-8: "uids[1]", "device.uid".
func invalidUTF8Field(b []byte, md protoreflect.MessageDescriptor, path string) string {
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil {
			continue
		}
		field := strings.TrimPrefix(path+"."+fd.TextName(), ".")
		if fd.IsList() {
			field += "[" + strconv.Itoa(seen[num]) + "]"
			seen[num]++
		}
		switch {
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
			return field
		case fd.Kind() == protoreflect.MessageKind && fd.IsMap():
			if f := invalidUTF8Field(v, fd.Message(), field); f != "" {
				// A map entry's key or value: name the map.
				return strings.TrimSuffix(strings.TrimSuffix(f, ".key"), ".value")
			}
		case fd.Kind() == protoreflect.MessageKind:
			if f := invalidUTF8Field(v, fd.Message(), field); f != "" {
				return f
			}
		}
	}
	return ""
}
