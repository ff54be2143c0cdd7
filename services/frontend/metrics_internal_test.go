package frontend

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// TestCountingCodecCountsMessages: the client port's codec counts what etcd's codec counts, the marshalled
// message: a request decoded adds its encoded size to the received bytes, an answer encoded (a relayed Range's
// spliced parts included) adds its size to the sent bytes.
func TestCountingCodecCountsMessages(t *testing.T) {
	bytes := newClientBytes()
	codec := countingCodec{CodecV2: wiremsg.NewCodec(), bytes: bytes}
	put := &pb.PutRequest{Key: []byte("key"), Value: make([]byte, 256)}
	encodedPut, err := proto.Marshal(put)
	if err != nil {
		t.Fatal(err)
	}
	answer := &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 7}}
	relayed := &wiremsg.Encoded{Parts: mem.BufferSlice{mem.SliceBuffer("header"), mem.SliceBuffer("kvs")}}
	var wantSent, wantReceived float64
	for _, step := range []struct {
		name string
		do   func() error
		sent int
		recv int
	}{
		{"decode a put", func() error { return codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(encodedPut)}, &pb.PutRequest{}) },
			0, len(encodedPut)},
		{"encode an answer", func() error { _, err := codec.Marshal(answer); return err }, proto.Size(answer), 0},
		{"encode a relayed range", func() error { _, err := codec.Marshal(relayed); return err }, len("header") + len("kvs"), 0},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		wantSent += float64(step.sent)
		wantReceived += float64(step.recv)
		if got := testutil.ToFloat64(bytes.sent); got != wantSent {
			t.Errorf("after %s: sent %v bytes, want %v", step.name, got, wantSent)
		}
		if got := testutil.ToFloat64(bytes.received); got != wantReceived {
			t.Errorf("after %s: received %v bytes, want %v", step.name, got, wantReceived)
		}
	}
}
