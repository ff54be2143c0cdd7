package wiremsg

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
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
	notOurs := make([]byte, 10)
	p.Put(&notOurs) // not a class size: dropped, not handed out as a 16-byte slice
	if got := p.Get(9); cap(*got) != 16 {
		t.Fatalf("Get(9) returned capacity %d", cap(*got))
	}
}

// TestBatch: a batch carries its messages in order, whole, whatever their parts; a flawed batch is an error and
// nothing after the flaw comes out.
// countingPool is a Pool that tracks the buffers it handed out and has not had back.
type countingPool struct {
	Pool
	out map[*[]byte]bool
}

func (p *countingPool) Get(n int) *[]byte {
	b := p.Pool.Get(n)
	p.out[b] = true
	return b
}

func (p *countingPool) Put(b *[]byte) {
	if !p.out[b] {
		panic("a buffer the pool did not hand out, or handed back twice")
	}
	delete(p.out, b)
	p.Pool.Put(b)
}

func TestBatch(t *testing.T) {
	t.Parallel()
	msgs := [][]byte{[]byte("first"), {}, bytes.Repeat([]byte{7}, 300), bytes.Repeat([]byte{8}, batchCopyLimit+1),
		[]byte("after a large one"), bytes.Repeat([]byte{9}, 3*batchCopyLimit), []byte("last")}
	var data []byte
	for _, pooled := range []bool{false, true} {
		var b Batch
		pool := &countingPool{out: map[*[]byte]bool{}}
		if pooled {
			b.Pool = pool
		}
		if b.Take() != nil {
			t.Fatal("an empty batch is a message")
		}
		for _, m := range msgs {
			half := len(m) / 2
			b.Add(mem.SliceBuffer(m[:half]), mem.SliceBuffer(m[half:]))
		}
		if b.Messages() != len(msgs) {
			t.Fatalf("pooled %v: %d messages, want %d", pooled, b.Messages(), len(msgs))
		}
		size := b.Bytes()
		wire, err := NewCodec().Marshal(b.Take())
		if err != nil {
			t.Fatal(err)
		}
		// The small messages went into three buffers (before, between and after the two large ones): with a
		// Pool, each is the pool's until gRPC frees the batch.
		if want := map[bool]int{false: 0, true: 3}[pooled]; len(pool.out) != want {
			t.Fatalf("pooled %v: %d buffers out of the pool before the batch is freed, want %d", pooled, len(pool.out), want)
		}
		data = wire.Materialize()
		wire.Free()
		if len(pool.out) != 0 {
			t.Fatalf("pooled %v: %d buffers not back in the pool once the batch is freed", pooled, len(pool.out))
		}
		if len(data) != size || b.Messages() != 0 || b.Bytes() != 0 {
			t.Fatalf("batch of %d bytes, Bytes said %d; after Take %d messages, %d bytes", len(data), size, b.Messages(), b.Bytes())
		}
		var got [][]byte
		if err := SplitBatch(data, func(m []byte, _ uint64) error { got = append(got, m); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(msgs) {
			t.Fatalf("pooled %v: split into %d messages, want %d", pooled, len(got), len(msgs))
		}
		for i := range msgs {
			if !bytes.Equal(got[i], msgs[i]) {
				t.Errorf("pooled %v: message %d is %q, want %q", pooled, i, got[i], msgs[i])
			}
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
		if err := SplitBatch(tc.flawed, func([]byte, uint64) error { n++; return nil }); err == nil || n != tc.whole {
			t.Errorf("%s: %d messages passed on, error %v; want %d and an error", tc.name, n, err, tc.whole)
		}
	}
}

// TestBatchFits: Fits says whether a message keeps a batch within a limit exactly as adding it would (Bytes
// after Add), for messages whose length prefix takes one byte or two, at and around the limit; an empty batch
// takes any message.
func TestBatchFits(t *testing.T) {
	t.Parallel()
	const limit = 1000
	if !(&Batch{}).Fits(limit, mem.SliceBuffer(make([]byte, 5*limit))) {
		t.Fatal("an empty batch does not fit a message over the limit")
	}
	for _, first := range []int{100, 800, 870} {
		for n := 0; n <= 200; n++ {
			var b Batch
			b.Add(mem.SliceBuffer(make([]byte, first)))
			msg := make([]byte, n)
			fits := b.Fits(limit, mem.SliceBuffer(msg[:n/2]), mem.SliceBuffer(msg[n/2:]))
			b.Add(mem.SliceBuffer(msg))
			if want := b.Bytes() <= limit; fits != want {
				t.Fatalf("after %d bytes, a message of %d: Fits %v, but Add made the batch %d bytes (limit %d)",
					first, n, fits, b.Bytes(), limit)
			}
		}
	}
}

// TestBatchStamps: each message comes out of a batch with the stamp set when it was added (0 for none), held
// or not; a stamp is written only where it changes, Fits counts it, and a Take carries it into the next batch,
// which writes it again. A stamp that is not a varint, or that ends the batch, is a flaw.
func TestBatchStamps(t *testing.T) {
	t.Parallel()
	type stamped struct {
		msg   string
		stamp uint64
	}
	adds := []stamped{{"created", 0}, {"a", 7}, {"b", 7}, {"c", 1 << 40}, {"canceled", 0}, {"d", 1 << 40}}
	var b Batch
	plain := 0 // the batch's bytes without stamps
	for _, a := range adds {
		b.Stamp(a.stamp)
		before := b.Bytes()
		b.Add(mem.SliceBuffer(a.msg))
		plain += b.Bytes() - before
	}
	// stamps written: 7 (2 bytes), 1<<40 (7 bytes), 0 (2 bytes), 1<<40 (7 bytes)
	const stampBytes = 2 + 7 + 2 + 7
	for _, a := range adds {
		plain -= protowire.SizeTag(batchEntryField) + protowire.SizeBytes(len(a.msg))
	}
	if plain != stampBytes {
		t.Fatalf("stamps took %d bytes, want %d (written only where the stamp changes)", plain, stampBytes)
	}
	if b.Fits(b.Bytes()+3, mem.SliceBuffer("x")) != true {
		t.Fatal("a 1-byte message under the same stamp does not fit in 3 bytes")
	}
	b.Stamp(9)
	if b.Fits(b.Bytes()+3, mem.SliceBuffer("x")) || !b.Fits(b.Bytes()+5, mem.SliceBuffer("x")) {
		t.Fatal("Fits does not count a new stamp's 2 bytes")
	}
	b.Stamp(1 << 40)
	data := b.Take().Parts.Materialize()
	var got []stamped
	collect := func(m []byte, stamp uint64) error { got = append(got, stamped{string(m), stamp}); return nil }
	if err := SplitBatch(data, collect); err != nil || !slices.Equal(got, adds) {
		t.Fatalf("split %v (error %v), want %v", got, err, adds)
	}
	got = nil
	err := new(Lender).SplitHeldBatch(mem.SliceBuffer(data), func(m mem.Buffer, stamp uint64) error {
		defer m.Free()
		return collect(m.ReadOnlyData(), stamp)
	}, nil)
	if err != nil || !slices.Equal(got, adds) {
		t.Fatalf("held: split %v (error %v), want %v", got, err, adds)
	}
	b.Add(mem.SliceBuffer("next"))
	got = nil
	if err := SplitBatch(b.Take().Parts.Materialize(), collect); err != nil || !slices.Equal(got, []stamped{{"next", 1 << 40}}) {
		t.Fatalf("the next batch split %v (error %v), want its message with the stamp in force", got, err)
	}
	for name, flawed := range map[string][]byte{
		"stamp of bytes": protowire.AppendBytes(protowire.AppendTag(nil, batchStampField, protowire.BytesType), []byte("x")),
		"trailing stamp": protowire.AppendVarint(protowire.AppendTag(append([]byte{}, data...), batchStampField, protowire.VarintType), 3),
		"cut stamp":      protowire.AppendTag(nil, batchStampField, protowire.VarintType),
	} {
		n := 0
		if err := SplitBatch(flawed, func([]byte, uint64) error { n++; return nil }); err == nil {
			t.Errorf("%s: no error (%d messages passed on)", name, n)
		}
	}
}

// TestRelayStampsPromised: a header promises stamps only with the stamped version and one positive bound.
func TestRelayStampsPromised(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		header metadata.MD
		bound  time.Duration
		ok     bool
	}{
		{metadata.Pairs(RelayBatchHeader, RelayBatchStamped, RelayLagBoundHeader, "5s"), 5 * time.Second, true},
		{metadata.Pairs(RelayBatchHeader, RelayBatchPlain, RelayLagBoundHeader, "5s"), 0, false},
		{metadata.Pairs(RelayBatchHeader, RelayBatchStamped), 0, false},
		{metadata.Pairs(RelayBatchHeader, RelayBatchStamped, RelayLagBoundHeader, "soon"), 0, false},
		{metadata.Pairs(RelayBatchHeader, RelayBatchStamped, RelayLagBoundHeader, "-1s"), 0, false},
		{metadata.Pairs(RelayBatchHeader, RelayBatchStamped, RelayLagBoundHeader, "1s", RelayLagBoundHeader, "2s"), 0, false},
	} {
		bound, ok := RelayStampsPromised(tc.header)
		if ok != tc.ok || ok && bound != tc.bound {
			t.Errorf("%v: bound %v, %v; want %v, %v", tc.header, bound, ok, tc.bound, tc.ok)
		}
	}
}

// recordingPool is a Pool that counts what comes back to it.
type recordingPool struct {
	Pool
	gets, puts int
	handedOut  *[]byte // the last buffer Get handed out
}

func (p *recordingPool) Get(n int) *[]byte {
	p.gets++
	p.handedOut = p.Pool.Get(n)
	return p.handedOut
}
func (p *recordingPool) Put(b *[]byte) { p.puts++; p.Pool.Put(b) }

// TestHeldBatch: a batch received as gRPC hands it over into a Held of a pooled codec splits into references
// to its messages, whole and in order; its buffer goes back to its pool once the last of them is freed, and
// not before, whether the batch is whole or flawed (nothing after the flaw comes out). Handed over in pieces
// (a buffer per data frame), the batch is copied into one buffer of the codec's pool; in one piece, it stays in
// gRPC's buffer, uncopied, which outlives gRPC's own reference. A message below gRPC's pooling threshold in
// pieces is not pooled.
func TestHeldBatch(t *testing.T) {
	t.Parallel()
	msgs := [][]byte{[]byte("first"), {}, bytes.Repeat([]byte{7}, 300), bytes.Repeat([]byte{8}, batchCopyLimit+1),
		[]byte("after a large one"), bytes.Repeat([]byte{9}, 3*batchCopyLimit), []byte("last")}
	var b Batch
	for _, m := range msgs {
		b.Add(mem.SliceBuffer(m))
	}
	wire, err := NewCodec().Marshal(b.Take())
	if err != nil {
		t.Fatal(err)
	}
	data := wire.Materialize()
	for _, tc := range []struct {
		name  string
		batch []byte
		whole int // messages passed on before the flaw; len(msgs) when none
	}{
		{"whole", data, len(msgs)},
		{"truncated entry", data[:len(data)-1], len(msgs) - 1},
		{"wrong field", append(append([]byte{}, data[:len(data)-6]...), 0x12, 1, 'x'), len(msgs) - 1},
	} {
		for _, onePiece := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, one piece %v", tc.name, onePiece), func(t *testing.T) {
				pool := &recordingPool{}     // the codec's
				grpcPool := &recordingPool{} // gRPC's receive buffers'
				var pieces mem.BufferSlice   // as gRPC's reader hands a message over: a buffer per data frame
				for rest := tc.batch; len(rest) > 0; {
					n := min(len(rest), 1000)
					pieces = append(pieces, mem.SliceBuffer(rest[:n]))
					rest = rest[n:]
				}
				if onePiece {
					buf := grpcPool.Get(len(tc.batch))
					copy(*buf, tc.batch)
					pieces = mem.BufferSlice{mem.NewBuffer(buf, grpcPool)}
				}
				held := NewHeld().(*Held)
				if err := NewCodec().WithPool(pool).Unmarshal(pieces, held); err != nil {
					t.Fatal(err)
				}
				pieces.Free() // gRPC's references, as it frees them once Unmarshal returns
				if onePiece {
					pool = grpcPool // the buffer that must come back
					if &held.Buf.ReadOnlyData()[0] != &(*grpcPool.handedOut)[0] {
						t.Fatal("a batch in one piece was copied")
					}
				}
				if pool.gets != 1 {
					t.Fatalf("a %d-byte batch took %d buffers from the pool, want 1", len(tc.batch), pool.gets)
				}
				var refs []mem.Buffer
				err := new(Lender).SplitHeldBatch(held.Buf, func(m mem.Buffer, _ uint64) error { refs = append(refs, m); return nil }, nil)
				if (err != nil) != (tc.whole < len(msgs)) || len(refs) != tc.whole {
					t.Fatalf("%d messages passed on, error %v; want %d (an error: %v)", len(refs), err, tc.whole,
						tc.whole < len(msgs))
				}
				for i, ref := range refs {
					if !bytes.Equal(ref.ReadOnlyData(), msgs[i]) {
						t.Fatalf("message %d is %d bytes %.20q, want %d bytes %.20q", i, ref.Len(), ref.ReadOnlyData(),
							len(msgs[i]), msgs[i])
					}
				}
				for i, ref := range refs {
					if pool.puts != 0 {
						t.Fatalf("buffer back in the pool with %d of %d message references still held", len(refs)-i, len(refs))
					}
					ref.Free()
				}
				if pool.puts != 1 {
					t.Fatalf("buffer put back %d times once every reference was freed, want once", pool.puts)
				}
			})
		}
	}
	pool := &recordingPool{}
	held := NewHeld().(*Held)
	if err := NewCodec().WithPool(pool).Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte("sm")), mem.SliceBuffer([]byte("all"))}, held); err != nil ||
		string(held.Buf.ReadOnlyData()) != "small" || pool.gets != 0 {
		t.Fatalf("a small Held: %q (%v), %d buffers from the pool; want it unpooled", held.Buf.ReadOnlyData(), err, pool.gets)
	}
}

