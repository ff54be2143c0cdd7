package transport

import (
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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

// encodedEntries are the entries of one message, encoded as raftpb.Message's entries field.
type encodedEntries struct {
	ents    []*raftpb.Entry
	encoded []byte
}

// entryEncoder encodes the entries of the messages of one Send: a leader's appends to followers that are in
// step carry the same entries, which are encoded once and shared by every follower's message.
type entryEncoder struct {
	recent []*encodedEntries
}

// encode returns ents encoded as raftpb.Message's entries field, from an earlier call when it had the same
// entries (the same *Entry values: raft hands out its log's own).
func (e *entryEncoder) encode(ents []*raftpb.Entry) (*encodedEntries, error) {
	for _, r := range e.recent {
		if slices.Equal(r.ents, ents) {
			return r, nil
		}
	}
	size := 0
	for _, ent := range ents {
		n := proto.Size(ent)
		size += protowire.SizeTag(messageEntries) + protowire.SizeBytes(n)
	}
	encoded := make([]byte, 0, size)
	for _, ent := range ents {
		encoded = protowire.AppendTag(encoded, messageEntries, protowire.BytesType)
		encoded = protowire.AppendVarint(encoded, uint64(proto.Size(ent)))
		var err error
		if encoded, err = (proto.MarshalOptions{}).MarshalAppend(encoded, ent); err != nil {
			return nil, fmt.Errorf("entry %d: %w", ent.GetIndex(), err)
		}
	}
	r := &encodedEntries{ents: ents, encoded: encoded}
	e.recent = append(e.recent, r)
	return r, nil
}

// encodeMessage encodes m as one element of a MessageBatch's messages: head is the field's tag and length and
// m without its entries, then come its entries (nil when it has none; shared, not to be changed). m's Entries
// is set aside while its other fields are marshalled: m must not be read elsewhere meanwhile (raft's loop owns
// it).
func encodeMessage(m *raftpb.Message, enc *entryEncoder) (head []byte, entries *encodedEntries, err error) {
	var encoded []byte
	if len(m.Entries) > 0 {
		if entries, err = enc.encode(m.Entries); err != nil {
			return nil, nil, err
		}
		encoded = entries.encoded
	}
	ents := m.Entries
	m.Entries = nil
	defer func() { m.Entries = ents }()
	size := proto.Size(m)
	head = make([]byte, 0, protowire.SizeTag(batchMessages)+protowire.SizeVarint(uint64(size+len(encoded)))+size)
	head = protowire.AppendTag(head, batchMessages, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(size+len(encoded)))
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
