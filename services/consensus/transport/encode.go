package transport

import (
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/framed"
)

// The wire format is consensuspb.MessageBatch's, written and read here field by field so that no message is
// copied into a batch on the way out, nor out of one on the way in, and so that entries a Ready sends to several
// followers are encoded once. A raft message is encoded as proto.Marshal would, except that its entries come
// last (a decoder takes fields in any order).
const (
	batchFrom      protowire.Number = 1
	batchClusterID protowire.Number = 2
	batchMessages  protowire.Number = 3
	messageEntries protowire.Number = 7 // raftpb.Message.entries
)

// appendBatchHead appends a MessageBatch's from and cluster_id to frame; the messages follow, each as written
// by encodeMessage.
func appendBatchHead(frame []byte, from, clusterID uint64) []byte {
	frame = protowire.AppendTag(frame, batchFrom, protowire.VarintType)
	frame = protowire.AppendVarint(frame, from)
	frame = protowire.AppendTag(frame, batchClusterID, protowire.VarintType)
	return protowire.AppendVarint(frame, clusterID)
}

// encodedEntries are the entries of one message, encoded as raftpb.Message's entries field in parts: a buffer
// shared by the entries holds everything but the data of large entries (over framed.CopyLimit), which are
// parts of their own, the log's own slices (raft never changes an entry's data once it is in the log): a large
// entry is written from the log, with no copy, and small ones make a few large parts rather than many small
// ones, which framed.Conn.Send would copy one by one into its write buffer.
type encodedEntries struct {
	ents  []*raftpb.Entry
	parts [][]byte
	size  int // of all parts
}

// entryEncoder encodes the entries of the messages of one Send: a leader's appends to followers that are in
// step carry the same entries, which are encoded once and shared by every follower's message.
type entryEncoder struct {
	recent []*encodedEntries
}

// raftpb.Entry's fields.
const (
	entryType  protowire.Number = 1
	entryTerm  protowire.Number = 2
	entryIndex protowire.Number = 3
	entryData  protowire.Number = 4
)

// encode returns ents encoded, from an earlier call when it had the same entries (the same *Entry values:
// raft hands out its log's own).
func (e *entryEncoder) encode(ents []*raftpb.Entry) (*encodedEntries, error) {
	for _, r := range e.recent {
		if slices.Equal(r.ents, ents) {
			return r, nil
		}
	}
	shared := 0
	for _, ent := range ents {
		shared += entryHeadSize(ent)
		if !inPlace(ent) {
			shared += len(ent.Data)
		}
	}
	buf := make([]byte, 0, shared)
	r := &encodedEntries{ents: ents}
	start := 0 // of the part buf is filling
	for _, ent := range ents {
		if len(ent.ProtoReflect().GetUnknown()) > 0 { // not from this raft: marshalled whole, as proto would
			var err error
			if buf, err = appendEntry(buf, ent); err != nil {
				return nil, fmt.Errorf("entry %d: %w", ent.GetIndex(), err)
			}
			continue
		}
		buf = appendEntryHead(buf, ent)
		if !inPlace(ent) {
			buf = append(buf, ent.Data...)
			continue
		}
		r.parts = append(r.parts, buf[start:], ent.Data)
		start = len(buf)
	}
	if start < len(buf) {
		r.parts = append(r.parts, buf[start:])
	}
	for _, part := range r.parts {
		r.size += len(part)
	}
	e.recent = append(e.recent, r)
	return r, nil
}

// inPlace reports whether ent's data is written from the log rather than copied into the shared buffer.
func inPlace(ent *raftpb.Entry) bool { return len(ent.Data) > framed.CopyLimit }

// entryHeadSize is the size of what appendEntryHead appends for ent.
func entryHeadSize(ent *raftpb.Entry) int {
	n := entryFieldsSize(ent)
	return protowire.SizeTag(messageEntries) + protowire.SizeVarint(uint64(n)) + n - len(ent.Data)
}

