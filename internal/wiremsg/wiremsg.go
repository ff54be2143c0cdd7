// Package wiremsg lets Cairn's gRPC servers and clients pass messages that are already in their protobuf wire
// encoding: a relayed Watch frame, a Range answer that storage wrote straight from its stored KeyValues, or
// the frontend's header spliced before storage's answer. Codec is protobuf for every other message, so
// nothing differs on the wire.
package wiremsg

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// Encoded is a message to send as the concatenation of its parts. Sending it hands the parts' buffer
// references to gRPC, which frees them once written.
type Encoded struct{ Parts mem.BufferSlice }

// Raw is a message received (or sent) as its wire bytes, undecoded.
type Raw struct{ Data []byte }

// NewRaw returns an empty Raw, as proxies that receive into fresh messages want.
func NewRaw() any { return new(Raw) }

// Codec is the gRPC codec that sends Encoded and Raw messages as they are and reads into Raw undecoded; every
// other message is protobuf.
type Codec struct{ proto encoding.CodecV2 }

// NewCodec returns the codec; use it with grpc.ForceServerCodecV2 or grpc.ForceCodecV2.
func NewCodec() Codec { return Codec{proto: encoding.GetCodecV2("proto")} }

func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *Raw:
		return mem.BufferSlice{mem.SliceBuffer(m.Data)}, nil
	case *Encoded:
		out := m.Parts
		m.Parts = nil // gRPC owns (and frees) the references now
		return out, nil
	}
	return c.proto.Marshal(v)
}

func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*Raw); ok {
		r.Data = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// Name is protobuf's: peers see a protobuf message.
func (c Codec) Name() string { return c.proto.Name() }
