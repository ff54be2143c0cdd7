package transport

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/framed"
)

// entries returns n entries from index first on, each with size bytes of data.
func entries(first uint64, n, size int) []*raftpb.Entry {
	ents := make([]*raftpb.Entry, n)
	for i := range ents {
		ents[i] = &raftpb.Entry{Term: new(uint64(3)), Index: new(first + uint64(i)), Type: raftpb.EntryNormal.Enum(),
			Data: bytes.Repeat([]byte{byte(i)}, size)}
	}
	return ents
}

// ready is what a leader's Ready sends: appends with the same entries to two followers in step, one to a follower
// behind them (a part of the same log), and messages without entries.
func ready(n, size int) []*raftpb.Message {
	log := entries(10, n+2, size)
	app := func(to uint64, ents []*raftpb.Entry) *raftpb.Message {
		return &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: new(to), From: new(uint64(1)), Term: new(uint64(3)),
			LogTerm: new(uint64(3)), Index: new(ents[0].GetIndex() - 1), Commit: new(uint64(9)), Entries: ents}
	}
	return []*raftpb.Message{
		app(2, log[2:]), app(3, log[2:]), app(4, log),
		{Type: raftpb.MsgApp.Enum(), To: new(uint64(2)), From: new(uint64(1)), Commit: new(uint64(12))},
		{Type: raftpb.MsgHeartbeat.Enum(), To: new(uint64(3)), From: new(uint64(1)), Context: []byte("read-1")},
	}
}

// frameOf encodes msgs as one batch frame, as a link's sender writes it.
func frameOf(t testing.TB, from, clusterID uint64, msgs []*raftpb.Message) []byte {
	frame := appendBatchHead(nil, from, clusterID)
	var enc entryEncoder
	for _, m := range msgs {
		head, ents, err := encodeMessage(m, &enc)
		if err != nil {
			t.Fatal(err)
		}
		frame = append(frame, head...)
		if ents != nil {
			for _, part := range ents.parts {
				frame = append(frame, part...)
			}
		}
	}
	return frame
}

// TestBatchEncoding: a batch frame is a MessageBatch for proto (and a proto-marshalled MessageBatch is one for
// decodeBatch), each message equal to the one sent, the message left as it was, and entries shared between
// messages encoded once.
func TestBatchEncoding(t *testing.T) {
	tests := []struct {
		name      string
		msgs      []*raftpb.Message
		encodings int // distinct entry lists encoded
	}{
		{"none", nil, 0},
		{"ready", ready(3, 300), 2},
		{"large entries", ready(2, 100<<10), 2},
		{"no entries", ready(1, 10)[3:], 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := &consensuspb.MessageBatch{From: 1, ClusterId: 0xc1}
			for _, m := range tc.msgs {
				body, err := proto.Marshal(m)
				if err != nil {
					t.Fatal(err)
				}
				want.Messages = append(want.Messages, body)
			}
			frame := frameOf(t, 1, 0xc1, tc.msgs)
			var enc entryEncoder
			for _, m := range tc.msgs {
				before := len(m.Entries)
				if _, _, err := encodeMessage(m, &enc); err != nil {
					t.Fatal(err)
				}
				if len(m.Entries) != before {
					t.Fatalf("message to %d: %d entries after encoding, want %d", m.GetTo(), len(m.Entries), before)
				}
			}
			if len(enc.recent) != tc.encodings {
				t.Errorf("%d entry lists encoded, want %d", len(enc.recent), tc.encodings)
			}

			got := &consensuspb.MessageBatch{}
			if err := proto.Unmarshal(frame, got); err != nil {
				t.Fatalf("proto cannot read the frame: %v", err)
			}
			if got.GetFrom() != 1 || got.GetClusterId() != 0xc1 || len(got.GetMessages()) != len(tc.msgs) {
				t.Fatalf("proto read from %x cluster %x with %d messages, want 1, c1, %d", got.GetFrom(),
					got.GetClusterId(), len(got.GetMessages()), len(tc.msgs))
			}
			marshalled, err := proto.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range [][]byte{frame, marshalled} {
				from, clusterID, bodies, err := decodeBatch(in, nil)
				if err != nil || from != 1 || clusterID != 0xc1 || len(bodies) != len(tc.msgs) {
					t.Fatalf("decodeBatch: from %x, cluster %x, %d messages, %v; want 1, c1, %d", from, clusterID,
						len(bodies), err, len(tc.msgs))
				}
				for i, body := range bodies {
					m := &raftpb.Message{}
					if err := proto.Unmarshal(body, m); err != nil {
						t.Fatal(err)
					}
					if !proto.Equal(m, tc.msgs[i]) {
						t.Errorf("message %d: got %v, want %v", i, m, tc.msgs[i])
					}
				}
			}
		})
	}
}

