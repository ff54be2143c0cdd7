package wiremsg

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

// Relay batches. Between a backend (a watchhub) and a frontend that relays its stream, one gRPC message may
// carry several of the messages the frontend sends to its client: every gRPC message costs both ends a message
// of their own (the backend's send and its transport's writer, the frontend's transport reader, a hand-off to
// the relay goroutine and a receive), whatever its size, so a stream that carries a hundred small responses per
// revision costs a hundred of each. A batch costs one, and the frontend still sends its client each message as
// it would have come unbatched.
//
// A batch is itself a protobuf message: a repeated bytes field (number 1), one entry per relayed message, in
// order. A frontend asks for batches with RelayBatchHeader in the stream's request metadata; a backend that
// will send them says so with RelayBatchHeader in its response header metadata, so each side keeps working
// with a peer of another version (an old backend sends single messages, an old frontend never asks).
//
// Stamped batches (version RelayBatchStamped) also carry stamps: a varint field (number 2) before a message
// stamps it and the messages after it in the batch, until the next stamp; 0 is no stamp, and a batch starts
// with none. A watchhub stamps each event response with when the oldest revision in it reached the hub (on the
// hub's monotonic clock), and says its lag bound (--max-watch-lag) in RelayLagBoundHeader, so that a frontend
// can hold the bound on what it relays too: what waits in the relay's buffers grows older after the hub's
// check. Stamps cost a batch a few bytes each time the stamp changes (once per revision on a busy stream).
//
// Acknowledged batches (RelayBatchAcked, asked and promised beside RelayBatchStamped) are stamped batches that
// the frontend acknowledges once it has written every message of them to its client: it sends up the stream a
// request carrying only a varint field of its own (number relayAckField, not one of etcd's), the number of
// batches written so far (RelayAck). A backend keeps only a few batches unacknowledged, so what waits for the
// client stays in the backend, where a watchhub merges each watcher's waiting revisions into one response and
// checks their lag, rather than in the buffers between them (each per stream: the backend's write quota, the
// relay's window and the frontend's write quota, 64 KiB each, which hold seconds of one stream's one-event
// responses when a relay falls behind).

// RelayBatchHeader is the metadata key of the ask (request) and of the promise (response header); its value
// is the version.
const RelayBatchHeader = "cairn-relay-batch"

// Relay batch versions, the value of RelayBatchHeader. A frontend asks for the newest one it reads; a backend
// answers with the one it sends. A backend older than stamps looks only for the header, and answers
// RelayBatchPlain.
const (
	RelayBatchPlain   = "1"
	RelayBatchStamped = "2"
	RelayBatchAcked   = "3"
)

// RelayLagBoundHeader is a stamping backend's lag bound, in its response header (a Go duration).
const RelayLagBoundHeader = "cairn-relay-lag-bound"

// LagCancelReason is the cancel_reason of a watch canceled for falling more than bound behind the head, by
// its hub or by the frontend that relays it; a client that reads it re-watches from the revision after the
// last one it received.
func LagCancelReason(bound time.Duration) string {
	return fmt.Sprintf("watcher fell more than %v behind the head (--max-watch-lag); re-watch from the next revision", bound)
}

// The field numbers of a batch's messages and stamps.
const (
	batchEntryField protowire.Number = 1
	batchStampField protowire.Number = 2
)

// RelayBatchRequested reports whether a relayed stream's peer asked for batches (RelayBatchHeader in ctx's
// incoming metadata), whether it reads stamped ones, and whether it acknowledges them (only with stamps).
func RelayBatchRequested(ctx context.Context) (batches, stamps, acks bool) {
	asked := metadata.ValueFromIncomingContext(ctx, RelayBatchHeader)
	stamps = slices.Contains(asked, RelayBatchStamped)
	return len(asked) > 0, stamps, stamps && slices.Contains(asked, RelayBatchAcked)
}

// RelayAcksPromised reports whether a backend's response header says it waits for acknowledgments.
func RelayAcksPromised(header metadata.MD) bool {
	return slices.Contains(header.Get(RelayBatchHeader), RelayBatchAcked)
}

// relayAckField is the field number of an acknowledgment in a request sent up a relayed stream.
const relayAckField protowire.Number = 100

// RelayAckEvery is how many batches a frontend may write before it acknowledges them, and so the fewest a
// backend must let go unacknowledged. Acknowledging every other batch halves what acknowledgments cost both
// ends (a gRPC message each way's worth) and still lets a backend send on as soon as its client has taken all
// it was sent.
const RelayAckEvery = 2

