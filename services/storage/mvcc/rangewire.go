package mvcc

import (
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// RangeResponse's field numbers, as RangeEncoded writes them.
const (
	rangeHeaderField protowire.Number = 1
	rangeKVsField    protowire.Number = 2
	rangeMoreField   protowire.Number = 3
	rangeCountField  protowire.Number = 4
)

// RangeEncoded is Range answered in the RangeResponse's wire encoding, with raftTerm in its header, appended to
// alloc(n): a slice with room for the n bytes of the answer (nil alloc: a new one). A plain range (key order,
// no revision filters, values wanted) is written straight from the stored KeyValues, which are never decoded:
// a Kubernetes LIST costs one copy of each stored KeyValue instead of a decode and an encode. In a store of
// sealed values (Config.Opener) each stored KeyValue is copied around its value field, and the value is opened
// straight into the answer: a large value is decrypted once, with no copy and no allocation of its own. Any
// other range is Range, marshalled. Either decodes to the same message.
func (s *Store) RangeEncoded(r *pb.RangeRequest, raftTerm uint64, alloc func(n int) []byte) ([]byte, error) {
	if alloc == nil {
		alloc = func(n int) []byte { return make([]byte, 0, n) }
	}
	if r.CountOnly || r.KeysOnly || !isDefaultOrdering(r) || hasRevisionFilters(r) {
		resp, err := s.Range(r)
		if err != nil {
			return nil, err
		}
		resp.Header.RaftTerm = raftTerm
		return proto.MarshalOptions{}.MarshalAppend(alloc(proto.Size(resp)), resp)
	}
	var out []byte
	err := s.read(func(v *readView) (err error) {
		out, err = s.encodePlainRangeLocked(v, r, raftTerm, alloc)
		return err
	})
	return out, err
}

// encodePlainRangeLocked writes a plain range's answer from the stored KeyValues (see RangeEncoded); the read lock is held.
func (s *Store) encodePlainRangeLocked(v *readView, r *pb.RangeRequest, raftTerm uint64, alloc func(n int) []byte) ([]byte, error) {
	resp, hits, err := s.rangeHitsLocked(r, s.currentRev)
	if err != nil {
		return nil, err
	}
	more := r.Limit > 0 && int64(len(hits)) > r.Limit
	if more {
		hits = hits[:r.Limit]
	}
	stored := make([]storedKV, len(hits))
	size := 0
	for i, hit := range hits {
		data, err := v.loadEncoded(hit.ver.rev)
		if err != nil {
			return nil, err
		}
		if data == nil {
			return nil, fmt.Errorf("revision %d.%d missing from the key bucket", hit.ver.rev.main, hit.ver.rev.sub)
		}
		if stored[i], err = s.toAnswer(hit.ver.rev, data); err != nil {
			return nil, err
		}
		size += 1 + protowire.SizeBytes(stored[i].size())
	}
	resp.Header.RaftTerm = raftTerm
	header, err := proto.Marshal(resp.Header)
	if err != nil {
		return nil, fmt.Errorf("marshal range header: %w", err)
	}
	size += 1 + protowire.SizeBytes(len(header))
	if more {
		size += 2
	}
	if resp.Count != 0 {
		size += 1 + protowire.SizeVarint(uint64(resp.Count))
	}
	out := alloc(size)
	out = protowire.AppendBytes(protowire.AppendTag(out, rangeHeaderField, protowire.BytesType), header)
	for _, kv := range stored {
		if out, err = s.appendKV(protowire.AppendTag(out, rangeKVsField, protowire.BytesType), kv); err != nil {
			return nil, err
		}
	}
	if more {
		out = protowire.AppendVarint(protowire.AppendTag(out, rangeMoreField, protowire.VarintType), 1)
	}
	if resp.Count != 0 {
		out = protowire.AppendVarint(protowire.AppendTag(out, rangeCountField, protowire.VarintType), uint64(resp.Count))
	}
	return out, nil
}

// KeyValue's field numbers that an answer of sealed values reads or rewrites.
const (
	kvKeyField   protowire.Number = 1
	kvValueField protowire.Number = 5
)

// storedKV is a stored KeyValue on its way into a range's answer: copied as it is, or, in a store of sealed values,
// copied around its value field (data[valueStart:valueEnd], at the end when the value is empty) with the value
// opened in its place.
type storedKV struct {
	rev                  revision
	data                 []byte // the stored KeyValue's encoding
	sealed               bool   // the value is opened (Config.Opener)
	key, value           []byte // the stored key and value (sealed only)
	valueStart, valueEnd int
	plainLen             int // the opened value's length (sealed only)
}

// toAnswer prepares the stored KeyValue data of rev for appendKV.
func (s *Store) toAnswer(rev revision, data []byte) (storedKV, error) {
	kv := storedKV{rev: rev, data: data}
	if s.cfg.Opener == nil {
		return kv, nil
	}
	kv.sealed, kv.valueStart, kv.valueEnd = true, len(data), len(data)
	for off := 0; off < len(data); {
		num, typ, n := protowire.ConsumeTag(data[off:])
		if n < 0 {
			return storedKV{}, fmt.Errorf("revision %d.%d: stored KeyValue: %w", rev.main, rev.sub, protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, data[off+n:])
		if m < 0 {
			return storedKV{}, fmt.Errorf("revision %d.%d: stored KeyValue: %w", rev.main, rev.sub, protowire.ParseError(m))
		}
		if typ == protowire.BytesType && (num == kvKeyField || num == kvValueField) {
			field, _ := protowire.ConsumeBytes(data[off+n:])
			if num == kvKeyField {
				kv.key = field
			} else {
				kv.value, kv.valueStart, kv.valueEnd = field, off, off+n+m
			}
		}
		off += n + m
	}
	plainLen, err := s.cfg.Opener.OpenedLen(kv.key, kv.value)
	if err != nil {
		return storedKV{}, fmt.Errorf("revision %d: %w", rev.main, err)
	}
	kv.plainLen = plainLen
	return kv, nil
}

// size is the length of kv's encoding in the answer.
func (kv storedKV) size() int {
	if !kv.sealed {
		return len(kv.data)
	}
	n := len(kv.data) - (kv.valueEnd - kv.valueStart)
	if kv.plainLen > 0 {
		n += 1 + protowire.SizeBytes(kv.plainLen)
	}
	return n
}

// appendKV appends kv's length and encoding to out, opening a sealed value into it.
func (s *Store) appendKV(out []byte, kv storedKV) ([]byte, error) {
	out = protowire.AppendVarint(out, uint64(kv.size()))
	if !kv.sealed {
		return append(out, kv.data...), nil
	}
	out = append(out, kv.data[:kv.valueStart]...)
	if kv.plainLen > 0 {
		out = protowire.AppendVarint(protowire.AppendTag(out, kvValueField, protowire.BytesType), uint64(kv.plainLen))
	}
	start := len(out)
	out, err := s.cfg.Opener.AppendOpen(out, kv.key, kv.value)
	if err != nil {
		return nil, fmt.Errorf("revision %d: %w", kv.rev.main, err)
	}
	if opened := len(out) - start; opened != kv.plainLen {
		return nil, fmt.Errorf("revision %d: opened value of %d bytes, %d announced", kv.rev.main, opened, kv.plainLen)
	}
	return append(out, kv.data[kv.valueEnd:]...), nil
}
