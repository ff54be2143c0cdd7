package consensusclient

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/commitlog"
)

// Field numbers decodeCommitted reads: consensuspb.CommittedResponse's entries, and consensuspb.Entry's.
const (
	committedFieldEntries = 1
	entryFieldIndex       = 1
	entryFieldTerm        = 2
	entryFieldKind        = 3
	entryFieldData        = 4
)

// decodeCommitted appends the entries of a committed frame (an encoded consensuspb.CommittedResponse) to batch.
// The frame is the caller's to keep (framed.Conn.Receive), so each entry's Data shares it instead of being
// copied, and no message is allocated: on every member this was a copy of every write's bytes. A frame with
// anything else (an error, an entry with a snapshot reference or a field it does not know) is decoded by
// proto.Unmarshal instead; resp is then the decoded message, for its error.
func decodeCommitted(frame []byte, batch []commitlog.Entry) (entries []commitlog.Entry, resp *consensuspb.CommittedResponse, err error) {
	start := len(batch)
	for rest := frame; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || num != committedFieldEntries || typ != protowire.BytesType {
			return decodeCommittedProto(frame, batch[:start])
		}
		encoded, m := protowire.ConsumeBytes(rest[n:])
		if m < 0 {
			return decodeCommittedProto(frame, batch[:start])
		}
		e, ok := decodeEntry(encoded)
		if !ok {
			return decodeCommittedProto(frame, batch[:start])
		}
		batch = append(batch, e)
		rest = rest[n+m:]
	}
	return batch, nil, nil
}

// decodeEntry decodes an entry with index, term, kind and data only; ok is false for anything else.
func decodeEntry(encoded []byte) (e commitlog.Entry, ok bool) {
	for len(encoded) > 0 {
		num, typ, n := protowire.ConsumeTag(encoded)
		if n < 0 {
			return e, false
		}
		encoded = encoded[n:]
		switch {
		case num == entryFieldData && typ == protowire.BytesType:
			data, m := protowire.ConsumeBytes(encoded)
			if m < 0 {
				return e, false
			}
			e.Data = data[:len(data):len(data)] // an append to it must not write over the next entry
			encoded = encoded[m:]
		case num >= entryFieldIndex && num <= entryFieldKind && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(encoded)
			if m < 0 {
				return e, false
			}
			switch num {
			case entryFieldIndex:
				e.Index = v
			case entryFieldTerm:
				e.Term = v
			case entryFieldKind:
				e.Kind = commitlog.Kind(consensuspb.EntryKind(int32(v)))
			}
			encoded = encoded[m:]
		default:
			return e, false
		}
	}
	return e, true
}

// decodeCommittedProto is decodeCommitted by proto.Unmarshal.
func decodeCommittedProto(frame []byte, batch []commitlog.Entry) ([]commitlog.Entry, *consensuspb.CommittedResponse, error) {
	resp := &consensuspb.CommittedResponse{}
	if err := proto.Unmarshal(frame, resp); err != nil {
		return batch, nil, err
	}
	for _, e := range resp.GetEntries() {
		batch = append(batch, EntryFromProto(e))
	}
	return batch, resp, nil
}