// RelayAck is the request that acknowledges the first n batches of a relayed stream, encoded.
func RelayAck(n uint64) *Encoded {
	b := protowire.AppendVarint(protowire.AppendTag(make([]byte, 0, 16), relayAckField, protowire.VarintType), n)
	return &Encoded{Parts: mem.BufferSlice{mem.SliceBuffer(b)}}
}

// ReadRelayAck reads an acknowledgment from the fields a request's decoder did not know (its unknown
// fields), the last if there are several; ok is false if there is none.
func ReadRelayAck(unknown []byte) (n uint64, ok bool) {
	for len(unknown) > 0 {
		num, typ, m := protowire.ConsumeTag(unknown)
		if m < 0 {
			return n, ok
		}
		unknown = unknown[m:]
		if num == relayAckField && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(unknown)
			if m < 0 {
				return n, ok
			}
			n, ok, unknown = v, true, unknown[m:]
			continue
		}
		m = protowire.ConsumeFieldValue(num, typ, unknown)
		if m < 0 {
			return n, ok
		}
		unknown = unknown[m:]
	}
	return n, ok
}

// RelayBatchPromised reports whether a backend's response header says its messages are batches.
func RelayBatchPromised(header metadata.MD) bool { return len(header.Get(RelayBatchHeader)) > 0 }

// RelayStampsPromised reports whether a backend's response header says its batches are stamped, and the lag
// bound it gave; a bound that is missing or not a positive duration is no promise.
func RelayStampsPromised(header metadata.MD) (bound time.Duration, ok bool) {
	if !slices.Contains(header.Get(RelayBatchHeader), RelayBatchStamped) {
		return 0, false
	}
	bounds := header.Get(RelayLagBoundHeader)
	if len(bounds) != 1 {
		return 0, false
	}
	bound, err := time.ParseDuration(bounds[0])
	return bound, err == nil && bound > 0
}

// batchCopyLimit: a message smaller than this is copied into the batch's own buffer, so that a batch of many
// small messages is a few buffers (each buffer costs gRPC's writer a pass, and each part added an allocation);
// a larger one is kept as its parts, uncopied.
const batchCopyLimit = 4 << 10

// batchBufferBytes is the capacity of a batch's buffer for small messages: a batch kept within it (see Fits) is
// one buffer of a Pool's 16 KiB class at the sender and, received into a Pool at the other end, one there too. A
// batch a message past a class's size takes a buffer of twice that size at each end.
const batchBufferBytes = 16 << 10

// Batch collects the messages to send as one batch (a backend's side). The zero Batch is empty and ready.
type Batch struct {
	// Pool, when set, gives the buffers small messages are copied into, and each goes back to it once gRPC has
	// written the batch (and freed its references); give it a *Pool, which does not clear what it hands out.
	// Without one, each buffer is a new slice, which the runtime clears and the collector reclaims: at 100,000
	// relayed watchers, clearing them was a sixth of a hub's CPU.
	Pool     mem.BufferPool
	parts    mem.BufferSlice // the batch up to buf
	buf      []byte          // small messages (with their entry prefixes) after parts
	held     *[]byte         // buf's slice as Pool handed it out; nil without a Pool
	bytes    int
	messages int
	stamp    uint64 // of the messages added from now on (Stamp)
	written  uint64 // the stamp in force at the batch's end
}

// Stamp sets the stamp of the messages added from now on (0: none). The batch carries a stamp once, before the
// first message it applies to; a Take keeps it for the next batch, which carries it again. Stamp only a batch
// for a peer that reads stamps (RelayBatchStamped).
func (b *Batch) Stamp(v uint64) { b.stamp = v }

// stampBytes is what the next message's stamp adds to the batch: nothing when the one in force holds.
func (b *Batch) stampBytes() int {
	if b.stamp == b.written {
		return 0
	}
	return protowire.SizeTag(batchStampField) + protowire.SizeVarint(b.stamp)
}

// Add appends one message, given as the concatenation of parts. A small message is copied; a large one's
// parts are kept (each with a reference of the batch's own) until Take.
func (b *Batch) Add(parts ...mem.Buffer) {
	n := 0
	for _, p := range parts {
		n += p.Len()
	}
	if b.buf == nil {
		b.newBuffer()
	}
	before := len(b.buf)
	if b.stamp != b.written {
		b.buf = protowire.AppendVarint(protowire.AppendTag(b.buf, batchStampField, protowire.VarintType), b.stamp)
		b.written = b.stamp
	}
	b.buf = protowire.AppendVarint(protowire.AppendTag(b.buf, batchEntryField, protowire.BytesType), uint64(n))
	b.bytes += len(b.buf) - before + n
	b.messages++
	if n < batchCopyLimit {
		for _, p := range parts {
			b.buf = append(b.buf, p.ReadOnlyData()...)
		}
		return
	}
	b.parts = append(b.parts, b.sealBuffer())
	for _, p := range parts {
		p.Ref()
		b.parts = append(b.parts, p)
	}
}

