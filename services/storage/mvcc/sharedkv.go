package mvcc

import (
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The fields of mvccpb.KeyValue (etcd's kv.proto), as decodeSharedKV reads them.
const (
	kvFieldKey            = 1
	kvFieldCreateRevision = 2
	kvFieldModRevision    = 3
	kvFieldVersion        = 4
	kvFieldValue          = 5
	kvFieldLease          = 6
)

// decodeSharedKV is decodeKV of bytes that are never modified (the pending buffer's): the KeyValue's Key and
// Value share them instead of copying them, which is what proto.Unmarshal cannot do. A record with a field it
// does not know is decoded by proto.Unmarshal instead, so nothing is lost.
func decodeSharedKV(rev revision, data []byte) (*mvccpb.KeyValue, error) {
	kv := &mvccpb.KeyValue{}
	for rest := data; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return nil, fmt.Errorf("decode revision %d.%d: %w", rev.main, rev.sub, protowire.ParseError(n))
		}
		rest = rest[n:]
		switch {
		case (num == kvFieldKey || num == kvFieldValue) && typ == protowire.BytesType:
			b, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return nil, fmt.Errorf("decode revision %d.%d: %w", rev.main, rev.sub, protowire.ParseError(n))
			}
			if num == kvFieldKey {
				kv.Key = b[:len(b):len(b)] // an append to it must not write into the buffer
			} else {
				kv.Value = b[:len(b):len(b)]
			}
			rest = rest[n:]
		case num >= kvFieldCreateRevision && num <= kvFieldLease && num != kvFieldValue && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return nil, fmt.Errorf("decode revision %d.%d: %w", rev.main, rev.sub, protowire.ParseError(n))
			}
			switch num {
			case kvFieldCreateRevision:
				kv.CreateRevision = int64(v)
			case kvFieldModRevision:
				kv.ModRevision = int64(v)
			case kvFieldVersion:
				kv.Version = int64(v)
			case kvFieldLease:
				kv.Lease = int64(v)
			}
			rest = rest[n:]
		default:
			if err := proto.Unmarshal(data, kv); err != nil {
				return nil, fmt.Errorf("decode revision %d.%d: %w", rev.main, rev.sub, err)
			}
			return kv, nil
		}
	}
	return kv, nil
}
