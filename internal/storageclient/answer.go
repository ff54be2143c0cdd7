package storageclient

import (
	"encoding/binary"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
)

// PipelineAnswer's field numbers, as the wire scan below reads them.
const (
	answerIDField    protowire.Number = 1
	answerRangeField protowire.Number = 3
)

// AppendRangeAnswerHead appends to b what precedes the n bytes of an encoded RangeResponse in the
// PipelineAnswer of call id: the id field, then the range field's tag and length. Storage writes its range
// answers this way, and wireAnswer reads them back in place.
func AppendRangeAnswerHead(b []byte, id uint64, n int) []byte {
	b = protowire.AppendVarint(protowire.AppendTag(b, answerIDField, protowire.VarintType), id)
	return protowire.AppendVarint(protowire.AppendTag(b, answerRangeField, protowire.BytesType), uint64(n))
}

// wireAnswer is a storagepb.PipelineAnswer as a lane receives it. A range answer (id and range only, as storage
// sends it) keeps its RangeResponse in the buffers it arrived in: rangeData holds its own references to them,
// so the frontend relays a megabyte LIST without copying it; whoever takes rangeData frees it. Every other
// answer is decoded into answer.
type wireAnswer struct {
	id        uint64
	answer    *storagepb.PipelineAnswer // nil for a range answer read from the wire
	rangeData mem.BufferSlice
}

// free releases the range answer's buffers, if any.
func (w *wireAnswer) free() {
	w.rangeData.Free()
	w.rangeData = nil
}

// decode reads data into w: a message of an id and a range is scanned in place, anything else is unmarshaled.
func (w *wireAnswer) decode(data mem.BufferSlice) error {
	w.free()
	if w.scanRange(data) {
		return nil
	}
	a := &storagepb.PipelineAnswer{}
	if err := proto.Unmarshal(data.Materialize(), a); err != nil {
		return err
	}
	w.id, w.answer = a.GetId(), a
	if r, ok := a.GetResult().(*storagepb.PipelineAnswer_Range); ok {
		w.rangeData = mem.BufferSlice{mem.SliceBuffer(r.Range)}
	}
	return nil
}

// scanRange reads data as a PipelineAnswer of only an id and a range, taking references to the range's bytes;
// it reports false (taking nothing) for any other message.
func (w *wireAnswer) scanRange(data mem.BufferSlice) bool {
	var head [2 * binary.MaxVarintLen64]byte
	var id uint64
	rangeStart, rangeLen := -1, 0
	size := data.Len()
	for off := 0; off < size; {
		n := readAt(data, off, head[:])
		num, typ, tagLen := protowire.ConsumeTag(head[:n])
		if tagLen < 0 {
			return false
		}
		value, valueLen := protowire.ConsumeVarint(head[tagLen:n])
		if valueLen < 0 {
			return false
		}
		off += tagLen + valueLen
		switch {
		case num == answerIDField && typ == protowire.VarintType:
			id = value
		case num == answerRangeField && typ == protowire.BytesType && rangeStart < 0 && value <= uint64(size-off):
			rangeStart, rangeLen = off, int(value)
			off += rangeLen
		default:
			return false
		}
	}
	if rangeStart < 0 {
		return false
	}
	w.id, w.answer, w.rangeData = id, nil, sliceOf(data, rangeStart, rangeLen)
	return true
}

// readAt copies the bytes of data from off into buf, as many as fit, and returns how many it copied.
func readAt(data mem.BufferSlice, off int, buf []byte) int {
	n := 0
	for _, b := range data {
		bytes := b.ReadOnlyData()
		if off >= len(bytes) {
			off -= len(bytes)
			continue
		}
		n += copy(buf[n:], bytes[off:])
		off = 0
		if n == len(buf) {
			break
		}
	}
	return n
}

// sliceOf returns new references to bytes [off, off+n) of data, valid after data itself is freed.
func sliceOf(data mem.BufferSlice, off, n int) mem.BufferSlice {
	var out mem.BufferSlice
	for _, b := range data {
		if n == 0 {
			break
		}
		l := b.Len()
		if off >= l {
			off -= l
			continue
		}
		end := min(l, off+n)
		out = append(out, b.Slice(off, end))
		n -= end - off
		off = 0
	}
	return out
}