// Fits reports whether the message given as parts, with its stamp, can be added without taking the batch past
// limit bytes (Bytes); a message always fits an empty batch.
func (b *Batch) Fits(limit int, parts ...mem.Buffer) bool {
	if b.messages == 0 {
		return true
	}
	n := 0
	for _, p := range parts {
		n += p.Len()
	}
	return b.bytes+b.stampBytes()+protowire.SizeTag(batchEntryField)+protowire.SizeBytes(n) <= limit
}

// newBuffer starts a buffer for small messages.
func (b *Batch) newBuffer() {
	if b.Pool == nil {
		b.buf = make([]byte, 0, batchBufferBytes)
		return
	}
	b.held = b.Pool.Get(batchBufferBytes)
	b.buf = (*b.held)[:0]
}

// sealBuffer ends the buffer for small messages, as a reference that returns it to the Pool when freed.
func (b *Batch) sealBuffer() mem.Buffer {
	buf, held := b.buf, b.held
	b.buf, b.held = nil, nil
	if held == nil {
		return mem.SliceBuffer(buf)
	}
	*held = buf
	return mem.NewBuffer(held, b.Pool)
}

// Bytes is the encoded size of the batch so far.
func (b *Batch) Bytes() int { return b.bytes }

// Messages is the number of messages added since the last Take.
func (b *Batch) Messages() int { return b.messages }

// Take returns the batch as a message to send (nil when empty) and leaves b empty. Sending it hands its
// references to gRPC (Encoded); a Take that is never sent leaves the Pool's buffers to the collector.
func (b *Batch) Take() *Encoded {
	if b.messages == 0 {
		return nil
	}
	parts := b.parts
	if b.buf != nil {
		parts = append(parts, b.sealBuffer())
	}
	*b = Batch{Pool: b.Pool, stamp: b.stamp}
	return &Encoded{Parts: parts}
}

// SplitBatch calls each with every message of a received batch, in order, each a subslice of data, with its
// stamp (0 for none); it stops at the first error each returns. A malformed batch is an error, and nothing
// after the flaw is passed on.
func SplitBatch(data []byte, each func(msg []byte, stamp uint64) error) error {
	return splitBatch(data, func(start, end int, stamp uint64) error { return each(data[start:end], stamp) })
}

// Lender splits batches held in reference-counted buffers into messages it lends out (SplitHeldBatch), and
// keeps the batches whose messages have all come back for the next. The zero Lender is ready, and one serves
// any number of goroutines.
type Lender struct{ batches sync.Pool }

// SplitHeldBatch is SplitBatch for a batch in a reference-counted buffer (a Held message's): each gets a
// reference to every message (no copy), which it must free or hand on to gRPC, even when it returns an error.
// It consumes buf's reference, which it frees once every message's is freed.
//
// Each message is a buffer of its own over its part of buf, with a reference count of its own (lentMessage),
// and buf is freed when the last of them is. The messages of a batch are made in one piece, which goes back to
// the Lender then. gRPC's own buffers (mem.NewBuffer) each cost an object from a pool that gRPC's writer
// fills, on its core, and the relay goroutine empties, on another; views of buf (mem.Buffer.Slice) would count
// every message on buf's one count, which both goroutines write. Either way the count's cache line crossed
// between the two cores twice per message: about 250 ns of gRPC's writer's time per message, against 90
// (BenchmarkRelayFrame in services/frontend).
//
// written, if not nil, is called once every message has been freed (gRPC frees one once it has written it),
// from the goroutine that freed the last: gRPC's writer, or this one. For a buffer that is not counted there is
// no telling: then it is called before SplitHeldBatch returns.
func (l *Lender) SplitHeldBatch(buf mem.Buffer, each func(msg mem.Buffer, stamp uint64) error, written func()) error {
	data := buf.ReadOnlyData()
	if _, plain := buf.(mem.SliceBuffer); plain || len(data) == 0 {
		defer buf.Free()
		if written != nil {
			defer written()
		}
		return splitBatch(data, func(start, end int, stamp uint64) error { return each(buf.Slice(start, end), stamp) })
	}
	n := 0
	flaw := splitBatch(data, func(int, int, uint64) error { n++; return nil })
	lent, _ := l.batches.Get().(*lentBatch)
	if lent == nil {
		lent = &lentBatch{home: l}
	}
	lent.buf, lent.written = buf, written
	if cap(lent.msgs) < n {
		lent.msgs = make([]lentMessage, n)
	}
	lent.msgs = lent.msgs[:n]
	lent.pending.Store(lentBias)
	i := 0
	err := splitBatch(data, func(start, end int, stamp uint64) error {
		m := &lent.msgs[i]
		i++
		m.SliceBuffer, m.batch = data[start:end:end], lent
		m.refs.Store(1)
		return each(m, stamp)
	})
	lent.release(lentBias - int64(i))
	if err == nil {
		err = flaw
	}
	return err
}