// entryFieldsSize is the size of ent marshalled, as proto.Size would say for an entry without unknown fields.
func entryFieldsSize(ent *raftpb.Entry) int {
	n := 0
	if ent.Type != nil {
		n += protowire.SizeTag(entryType) + protowire.SizeVarint(uint64(*ent.Type))
	}
	if ent.Term != nil {
		n += protowire.SizeTag(entryTerm) + protowire.SizeVarint(*ent.Term)
	}
	if ent.Index != nil {
		n += protowire.SizeTag(entryIndex) + protowire.SizeVarint(*ent.Index)
	}
	if ent.Data != nil {
		n += protowire.SizeTag(entryData) + protowire.SizeBytes(len(ent.Data))
	}
	return n
}

// appendEntryHead appends ent as one element of raftpb.Message's entries, as proto.Marshal writes it (fields
// in number order), up to its data: the data follows as a part of its own. ent has no unknown fields.
func appendEntryHead(b []byte, ent *raftpb.Entry) []byte {
	b = protowire.AppendTag(b, messageEntries, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(entryFieldsSize(ent)))
	if ent.Type != nil {
		b = protowire.AppendTag(b, entryType, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(*ent.Type))
	}
	if ent.Term != nil {
		b = protowire.AppendTag(b, entryTerm, protowire.VarintType)
		b = protowire.AppendVarint(b, *ent.Term)
	}
	if ent.Index != nil {
		b = protowire.AppendTag(b, entryIndex, protowire.VarintType)
		b = protowire.AppendVarint(b, *ent.Index)
	}
	if ent.Data != nil {
		b = protowire.AppendTag(b, entryData, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(len(ent.Data)))
	}
	return b
}

// appendEntry appends ent as one element of raftpb.Message's entries, marshalled by proto.
func appendEntry(b []byte, ent *raftpb.Entry) ([]byte, error) {
	b = protowire.AppendTag(b, messageEntries, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(proto.Size(ent)))
	return proto.MarshalOptions{}.MarshalAppend(b, ent)
}

// encodeMessage encodes m as one element of a MessageBatch's messages: head is the field's tag and length and
// m without its entries, then come its entries (nil when it has none; shared, not to be changed). m's Entries
// is set aside while its other fields are marshalled: m must not be read elsewhere meanwhile (raft's loop owns
// it).
func encodeMessage(m *raftpb.Message, enc *entryEncoder) (head []byte, entries *encodedEntries, err error) {
	entriesSize := 0
	if len(m.Entries) > 0 {
		if entries, err = enc.encode(m.Entries); err != nil {
			return nil, nil, err
		}
		entriesSize = entries.size
	}
	ents := m.Entries
	m.Entries = nil
	defer func() { m.Entries = ents }()
	size := proto.Size(m)
	head = make([]byte, 0, protowire.SizeTag(batchMessages)+protowire.SizeVarint(uint64(size+entriesSize))+size)
	head = protowire.AppendTag(head, batchMessages, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(size+entriesSize))
	if head, err = (proto.MarshalOptions{}).MarshalAppend(head, m); err != nil {
		return nil, nil, err
	}
	return head, entries, nil
}

// errBadBatch marks a frame that is not a MessageBatch.
var errBadBatch = errors.New("transport: bad message batch")

// decodeBatch reads a MessageBatch from frame: its sender, its cluster ID, and its messages appended to
// messages (slices of frame, valid as long as frame is).
func decodeBatch(frame []byte, messages [][]byte) (from, clusterID uint64, _ [][]byte, err error) {
	for len(frame) > 0 {
		num, typ, n := protowire.ConsumeTag(frame)
		if n < 0 {
			return 0, 0, messages, fmt.Errorf("%w: %w", errBadBatch, protowire.ParseError(n))
		}
		frame = frame[n:]
		switch {
		case (num == batchFrom || num == batchClusterID) && typ == protowire.VarintType:
			var v uint64
			if v, n = protowire.ConsumeVarint(frame); n >= 0 {
				if num == batchFrom {
					from = v
				} else {
					clusterID = v
				}
			}
		case num == batchMessages && typ == protowire.BytesType:
			var body []byte
			if body, n = protowire.ConsumeBytes(frame); n >= 0 {
				messages = append(messages, body)
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, frame)
		}
		if n < 0 {
			return 0, 0, messages, fmt.Errorf("%w: field %d: %w", errBadBatch, num, protowire.ParseError(n))
		}
		frame = frame[n:]
	}
	return from, clusterID, messages, nil
}
