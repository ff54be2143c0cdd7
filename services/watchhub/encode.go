package watchhub

import (
	"encoding/binary"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// splitFragments cuts resp as etcd's sendFragments does: a response of at least limit bytes with two or more
// events becomes consecutive responses of at most limit bytes (or one event), all but the last with
// Fragment set. The events are shared with resp.
func splitFragments(resp *pb.WatchResponse, limit int) []*pb.WatchResponse {
	if proto.Size(resp) < limit || len(resp.Events) < 2 {
		return []*pb.WatchResponse{resp}
	}
	var parts []*pb.WatchResponse
	for idx := 0; idx < len(resp.Events); {
		cur := &pb.WatchResponse{Header: resp.Header, WatchId: resp.WatchId, Created: resp.Created,
			Canceled: resp.Canceled, CompactRevision: resp.CompactRevision, CancelReason: resp.CancelReason,
			Fragment: true}
		for _, ev := range resp.Events[idx:] {
			cur.Events = append(cur.Events, ev)
			if len(cur.Events) > 1 && proto.Size(cur) >= limit {
				cur.Events = cur.Events[:len(cur.Events)-1]
				break
			}
			idx++
		}
		if idx == len(resp.Events) {
			cur.Fragment = false
		}
		parts = append(parts, cur)
	}
	return parts
}

// sharedResponse is one group's response at one revision, encoded once for every watcher of the group: each
// part is a marshalled WatchResponse without a watch ID (more than one part when fragmented). A watcher's
// copy is its watch ID field followed by the part's bytes: protobuf fields may come in any order, and a field
// absent from the part is its default.
type sharedResponse struct {
	parts [][]byte
	// boxed are the parts as gRPC buffers, made once for every watcher.
	boxed  []mem.Buffer
	bytes  int
	events int
	// received is when the hub got the revision, for the delivery latency metric (zero for catch-up).
	received time.Time
	// arrived is when the oldest revision in it reached the hub, for the lag stamps: received for a live
	// response, the arrival its cohort was checked at for a catch-up one.
	arrived time.Time
	// traced is the event's trace, when sampled; queued is when the response was queued, for its sends.
	traced *eventTrace
	queued time.Time
}

// encodeShared encodes events at header for a group; fragmentLimit > 0 cuts it as etcd cuts fragments.
func encodeShared(header *pb.ResponseHeader, events []*mvccpb.Event, fragmentLimit int) (*sharedResponse, error) {
	resp := &pb.WatchResponse{Header: header, Events: events}
	parts := []*pb.WatchResponse{resp}
	if fragmentLimit > 0 {
		parts = splitFragments(resp, fragmentLimit)
	}
	shared := &sharedResponse{parts: make([][]byte, len(parts)), boxed: make([]mem.Buffer, len(parts)),
		events: len(events)}
	for i, p := range parts {
		b, err := proto.Marshal(p)
		if err != nil {
			return nil, err
		}
		shared.parts[i], shared.boxed[i] = b, mem.SliceBuffer(b)
		shared.bytes += len(b)
	}
	return shared, nil
}

// encodedResponse is a WatchResponse ready for the wire: the watcher's encoded watch ID field (nil for ID
// 0, which protobuf omits), then a shared encoded part, then the single parts of later responses merged into
// it (see mergeRuns); a sampled event's trace carrier (nil but on a frontend's stream that asked for it) comes
// first, and the frontend cuts it off.
type encodedResponse struct {
	trace   mem.Buffer
	watchID mem.Buffer
	part    mem.Buffer
	more    []*sharedResponse
	stamp   uint64 // its lag stamp, on a stream that sends them (stream.stamps)
	// lists gives the codec the list of buffers it returns for the message; nil: a list of its own.
	lists *wiremsg.BufferLists
}

// buffers is how many buffers r's message has.
func (r *encodedResponse) buffers() int {
	n := 1 + len(r.more)
	if r.trace != nil {
		n++
	}
	if r.watchID != nil {
		n++
	}
	return n
}

// watchIDField is a watcher's encoded watch_id field, made once per watcher and kept inside it: each response
// the watcher is sent carries it (encodedResponse.watchID). Kept in the watcher, next to what its sender reads
// anyway, it costs the sender no memory of its own to reach; a separate small allocation per watcher was a
// cache miss per response at 100,000 watchers. gRPC's writer, the connection's one goroutine, reads it twice
// per response (to size and to write it), long after the sender did and on another core: there it was a cache
// miss per response too, so a direct stream hands gRPC a copy cut from its BufferLists, beside the copies of
// the responses before it.
type watchIDField struct {
	bytes [1 + binary.MaxVarintLen64]byte // tag and varint
	field mem.SliceBuffer                 // the encoded part of bytes; nil for ID 0, which protobuf omits
}

// set encodes id.
func (f *watchIDField) set(id int64) {
	f.field = nil
	if id != 0 {
		f.field = protowire.AppendVarint(protowire.AppendTag(f.bytes[:0], 2, protowire.VarintType), uint64(id))
	}
}

// buffer is the field as a buffer for gRPC (nil for ID 0): a copy from lists, or one pointing into f when
// lists is nil or the field is longer than lists copy beside each other (an ID of 2^49 or more).
func (f *watchIDField) buffer(lists *wiremsg.BufferLists) mem.Buffer {
	switch {
	case f.field == nil:
		return nil
	case lists == nil || len(f.field) > wiremsg.SmallCopyMax:
		return &f.field
	}
	return lists.Copy(f.field)
}

// codec is the gRPC codec of the hub's server: it writes encodedResponses without marshalling anything and
// hands every other message to the standard protobuf codec.
type codec struct {
	proto encoding.CodecV2
}

func newCodec() codec { return codec{proto: encoding.GetCodecV2("proto")} }

// Marshal returns the wire form of v; an encodedResponse costs only the slice that lists its buffers, a relay
// batch (wiremsg.Encoded) nothing.
func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *encodedResponse:
		if m.lists == nil {
			return m.appendBuffers(make(mem.BufferSlice, 0, m.buffers())), nil
		}
		return m.appendBuffers(m.lists.Take(m.buffers())), nil
	case *wiremsg.Encoded:
		out := m.Parts
		m.Parts = nil // gRPC owns (and frees) the references now
		return out, nil
	}
	return c.proto.Marshal(v)
}

// appendBuffers appends r's buffers to out in wire order.
func (r *encodedResponse) appendBuffers(out mem.BufferSlice) mem.BufferSlice {
	if r.trace != nil {
		out = append(out, r.trace)
	}
	if r.watchID != nil {
		out = append(out, r.watchID)
	}
	out = append(out, r.part)
	for _, m := range r.more {
		out = append(out, m.boxed[0])
	}
	return out
}

// Unmarshal decodes requests with the protobuf codec.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// Name is the protobuf codec's name: on the wire nothing differs.
func (c codec) Name() string { return c.proto.Name() }