// TestEntriesEncodedAsProtoWould: an entry list's parts, end to end, are the bytes proto.Marshal writes for the
// entries field, whichever fields an entry has (unknown ones included); a large entry's data is a part of its
// own, the entry's own slice, and small entries are joined in one part.
func TestEntriesEncodedAsProtoWould(t *testing.T) {
	unknown := &raftpb.Entry{Term: new(uint64(1)), Index: new(uint64(5)), Data: []byte("x")}
	unknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 7))
	tests := []struct {
		name  string
		ents  []*raftpb.Entry
		parts int
	}{
		{"small", entries(1, 3, 300), 1},
		{"large index and data", entries(1<<40, 2, 200<<10), 4},
		{"small between large", append(append(entries(1, 1, 20<<10), entries(2, 2, 10)...), entries(4, 1, 20<<10)...), 4},
		{"large at the end", append(entries(1, 2, 10), entries(3, 1, framed.CopyLimit+1)...), 2},
		{"no data", []*raftpb.Entry{{Term: new(uint64(2)), Index: new(uint64(3))}}, 1},
		{"empty data", []*raftpb.Entry{{Term: new(uint64(2)), Index: new(uint64(3)), Data: []byte{}}}, 1},
		{"conf change", []*raftpb.Entry{{Type: raftpb.EntryConfChange.Enum(), Index: new(uint64(4)), Data: []byte("cc")}}, 1},
		{"no fields", []*raftpb.Entry{{}}, 1},
		{"unknown fields", []*raftpb.Entry{entries(4, 1, 10)[0], unknown}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var want []byte
			for _, ent := range tc.ents {
				body, err := proto.Marshal(ent)
				if err != nil {
					t.Fatal(err)
				}
				want = protowire.AppendBytes(protowire.AppendTag(want, messageEntries, protowire.BytesType), body)
			}
			var enc entryEncoder
			got, err := enc.encode(tc.ents)
			if err != nil {
				t.Fatal(err)
			}
			joined := bytes.Join(got.parts, nil)
			if !bytes.Equal(joined, want) || got.size != len(want) {
				t.Fatalf("encoded %x (size %d), want %x", joined, got.size, want)
			}
			for _, ent := range tc.ents {
				aliased := slices.ContainsFunc(got.parts, func(part []byte) bool {
					return len(part) > 0 && len(ent.Data) > 0 && &part[0] == &ent.Data[0]
				})
				if large := len(ent.Data) > framed.CopyLimit; aliased != large {
					t.Errorf("entry %d (%d bytes of data): written from the log %v, want %v", ent.GetIndex(),
						len(ent.Data), aliased, large)
				}
			}
			if len(got.parts) != tc.parts {
				t.Errorf("%d parts, want %d", len(got.parts), tc.parts)
			}
		})
	}
}

// TestDecodeBatchRefusesBadFrames: a frame that is not a MessageBatch is an error, not a panic.
func TestDecodeBatchRefusesBadFrames(t *testing.T) {
	good := frameOf(t, 1, 2, ready(1, 10))
	for _, frame := range [][]byte{{0xff}, {0x1a, 0x05, 0x01}, good[:len(good)-1], {0x08}} {
		if _, _, _, err := decodeBatch(frame, nil); err == nil {
			t.Errorf("decodeBatch(%x) succeeded", frame)
		}
	}
}

// BenchmarkEncodeBatch measures what a leader allocates to put one Ready's appends to two followers on their
// links (each follower's batch: its messages, framed): "marshal" marshals each message, then each batch, as the
// transport did before; "shared" is encodeMessage, which encodes the entries once and copies nothing into the
// batch (framed.Conn.Send takes the parts as they are).
// go test -run '^$' -bench EncodeBatch -benchmem ./services/consensus/transport/
func BenchmarkEncodeBatch(b *testing.B) {
	for _, n := range []int{1, 64} {
		msgs := ready(n, 300)[:2]
		b.Run(fmt.Sprintf("%dx300B/marshal", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				for _, m := range msgs {
					body, err := proto.Marshal(m)
					if err != nil {
						b.Fatal(err)
					}
					batch := &consensuspb.MessageBatch{From: 1, ClusterId: 2, Messages: [][]byte{body}}
					if _, err := proto.Marshal(batch); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("%dx300B/shared", n), func(b *testing.B) {
			b.ReportAllocs()
			var head []byte
			parts := make([][]byte, 0, 3)
			for range b.N {
				var enc entryEncoder
				for _, m := range msgs {
					msgHead, ents, err := encodeMessage(m, &enc)
					if err != nil {
						b.Fatal(err)
					}
					head = appendBatchHead(head[:0], 1, 2)
					parts = append(append(parts[:0], head, msgHead), ents.parts...)
				}
			}
		})
	}
}

// TestOutboundIsSmall: a queue's buffer (Config.QueueSize messages per peer and class, 4096 by default) is
// allocated whole and scanned by the collector, so a queued message stays four words.
func TestOutboundIsSmall(t *testing.T) {
	if size := unsafe.Sizeof(outbound{}); size > 4*unsafe.Sizeof(uintptr(0)) {
		t.Errorf("outbound is %d bytes, want at most 4 words", size)
	}
}