// TestHeldBatchLendsMessages: a full batch (16 KiB, in a buffer of that class, so that its last messages lie in
// the last KiB of the buffer's capacity, below gRPC's own counting threshold) lends out every message; its
// buffer goes back to its pool once, when the last message is freed, whatever the order, and whichever
// goroutines free them. written is called once, before the buffer goes back.
func TestHeldBatchLendsMessages(t *testing.T) {
	t.Parallel()
	var b Batch
	var msgs [][]byte
	for i := 0; ; i++ {
		msg := bytes.Repeat([]byte{byte(i)}, 90+i%20)
		if !b.Fits(16<<10-5, mem.SliceBuffer(msg)) {
			break
		}
		b.Add(mem.SliceBuffer(msg))
		msgs = append(msgs, msg)
	}
	data := b.Take().Parts.Materialize()
	for _, concurrent := range []bool{false, true} {
		pool := &recordingPool{}
		buf := pool.Get(len(data))
		if cap(*buf) != 16<<10 {
			t.Fatalf("a %d-byte batch in a buffer of %d", len(data), cap(*buf))
		}
		copy(*buf, data)
		var refs []mem.Buffer
		var written atomic.Int32
		err := new(Lender).SplitHeldBatch(mem.NewBuffer(buf, pool), func(m mem.Buffer, _ uint64) error { refs = append(refs, m); return nil },
			func() {
				if pool.puts != 0 {
					t.Error("written called after the buffer went back")
				}
				written.Add(1)
			})
		if err != nil || len(refs) != len(msgs) {
			t.Fatalf("%d messages, error %v; want %d", len(refs), err, len(msgs))
		}
		for i, ref := range refs {
			if !bytes.Equal(ref.ReadOnlyData(), msgs[i]) {
				t.Fatalf("message %d is %.20q, want %.20q", i, ref.ReadOnlyData(), msgs[i])
			}
		}
		rand.Shuffle(len(refs), func(i, j int) { refs[i], refs[j] = refs[j], refs[i] })
		if concurrent {
			var wg sync.WaitGroup
			for half := range 2 {
				wg.Go(func() {
					for i := half; i < len(refs); i += 2 {
						refs[i].Free()
					}
				})
			}
			wg.Wait()
		} else {
			for i, ref := range refs {
				if pool.puts != 0 {
					t.Fatalf("buffer back with %d of %d messages still lent out", len(refs)-i, len(refs))
				}
				ref.Free()
			}
		}
		if written.Load() != 1 {
			t.Fatalf("concurrent %v: written called %d times, want once", concurrent, written.Load())
		}
		if pool.puts != 1 {
			t.Fatalf("concurrent %v: buffer put back %d times once every message was freed, want once", concurrent, pool.puts)
		}
	}
}