// lentBias keeps a lentBatch's buffer while messages are still being lent out.
const lentBias = 1 << 40

// lentBatch is a batch whose messages are lent out; it frees the batch's buffer when the last comes back, and
// goes back to its Lender.
type lentBatch struct {
	home    *Lender
	buf     mem.Buffer
	written func()       // called when the last message comes back; may be nil
	pending atomic.Int64 // messages lent out and not back, plus lentBias until the last is lent out
	msgs    []lentMessage
}

func (l *lentBatch) release(n int64) {
	if l.pending.Add(-n) != 0 {
		return
	}
	if l.written != nil {
		l.written()
	}
	l.buf.Free()
	clear(l.msgs)
	l.buf, l.written, l.msgs = nil, nil, l.msgs[:0]
	l.home.batches.Put(l)
}

// lentMessage is one message of a lentBatch: a mem.Buffer over its bytes (mem.SliceBuffer gives it the methods
// gRPC reads it with) that counts its own references and gives itself back to its batch when the last is
// freed. What mem.SplitUnsafe and Slice make of it counts nothing, so they must not outlive it; TrimFront cuts
// its start off and keeps it counted.
type lentMessage struct {
	mem.SliceBuffer
	refs  atomic.Int32
	batch *lentBatch
}

// Ref adds a reference.
func (m *lentMessage) Ref() { m.refs.Add(1) }

// Free drops a reference; the last gives the message back to its batch.
func (m *lentMessage) Free() {
	if m.refs.Add(-1) == 0 {
		m.batch.release(1)
	}
}

// TrimFront returns msg without its first n bytes (at most msg.Len()), as the same reference: a message
// SplitHeldBatch lent out stays counted, so its batch still knows when it is written.
func TrimFront(msg mem.Buffer, n int) mem.Buffer {
	if m, ok := msg.(*lentMessage); ok {
		m.SliceBuffer = m.SliceBuffer[n:]
		return m
	}
	head, rest := mem.SplitUnsafe(msg, n)
	head.Free()
	return rest
}

// splitBatch calls each with the bounds in data of every message of a batch, in order, with its stamp; it
// stops at the first error each returns, or at a flaw.
func splitBatch(data []byte, each func(start, end int, stamp uint64) error) error {
	var stamp uint64
	for pos := 0; pos < len(data); {
		head, size, err := batchEntry(data[pos:], &stamp)
		if err != nil {
			return err
		}
		start := pos + head
		pos = start + size
		if err := each(start, pos, stamp); err != nil {
			return err
		}
	}
	return nil
}

// batchEntry reads the message at the start of a batch, after the stamps before it (the last one goes into
// *stamp): its prefix (stamps, tag and length) is data[:head], the message data[head:head+size].
func batchEntry(data []byte, stamp *uint64) (head, size int, err error) {
	for {
		num, typ, n := protowire.ConsumeTag(data[head:])
		if n < 0 || (num != batchEntryField || typ != protowire.BytesType) && (num != batchStampField || typ != protowire.VarintType) {
			return 0, 0, fmt.Errorf("relay batch: bad entry tag at %d bytes from the end", len(data)-head)
		}
		if num == batchStampField {
			v, m := protowire.ConsumeVarint(data[head+n:])
			if m < 0 {
				return 0, 0, fmt.Errorf("relay batch: bad stamp at %d bytes from the end", len(data)-head)
			}
			*stamp, head = v, head+n+m
			continue
		}
		length, m := protowire.ConsumeVarint(data[head+n:])
		if m < 0 || length > uint64(len(data)-head-n-m) {
			return 0, 0, fmt.Errorf("relay batch: entry of bad length at %d bytes from the end", len(data)-head)
		}
		return head + n + m, int(length), nil
	}
}
