package wiremsg

import (
	"context"
	"fmt"

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

// RelayBatchHeader is the metadata key of the ask (request) and of the promise (response header).
const RelayBatchHeader = "cairn-relay-batch"

// batchEntryField is the field number of a batch's entries.
const batchEntryField protowire.Number = 1

// RelayBatchRequested reports whether a relayed stream's peer asked for batches (RelayBatchHeader in ctx's
// incoming metadata).
func RelayBatchRequested(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, RelayBatchHeader)) > 0
}

// RelayBatchPromised reports whether a backend's response header says its messages are batches.
func RelayBatchPromised(header metadata.MD) bool { return len(header.Get(RelayBatchHeader)) > 0 }

// Batch collects the parts of the messages to send as one batch (a backend's side). The zero Batch is empty
// and ready.
type Batch struct {
	parts    mem.BufferSlice
	bytes    int
	messages int
}

// Add appends one message, given as the concatenation of parts; the batch keeps the parts (not copied) until
// Take.
func (b *Batch) Add(parts ...mem.Buffer) {
	n := 0
	for _, p := range parts {
		n += p.Len()
	}
	prefix := protowire.AppendVarint(protowire.AppendTag(make([]byte, 0, 12), batchEntryField, protowire.BytesType),
		uint64(n))
	b.parts = append(append(b.parts, mem.SliceBuffer(prefix)), parts...)
	b.bytes += len(prefix) + n
	b.messages++
}

// Bytes is the encoded size of the batch so far.
func (b *Batch) Bytes() int { return b.bytes }

// Messages is the number of messages added since the last Take.
func (b *Batch) Messages() int { return b.messages }

// Take returns the batch as a message to send (nil when empty) and leaves b empty.
func (b *Batch) Take() *Encoded {
	if b.messages == 0 {
		return nil
	}
	msg := &Encoded{Parts: b.parts}
	*b = Batch{}
	return msg
}

// SplitBatch calls each with every message of a received batch, in order, each a subslice of data; it stops
// at the first error each returns. A malformed batch is an error, and nothing after the flaw is passed on.
func SplitBatch(data []byte, each func(msg []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 || num != batchEntryField || typ != protowire.BytesType {
			return fmt.Errorf("relay batch: bad entry tag at %d bytes from the end", len(data))
		}
		msg, m := protowire.ConsumeBytes(data[n:])
		if m < 0 {
			return fmt.Errorf("relay batch: entry of bad length at %d bytes from the end", len(data))
		}
		if err := each(msg); err != nil {
			return err
		}
		data = data[n+m:]
	}
	return nil
}