// TestLentMessagesCount: a lent message counts its references as gRPC takes and frees them (its send takes
// one for the writer, the writer one for its reader), and its batch's buffer goes back only when every
// reference of every message is freed. TrimFront cuts a message's start off and keeps it counted, on a lent
// message and on a gRPC buffer alike. A Lender does not lend a batch's messages again while one is still out:
// the next batch's are other buffers, and the first batch's message still reads as it did.
func TestLentMessagesCount(t *testing.T) {
	t.Parallel()
	var b Batch
	msgs := [][]byte{[]byte("carrier:first"), []byte("second"), bytes.Repeat([]byte{3}, 2000)}
	for _, m := range msgs {
		b.Add(mem.SliceBuffer(m))
	}
	data := b.Take().Parts.Materialize()
	for _, m := range msgs {
		b.Add(mem.SliceBuffer(bytes.ToUpper(m)))
	}
	other := b.Take().Parts.Materialize() // as long, other bytes
	var lender Lender
	split := func(data []byte, pool *recordingPool, written func()) []mem.Buffer {
		buf := pool.Get(len(data))
		copy(*buf, data)
		var refs []mem.Buffer
		if err := lender.SplitHeldBatch(mem.NewBuffer(buf, pool), func(m mem.Buffer, _ uint64) error {
			refs = append(refs, m)
			return nil
		}, written); err != nil || len(refs) != len(msgs) {
			t.Fatalf("%d messages (%v), want %d", len(refs), err, len(msgs))
		}
		return refs
	}
	pool := &recordingPool{}
	written := 0
	refs := split(data, pool, func() { written++ })
	refs[0] = TrimFront(refs[0], len("carrier:"))
	if got := string(refs[0].ReadOnlyData()); got != "first" {
		t.Fatalf("trimmed message %q, want %q", got, "first")
	}
	for _, m := range refs {
		m.Ref()  // the send's reference for the writer
		m.Free() // the send's own
		m.Ref()  // the writer's reader
		m.Free() // the writer's item
	}
	for i, m := range refs {
		if written != 0 || pool.puts != 0 {
			t.Fatalf("with %d messages still read by the writer: written %d times, buffer back %d times; want neither",
				len(refs)-i, written, pool.puts)
		}
		if i == len(refs)-1 {
			next := split(other, &recordingPool{}, nil) // a batch split while one message of the first is out
			if got := string(m.ReadOnlyData()); got != string(msgs[i]) {
				t.Fatalf("a message still out reads %.20q after the next batch, want %.20q", got, msgs[i])
			}
			for _, n := range next {
				n.Free()
			}
		}
		m.Free() // the reader's, once written
	}
	if written != 1 || pool.puts != 1 {
		t.Fatalf("every reference freed: written %d times, buffer back %d times; want once each", written, pool.puts)
	}

	grpcPool := &recordingPool{}
	buf := grpcPool.Get(2000)
	copy(*buf, bytes.Repeat([]byte("ab"), 1000))
	trimmed := TrimFront(mem.NewBuffer(buf, grpcPool), 1990)
	if got := string(trimmed.ReadOnlyData()); got != "ababababab" || grpcPool.puts != 0 {
		t.Fatalf("a gRPC buffer trimmed: %q, back in its pool %d times; want %q, not back", got, grpcPool.puts, "ababababab")
	}
	trimmed.Free()
	if grpcPool.puts != 1 {
		t.Fatalf("a trimmed gRPC buffer freed: back in its pool %d times, want once", grpcPool.puts)
	}
}

