package storageclient

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
)

// poisonPool is a buffer pool that overwrites every buffer returned to it, so reading a buffer after its last
// reference was freed shows.
type poisonPool struct{}

func (poisonPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (poisonPool) Put(b *[]byte) {
	for i := range *b {
		(*b)[i] = 0xee
	}
}

// pooled splits wire into pooled buffers of chunk bytes, as gRPC hands a message in its received frames.
func pooled(wire []byte, chunk int) mem.BufferSlice {
	var out mem.BufferSlice
	for len(wire) > 0 {
		n := min(chunk, len(wire))
		out = append(out, mem.Copy(wire[:n], poisonPool{}))
		wire = wire[n:]
	}
	return out
}

// TestWireAnswerDecode: a range answer's bytes are read in place, outlive the received buffers and are what
// storage encoded; every other answer decodes as PipelineAnswer.
func TestWireAnswerDecode(t *testing.T) {
	rng := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: 9}, Count: 2}
	for i := range 2 {
		rng.Kvs = append(rng.Kvs, &mvccpb.KeyValue{Key: []byte{'k', byte(i)}, Value: bytes.Repeat([]byte{'v'}, 40000)})
	}
	rangeWire, err := proto.Marshal(rng)
	if err != nil {
		t.Fatal(err)
	}
	marshal := func(m *storagepb.PipelineResponse) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rangeFirst := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), rangeWire)
	rangeFirst = protowire.AppendVarint(protowire.AppendTag(rangeFirst, 1, protowire.VarintType), 7)
	submit := &storagepb.SubmitResponse{Index: 3}
	tests := []struct {
		name        string
		wire        []byte
		wantID      uint64
		wantRange   []byte // nil: not a range answer
		wantInPlace bool
	}{
		{"range", marshal(&storagepb.PipelineResponse{Id: 7, Result: &storagepb.PipelineResponse_Range{Range: rng}}), 7, rangeWire, true},
		{"range before id", rangeFirst, 7, rangeWire, true},
		{"empty range", marshal(&storagepb.PipelineResponse{Id: 8, Result: &storagepb.PipelineResponse_Range{Range: &pb.RangeResponse{}}}), 8, []byte{}, true},
		{"submit", marshal(&storagepb.PipelineResponse{Id: 5, Result: &storagepb.PipelineResponse_Submit{Submit: submit}}), 5, nil, false},
		{"error", marshal(&storagepb.PipelineResponse{Id: 6, Result: &storagepb.PipelineResponse_Error{Error: &status.Status{Code: 5, Message: "x"}}}), 6, nil, false},
	}
	for _, tt := range tests {
		for _, chunk := range []int{1, 3, 16384, len(tt.wire)} {
			data := pooled(tt.wire, max(chunk, 1))
			var w wireAnswer
			if err := w.decode(data); err != nil {
				t.Fatalf("%s, %d-byte buffers: %v", tt.name, chunk, err)
			}
			data.Free() // as the receiver does once decoded
			if w.id != tt.wantID || (w.answer == nil) != tt.wantInPlace {
				t.Errorf("%s, %d-byte buffers: id %d, decoded %v; want id %d, read in place %v", tt.name, chunk, w.id, w.answer, tt.wantID, tt.wantInPlace)
			}
			if got := w.rangeData.Materialize(); tt.wantRange != nil && !bytes.Equal(got, tt.wantRange) {
				t.Errorf("%s, %d-byte buffers: range bytes differ (%d bytes, want %d)", tt.name, chunk, len(got), len(tt.wantRange))
			}
			if tt.wantRange == nil && w.rangeData != nil {
				t.Errorf("%s: range data %d bytes, want none", tt.name, w.rangeData.Len())
			}
			if !tt.wantInPlace && !proto.Equal(w.answer, mustAnswer(t, tt.wire)) {
				t.Errorf("%s: decoded %v", tt.name, w.answer)
			}
			w.free()
		}
	}
	var w wireAnswer
	if err := w.decode(pooled(rangeFirst[:len(rangeFirst)/2], 1000)); err == nil {
		t.Errorf("a truncated answer decoded: id %d, %d range bytes", w.id, w.rangeData.Len())
	}
}

func mustAnswer(t *testing.T, wire []byte) *storagepb.PipelineAnswer {
	t.Helper()
	a := &storagepb.PipelineAnswer{}
	if err := proto.Unmarshal(wire, a); err != nil {
		t.Fatal(err)
	}
	return a
}
