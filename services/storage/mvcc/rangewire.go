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
// a Kubernetes LIST costs one copy of each stored KeyValue instead of a decode and an encode. Any other range
// is Range, marshalled, and so is every range of a store whose values are sealed (they must be opened). Either
// decodes to the same message.
func (s *Store) RangeEncoded(r *pb.RangeRequest, raftTerm uint64, alloc func(n int) []byte) ([]byte, error) {
	if alloc == nil {
		alloc = func(n int) []byte { return make([]byte, 0, n) }
	}
	if r.CountOnly || r.KeysOnly || !isDefaultOrdering(r) || hasRevisionFilters(r) || s.cfg.OpenValue != nil {
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
	stored := make([][]byte, len(hits))
	size := 0
	for i, hit := range hits {
		data, err := v.loadEncoded(hit.ver.rev)
		if err != nil {
			return nil, err
		}
		if data == nil {
			return nil, fmt.Errorf("revision %d.%d missing from the key bucket", hit.ver.rev.main, hit.ver.rev.sub)
		}
		stored[i] = data
		size += 1 + protowire.SizeBytes(len(data))
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
	for _, data := range stored {
		out = protowire.AppendBytes(protowire.AppendTag(out, rangeKVsField, protowire.BytesType), data)
	}
	if more {
		out = protowire.AppendVarint(protowire.AppendTag(out, rangeMoreField, protowire.VarintType), 1)
	}
	if resp.Count != 0 {
		out = protowire.AppendVarint(protowire.AppendTag(out, rangeCountField, protowire.VarintType), uint64(resp.Count))
	}
	return out, nil
}