// TestRelayAcks: an acknowledgment is a request etcd's decoder takes for an empty one, with the count in its
// unknown fields; any other request reads as no acknowledgment. Acknowledgments are asked for and promised
// only with stamps.
func TestRelayAcks(t *testing.T) {
	t.Parallel()
	for _, n := range []uint64{1, 2, 300, 1 << 40} {
		req := new(pb.WatchRequest)
		if err := proto.Unmarshal(RelayAck(n).Parts.Materialize(), req); err != nil {
			t.Fatal(err)
		}
		if req.RequestUnion != nil {
			t.Fatalf("ack %d decodes as %v, want no request", n, req)
		}
		if got, ok := ReadRelayAck(req.ProtoReflect().GetUnknown()); !ok || got != n {
			t.Fatalf("ack %d read as %d, %v", n, got, ok)
		}
	}
	create, err := proto.Marshal(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
		CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}})
	if err != nil {
		t.Fatal(err)
	}
	twice := append(RelayAck(3).Parts.Materialize(), RelayAck(5).Parts.Materialize()...)
	for _, tc := range []struct {
		name    string
		unknown []byte
		want    uint64
		ok      bool
	}{
		{"none", nil, 0, false},
		{"other fields", create, 0, false},
		{"the last of two", twice, 5, true},
		{"cut", RelayAck(300).Parts.Materialize()[:2], 0, false},
		{"mistyped", protowire.AppendBytes(protowire.AppendTag(nil, 100, protowire.BytesType), []byte{7}), 0, false},
	} {
		if got, ok := ReadRelayAck(tc.unknown); got != tc.want || ok != tc.ok {
			t.Errorf("%s: ReadRelayAck = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct {
		asked                 []string
		batches, stamps, acks bool
	}{
		{nil, false, false, false},
		{[]string{RelayBatchPlain}, true, false, false},
		{[]string{RelayBatchStamped}, true, true, false},
		{[]string{RelayBatchStamped, RelayBatchAcked}, true, true, true},
		{[]string{RelayBatchAcked}, true, false, false}, // acks only with stamps
	} {
		md := metadata.MD{}
		for _, v := range tc.asked {
			md.Append(RelayBatchHeader, v)
		}
		ctx := metadata.NewIncomingContext(t.Context(), md)
		if b, s, a := RelayBatchRequested(ctx); b != tc.batches || s != tc.stamps || a != tc.acks {
			t.Errorf("asked %v: RelayBatchRequested = %v %v %v, want %v %v %v", tc.asked, b, s, a, tc.batches, tc.stamps, tc.acks)
		}
		if got := RelayAcksPromised(md); got != slices.Contains(tc.asked, RelayBatchAcked) {
			t.Errorf("header %v: RelayAcksPromised = %v", md, got)
		}
	}
}

// TestBufferLists: the lists a sender's messages take are empty, hold exactly what they asked room for, and
// never share an element: filling each, even past its room, leaves every other as it was filled, across the
// arrays they are cut from, and across a Release in the middle. The arrays grow from the smallest to the
// largest while the sender is busy; after Release it holds none, and the next is the smallest again.
func TestBufferLists(t *testing.T) {
	t.Parallel()
	var lists BufferLists
	var taken []mem.BufferSlice
	var arrays []int // the size of each array lists were cut from, in order
	for i := range 4 * bufferListsMost {
		if i == 3*bufferListsMost {
			lists.Release()
			if lists.free != nil {
				t.Fatal("a released BufferLists still holds an array")
			}
			arrays = append(arrays, 0) // marks the Release
		}
		n := 1 + i%4
		fresh := cap(lists.free) < n
		list := lists.Take(n)
		if fresh {
			arrays = append(arrays, n+cap(lists.free))
		}
		taken = append(taken, fill(list, i, n))
	}
	checkArraySizes(t, arrays)
	for _, list := range taken {
		_ = append(list, mem.SliceBuffer("past its room")) // must not reach the next list
	}
	for i, list := range taken {
		for j, b := range list {
			if got, want := string(b.ReadOnlyData()), fmt.Sprintf("%d.%d", i, j); got != want {
				t.Fatalf("list %d element %d is %q, want %q", i, j, got, want)
			}
		}
	}
}

// fill fills list (empty, with room for n) with buffers naming list i and their place in it.
func fill(list mem.BufferSlice, i, n int) mem.BufferSlice {
	for j := range n {
		list = append(list, mem.SliceBuffer(fmt.Sprintf("%d.%d", i, j)))
	}
	if len(list) != n || cap(list) != n {
		panic(fmt.Sprintf("list %d: len %d cap %d after filling, want %d", i, len(list), cap(list), n))
	}
	return list
}

// TestBufferListsCopy: each copy reads as its source did when copied, whatever the source or later copies do,
// across the arrays copies are cut from (doubling from the smallest to the largest), a Release, and copies too
// long for the arrays.
func TestBufferListsCopy(t *testing.T) {
	t.Parallel()
	var lists BufferLists
	var copies []mem.Buffer
	var want []string
	var arrays []int // the size of each array of copies, in order; 0 marks the Release
	source := make([]byte, SmallCopyMax+4)
	for i := range 3 * bufferListsMost {
		if i == 2*bufferListsMost {
			lists.Release()
			if lists.copies != nil {
				t.Fatal("a released BufferLists still holds an array of copies")
			}
			arrays = append(arrays, 0)
		}
		n := i % (SmallCopyMax + 5) // 0 to SmallCopyMax+4 bytes
		for j := range n {
			source[j] = byte(i + j)
		}
		fresh := n <= SmallCopyMax && len(lists.copies) == 0
		c := lists.Copy(source[:n])
		if fresh {
			arrays = append(arrays, 1+len(lists.copies))
		}
		copies, want = append(copies, c), append(want, string(source[:n]))
		clear(source) // the source changes: the copy must not
	}
	for i, c := range copies {
		if got := string(c.ReadOnlyData()); got != want[i] || c.Len() != len(want[i]) {
			t.Fatalf("copy %d reads %q (Len %d), want %q", i, got, c.Len(), want[i])
		}
	}
	checkArraySizes(t, arrays)
}

// checkArraySizes checks the sizes of the arrays a BufferLists cut, in order, with a 0 where it was released:
// doubling from bufferListsFirst up to bufferListsMost, then bufferListsMost, and bufferListsFirst again after
// the Release.
func checkArraySizes(t *testing.T, arrays []int) {
	t.Helper()
	released := slices.Index(arrays, 0)
	ok := released > 0 && released+1 < len(arrays) && arrays[0] == bufferListsFirst &&
		arrays[released+1] == bufferListsFirst && slices.Max(arrays) == bufferListsMost
	for i := 1; ok && i < released; i++ {
		ok = arrays[i] == min(2*arrays[i-1], bufferListsMost)
	}
	if !ok {
		t.Fatalf("array sizes %v (0: the Release), want them doubling from %d to %d, and %d again after the Release",
			arrays, bufferListsFirst, bufferListsMost, bufferListsFirst)
	}
}
