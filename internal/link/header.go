package link

import (
	"encoding/binary"
	"errors"
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Kind is what a frame is.
type kind uint64

const (
	kindCall   kind = iota // a call: method and body
	kindAnswer             // the answer to the call of the same id: a body, or an error status
	kindCancel             // the caller abandoned the call of this id
	kindEnd                // id 0: the server ends the connection; calls not answered were not started
)

// Header fields, as protobuf numbers.
const (
	fieldID      protowire.Number = 1
	fieldMethod  protowire.Number = 2
	fieldKind    protowire.Number = 3
	fieldTimeout protowire.Number = 4 // microseconds the caller still waits; 0: no deadline
	fieldTrace   protowire.Number = 5 // one W3C trace-context entry: {1: key, 2: value}
	fieldStatus  protowire.Number = 6 // google.rpc.Status of a failed answer or of the end
)

// header is a frame's header.
type header struct {
	id            uint64
	method        uint64
	kind          kind
	timeoutMicros int64
	trace         map[string]string
	status        *spb.Status
}

// errBadFrame is returned for a frame that does not decode.
var errBadFrame = errors.New("link: malformed frame")

// appendFrameHead appends h, preceded by its length, to b: what goes before the body in a frame.
func appendFrameHead(b []byte, h *header) ([]byte, error) {
	var fields [64]byte
	enc := fields[:0]
	if h.id != 0 {
		enc = protowire.AppendVarint(protowire.AppendTag(enc, fieldID, protowire.VarintType), h.id)
	}
	if h.method != 0 {
		enc = protowire.AppendVarint(protowire.AppendTag(enc, fieldMethod, protowire.VarintType), h.method)
	}
	if h.kind != kindCall {
		enc = protowire.AppendVarint(protowire.AppendTag(enc, fieldKind, protowire.VarintType), uint64(h.kind))
	}
	if h.timeoutMicros > 0 {
		enc = protowire.AppendVarint(protowire.AppendTag(enc, fieldTimeout, protowire.VarintType), uint64(h.timeoutMicros))
	}
	for key, value := range h.trace {
		entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), key)
		entry = protowire.AppendString(protowire.AppendTag(entry, 2, protowire.BytesType), value)
		enc = protowire.AppendBytes(protowire.AppendTag(enc, fieldTrace, protowire.BytesType), entry)
	}
	if h.status != nil {
		st, err := proto.Marshal(h.status)
		if err != nil {
			return b, fmt.Errorf("link: encode status: %w", err)
		}
		enc = protowire.AppendBytes(protowire.AppendTag(enc, fieldStatus, protowire.BytesType), st)
	}
	b = binary.AppendUvarint(b, uint64(len(enc)))
	return append(b, enc...), nil
}

// decodeFrame reads frame's header into h and returns the body (a part of frame).
func decodeFrame(frame []byte, h *header) ([]byte, error) {
	n, size := binary.Uvarint(frame)
	if size <= 0 || n > uint64(len(frame)-size) {
		return nil, errBadFrame
	}
	enc, body := frame[size:size+int(n)], frame[size+int(n):]
	for len(enc) > 0 {
		num, typ, tagLen := protowire.ConsumeTag(enc)
		if tagLen < 0 {
			return nil, errBadFrame
		}
		enc = enc[tagLen:]
		switch typ {
		case protowire.VarintType:
			v, l := protowire.ConsumeVarint(enc)
			if l < 0 {
				return nil, errBadFrame
			}
			enc = enc[l:]
			switch num {
			case fieldID:
				h.id = v
			case fieldMethod:
				h.method = v
			case fieldKind:
				h.kind = kind(v)
			case fieldTimeout:
				h.timeoutMicros = int64(v)
			}
		case protowire.BytesType:
			v, l := protowire.ConsumeBytes(enc)
			if l < 0 {
				return nil, errBadFrame
			}
			enc = enc[l:]
			switch num {
			case fieldTrace:
				key, value, err := decodeTraceEntry(v)
				if err != nil {
					return nil, err
				}
				if h.trace == nil {
					h.trace = map[string]string{}
				}
				h.trace[key] = value
			case fieldStatus:
				h.status = &spb.Status{}
				if err := proto.Unmarshal(v, h.status); err != nil {
					return nil, fmt.Errorf("%w: status: %w", errBadFrame, err)
				}
			}
		default:
			l := protowire.ConsumeFieldValue(num, typ, enc)
			if l < 0 {
				return nil, errBadFrame
			}
			enc = enc[l:]
		}
	}
	return body, nil
}

func decodeTraceEntry(entry []byte) (key, value string, err error) {
	for len(entry) > 0 {
		num, typ, tagLen := protowire.ConsumeTag(entry)
		if tagLen < 0 || typ != protowire.BytesType {
			return "", "", errBadFrame
		}
		v, l := protowire.ConsumeString(entry[tagLen:])
		if l < 0 {
			return "", "", errBadFrame
		}
		entry = entry[tagLen+l:]
		switch num {
		case 1:
			key = v
		case 2:
			value = v
		}
	}
	return key, value, nil
}

// statusOf is the status of a header's google.rpc.Status, nil for none.
func statusOf(st *spb.Status) *status.Status {
	if st == nil {
		return nil
	}
	return status.FromProto(st)
}
