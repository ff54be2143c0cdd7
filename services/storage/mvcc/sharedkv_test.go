package mvcc

import (
	"bytes"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestDecodeSharedKVDecodesAsProto checks that decodeSharedKV gives what proto.Unmarshal gives, for the records
// mvcc writes and for one with a field it does not know, sharing the buffer where it decodes by itself, and
// that it fails on a truncated record.
func TestDecodeSharedKVDecodesAsProto(t *testing.T) {
	rev := revision{main: 7, sub: 1}
	withUnknown := protowire.AppendTag(mustMarshal(t, &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v")}), 9, protowire.VarintType)
	withUnknown = protowire.AppendVarint(withUnknown, 1)
	for _, tc := range []struct {
		name   string
		data   []byte
		shares bool // Value is a slice of data
	}{
		{"put", mustMarshal(t, &mvccpb.KeyValue{Key: []byte("key"), Value: bytes.Repeat([]byte("v"), 256),
			CreateRevision: 3, ModRevision: 7, Version: 5, Lease: 42}), true},
		{"empty value", mustMarshal(t, &mvccpb.KeyValue{Key: []byte("key"), CreateRevision: 1, ModRevision: 1, Version: 1}), false},
		{"negative lease", mustMarshal(t, &mvccpb.KeyValue{Key: []byte("k"), Value: []byte("v"), Lease: -1}), true},
		{"tombstone", mustMarshal(t, &mvccpb.KeyValue{Key: []byte("key")}), false},
		{"unknown field", withUnknown, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := decodeKV(rev, tc.data)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeSharedKV(rev, tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("decodeSharedKV = %v, want %v", got, want)
			}
			if shares := len(got.Value) > 0 && sharesBuffer(got.Value, tc.data); shares != tc.shares {
				t.Fatalf("value shares the buffer: %v, want %v", shares, tc.shares)
			}
		})
	}
	t.Run("truncated", func(t *testing.T) {
		data := mustMarshal(t, &mvccpb.KeyValue{Key: []byte("key"), Value: []byte("value")})
		if kv, err := decodeSharedKV(rev, data[:len(data)-1]); err == nil {
			t.Fatalf("a truncated record decoded as %v", kv)
		}
	})
}

// sharesBuffer reports whether sub starts inside buf.
func sharesBuffer(sub, buf []byte) bool {
	for i := range buf {
		if &buf[i] == &sub[0] {
			return true
		}
	}
	return false
}

func mustMarshal(t *testing.T, kv *mvccpb.KeyValue) []byte {
	t.Helper()
	data, err := proto.Marshal(kv)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// BenchmarkDecodePrevKV compares decoding a stored 256-byte put with proto.Unmarshal (decodeKV, as every
// previous version was loaded in a write) and sharing the buffer (decodeSharedKV, for a pending one).
//
//	go test -run '^$' -bench DecodePrevKV -benchmem ./services/storage/mvcc/
func BenchmarkDecodePrevKV(b *testing.B) {
	data, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte("benchkey"), Value: bytes.Repeat([]byte("v"), 256),
		CreateRevision: 3, ModRevision: 7, Version: 5})
	if err != nil {
		b.Fatal(err)
	}
	rev := revision{main: 7}
	for _, tc := range []struct {
		name   string
		decode func(revision, []byte) (*mvccpb.KeyValue, error)
	}{{"copied", decodeKV}, {"shared", decodeSharedKV}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.decode(rev, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
