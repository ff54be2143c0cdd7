package storageclient

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
)

// TestEncodeSubmitIsASubmitRequest: what the pipeline sends for a write decodes as the SubmitRequest carrying
// it, byte for byte the encoding of that message, for requests small and large.
func TestEncodeSubmitIsASubmitRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *pb.InternalRaftRequest
	}{
		{"empty", &pb.InternalRaftRequest{}},
		{"put", &pb.InternalRaftRequest{Header: &pb.RequestHeader{AuthRevision: 3},
			Put: &pb.PutRequest{Key: []byte("k"), Value: make([]byte, 256), PrevKv: true}}},
		{"put over 2 MiB", &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k"), Value: make([]byte, 2<<20)}}},
		{"txn", &pb.InternalRaftRequest{Header: &pb.RequestHeader{Username: "u", AuthRevision: 9},
			Txn: &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{
				RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("b")}}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := encodeSubmit(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&storagepb.SubmitRequest{Request: tc.req})
			if err != nil {
				t.Fatal(err)
			}
			decoded := &storagepb.SubmitRequest{}
			if err := proto.Unmarshal(got, decoded); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !proto.Equal(decoded, &storagepb.SubmitRequest{Request: tc.req}) {
				t.Fatalf("decoded %v, want the request %v", decoded, tc.req)
			}
			if string(got) != string(want) {
				t.Fatalf("encoding differs from the SubmitRequest's: %d bytes, want %d", len(got), len(want))
			}
		})
	}
}

// BenchmarkEncodeSubmit measures the encoding of a 256-byte put as a pipeline Submit sends it (encodeSubmit)
// against marshalling the SubmitRequest built around it.
//
//	go test -run '^$' -bench EncodeSubmit -benchmem ./internal/storageclient/
func BenchmarkEncodeSubmit(b *testing.B) {
	req := &pb.InternalRaftRequest{Header: &pb.RequestHeader{AuthRevision: 3},
		Put: &pb.PutRequest{Key: []byte("bench/key"), Value: make([]byte, 256)}}
	for _, encode := range []struct {
		name string
		do   func() ([]byte, error)
	}{
		{"message", func() ([]byte, error) { return proto.Marshal(&storagepb.SubmitRequest{Request: req}) }},
		{"encodeSubmit", func() ([]byte, error) { return encodeSubmit(req) }},
	} {
		b.Run(encode.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encode.do(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
