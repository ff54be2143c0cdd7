// Package wiremsg lets Cairn's gRPC servers and clients pass messages that are already in their protobuf wire
// encoding: a relayed Watch frame, a Range answer that storage wrote straight from its stored KeyValues, or
// the frontend's header spliced before storage's answer. Codec is protobuf for every other message, so
// nothing differs on the wire.
package wiremsg

import (
	"bytes"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// Encoded is a message to send as the concatenation of its parts. Sending it hands the parts' buffer
// references to gRPC, which frees them once written.
type Encoded struct{ Parts mem.BufferSlice }

// Raw is a message received (or sent) as its wire bytes, undecoded.
type Raw struct{ Data []byte }

// NewRaw returns an empty Raw, as proxies that receive into fresh messages want.
func NewRaw() any { return new(Raw) }

// Held is a message received as its wire bytes, undecoded, in a buffer of which the receiver holds one
// reference: it frees it (Buf.Free), or hands it, or pieces of it (TrimFront, Lender.SplitHeldBatch), on to gRPC
// in an Encoded, which frees them once written. A message that gRPC hands over in one piece is held in gRPC's
// own receive buffer, uncopied; one in several pieces (it spanned HTTP/2 frames) is copied into one buffer,
// from the pool of a codec made WithPool, which it goes back to when its last reference is freed. Either way a
// relay that receives and forwards a stream of frames reuses its buffers where a Raw is a new allocation for
// every frame.
type Held struct{ Buf mem.Buffer }

// NewHeld returns an empty Held, as proxies that receive into fresh messages want.
func NewHeld() any { return new(Held) }

// Codec is the gRPC codec that sends Encoded and Raw messages as they are and reads into Raw and Held
// undecoded; every other message is protobuf.
type Codec struct {
	proto encoding.CodecV2
	pool  mem.BufferPool // Held's buffers; nil: a fresh slice each
}

// NewCodec returns the codec; use it with grpc.ForceServerCodecV2 or grpc.ForceCodecV2.
func NewCodec() Codec { return Codec{proto: encoding.GetCodecV2("proto")} }

// WithPool returns the codec copying Held messages that arrive in several pieces into buffers of pool (a *Pool:
// it does not clear what it hands out, and the codec writes every byte).
func (c Codec) WithPool(pool mem.BufferPool) Codec {
	c.pool = pool
	return c
}

func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *Raw:
		return mem.BufferSlice{mem.SliceBuffer(m.Data)}, nil
	case *Encoded:
		out := m.Parts
		m.Parts = nil // gRPC owns (and frees) the references now
		return out, nil
	}
	return c.proto.Marshal(v)
}

func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *Raw:
		m.Data = data.Materialize()
		return nil
	case *Held:
		if len(data) == 1 {
			// In one piece (a message within one HTTP/2 frame, as a hub's relay batches are): gRPC's own buffer,
			// kept by a reference of the message's rather than copied.
			data[0].Ref()
			m.Buf = data[0]
			return nil
		}
		n := data.Len()
		if c.pool == nil || mem.IsBelowBufferPoolingThreshold(n) {
			m.Buf = mem.SliceBuffer(data.Materialize())
			return nil
		}
		buf := c.pool.Get(n)
		data.CopyTo(*buf)
		m.Buf = mem.NewBuffer(buf, c.pool)
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// Name is protobuf's: peers see a protobuf message.
func (c Codec) Name() string { return c.proto.Name() }

// BufferLists hands out the buffer lists (mem.BufferSlice) of one sender's messages, cut from arrays, where a
// list of its own per message was an allocation per message, and one that gRPC's writer then read from wherever
// the allocator had put it. gRPC never writes to a list it is given (it reads it, frees the buffers and drops
// it), and each list's capacity ends where it does, so neighbors stay apart; an array is the collector's once
// every list cut from it is dropped. The arrays double from bufferListsFirst to bufferListsMost buffers while
// the sender is busy; it calls Release when it pauses, so that an idle sender holds no array. The zero
// BufferLists is ready; it is one goroutine's.
//
// It also hands out copies of a message's few bytes of its own (a hub's watch ID field) as buffers (Copy), cut
// from arrays the same way, so that gRPC's writer reads them beside each other, where the sender just wrote
// them, rather than from where their source lives.
type BufferLists struct {
	free   mem.BufferSlice
	next   int // the size of the next array
	copies []smallBuffer
	nextC  int // the size of the next array of copies
}

// SmallCopyMax is the most bytes Copy keeps in its arrays (a watch ID field of an ID below 2^49; so a copy
// is 32 bytes, two to a cache line); a longer copy is a buffer of its own.
const SmallCopyMax = 8

// smallBuffer is a copy of up to SmallCopyMax bytes; its buf is over its bytes, and &buf is the gRPC buffer.
type smallBuffer struct {
	buf   mem.SliceBuffer
	bytes [SmallCopyMax]byte
}

// The sizes of BufferLists' arrays: the first of a busy spell (small, since a sender that pauses drops its
// arrays: a stream of one watcher takes 256 bytes of list and 512 of copies each time it wakes), and the
// largest (512 lists of a hub's watch ID and part, or 1,024 relayed responses).
const (
	bufferListsFirst = 16
	bufferListsMost  = 1024
)

// Take returns an empty list with room for n buffers.
func (l *BufferLists) Take(n int) mem.BufferSlice {
	if cap(l.free) < n {
		l.free = make(mem.BufferSlice, 0, max(n, nextArraySize(&l.next)))
	}
	out := l.free[:0:n]
	l.free = l.free[n:n]
	return out
}

// Copy returns a copy of b as a buffer, which stays as it is whatever later happens to b. gRPC may hold it as
// long as it likes: like a list, it is never handed out again.
func (l *BufferLists) Copy(b []byte) mem.Buffer {
	if len(b) > SmallCopyMax {
		c := mem.SliceBuffer(bytes.Clone(b))
		return &c
	}
	if len(l.copies) == 0 {
		l.copies = make([]smallBuffer, nextArraySize(&l.nextC))
	}
	c := &l.copies[0]
	l.copies = l.copies[1:]
	c.buf = c.bytes[:copy(c.bytes[:], b)]
	return &c.buf
}

// nextArraySize is the size of the next array of a busy spell, given the one after the last (*next, 0 at the
// start of a spell), which it doubles up to bufferListsMost.
func nextArraySize(next *int) int {
	size := max(*next, bufferListsFirst)
	*next = min(2*size, bufferListsMost)
	return size
}

// Release drops what is left of the current arrays, and the next arrays are the smallest again.
func (l *BufferLists) Release() { *l = BufferLists{} }
