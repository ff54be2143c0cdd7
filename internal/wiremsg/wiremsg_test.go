package wiremsg

import (
	"bytes"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// TestCodec: Encoded and Raw go out as their bytes, Raw comes in undecoded, anything else is protobuf.
func TestCodec(t *testing.T) {
	t.Parallel()
	c := NewCodec()
	msg := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: 4}, Count: 2}
	wire, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Marshal(&Encoded{Parts: mem.BufferSlice{mem.SliceBuffer(wire[:3]), mem.SliceBuffer(wire[3:])}})
	if err != nil || !bytes.Equal(out.Materialize(), wire) {
		t.Fatalf("Encoded marshals to %x (%v), want %x", out.Materialize(), err, wire)
	}
	if out, err = c.Marshal(&Raw{Data: wire}); err != nil || !bytes.Equal(out.Materialize(), wire) {
		t.Fatalf("Raw marshals to %x (%v), want %x", out.Materialize(), err, wire)
	}
	if out, err = c.Marshal(msg); err != nil || !bytes.Equal(out.Materialize(), wire) {
		t.Fatalf("a protobuf message marshals to %x (%v), want %x", out.Materialize(), err, wire)
	}
	raw := NewRaw().(*Raw)
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, raw); err != nil || !bytes.Equal(raw.Data, wire) {
		t.Fatalf("Raw unmarshals to %x (%v)", raw.Data, err)
	}
	var decoded pb.RangeResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &decoded); err != nil || !proto.Equal(&decoded, msg) {
		t.Fatalf("protobuf unmarshals to %v (%v)", &decoded, err)
	}
}

// TestPool: Get gives the length asked for in a power-of-two capacity, and what is put back is handed out again.
func TestPool(t *testing.T) {
	t.Parallel()
	var p Pool
	for _, tc := range []struct{ n, wantCap int }{{0, 1}, {1, 1}, {3, 4}, {4096, 4096}, {5000, 8192}} {
		b := p.Get(tc.n)
		if len(*b) != tc.n || cap(*b) != tc.wantCap {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", tc.n, len(*b), cap(*b), tc.n, tc.wantCap)
		}
		p.Put(b)
	}
	b := p.Get(3000)
	(*b)[0] = 42
	p.Put(b)
	again := p.Get(2500) // same class; sync.Pool may drop it, but on one goroutine without GC it keeps it
	if cap(*again) != 4096 || len(*again) != 2500 {
		t.Fatalf("Get(2500) after Put: len %d cap %d", len(*again), cap(*again))
	}
	notOurs := make([]byte, 10, 10)
	p.Put(&notOurs) // not a class size: dropped, not handed out as a 16-byte slice
	if got := p.Get(9); cap(*got) != 16 {
		t.Fatalf("Get(9) returned capacity %d", cap(*got))
	}
}

// TestBatch: a batch carries its messages in order, whole, whatever their parts; a flawed batch is an error and
// nothing after the flaw comes out.
func TestBatch(t *testing.T) {
	t.Parallel()
	msgs := [][]byte{[]byte("first"), {}, bytes.Repeat([]byte{7}, 300), bytes.Repeat([]byte{8}, batchCopyLimit+1),
		[]byte("after a large one"), bytes.Repeat([]byte{9}, 3*batchCopyLimit), []byte("last")}
	var b Batch
	if b.Take() != nil {
		t.Fatal("an empty batch is a message")
	}
	for _, m := range msgs {
		half := len(m) / 2
		b.Add(mem.SliceBuffer(m[:half]), mem.SliceBuffer(m[half:]))
	}
	if b.Messages() != len(msgs) {
		t.Fatalf("%d messages, want %d", b.Messages(), len(msgs))
	}
	size := b.Bytes()
	wire, err := NewCodec().Marshal(b.Take())
	if err != nil {
		t.Fatal(err)
	}
	data := wire.Materialize()
	if len(data) != size || b.Messages() != 0 || b.Bytes() != 0 {
		t.Fatalf("batch of %d bytes, Bytes said %d; after Take %d messages, %d bytes", len(data), size, b.Messages(), b.Bytes())
	}
	var got [][]byte
	if err := SplitBatch(data, func(m []byte) error { got = append(got, m); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(msgs) {
		t.Fatalf("split into %d messages, want %d", len(got), len(msgs))
	}
	for i := range msgs {
		if !bytes.Equal(got[i], msgs[i]) {
			t.Errorf("message %d is %q, want %q", i, got[i], msgs[i])
		}
	}
	for _, tc := range []struct {
		name   string
		flawed []byte
		whole  int // messages passed on before the flaw
	}{
		{"truncated entry", data[:len(data)-1], len(msgs) - 1},
		{"wrong field", append(append([]byte{}, data[:7]...), 0x12, 1, 'x'), 1},
	} {
		n := 0
		if err := SplitBatch(tc.flawed, func([]byte) error { n++; return nil }); err == nil || n != tc.whole {
			t.Errorf("%s: %d messages passed on, error %v; want %d and an error", tc.name, n, err, tc.whole)
		}
	}
}
