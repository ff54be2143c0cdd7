package consensus

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/consensusclient"
)

// committedBatch returns n committed entries from index first on, each with size bytes of data.
func committedBatch(first uint64, n, size int) []commitlog.Entry {
	batch := make([]commitlog.Entry, n)
	for i := range batch {
		batch[i] = commitlog.Entry{Index: first + uint64(i), Term: 2, Kind: commitlog.KindNormal,
			Data: bytes.Repeat([]byte{byte(first) + byte(i)}, size)}
	}
	return batch
}

// TestCommittedEncoder: each frame is the CommittedResponse of its batch, whatever the batches before it
// (larger, with a snapshot) left in the reused messages, and a frame not yet released stays intact while the
// next ones are encoded into released buffers.
func TestCommittedEncoder(t *testing.T) {
	snapshot := commitlog.Entry{Index: 40, Term: 3, Kind: commitlog.KindSnapshot,
		Snapshot: &commitlog.SnapshotRef{Index: 40, Term: 3, SourceMemberID: 7, SourceStorageURL: "http://127.0.0.1:1"}}
	batches := [][]commitlog.Entry{
		committedBatch(1, 5, 300),
		committedBatch(6, 2, 10),
		{snapshot},
		append(committedBatch(41, 1, 0), committedBatch(42, 3, 20<<10)...),
		committedBatch(45, 1, 300),
		committedBatch(46, 1, 2<<20),
		committedBatch(47, 4, 100),
	}
	var enc committedEncoder
	var held []byte // the first frame, never released
	var heldWant *consensuspb.CommittedResponse
	for i, batch := range batches {
		frame, release, err := enc.encode(batch)
		if err != nil {
			t.Fatal(err)
		}
		want := &consensuspb.CommittedResponse{}
		for _, e := range batch {
			want.Entries = append(want.Entries, consensusclient.EntryToProto(e))
		}
		got := &consensuspb.CommittedResponse{}
		if err := proto.Unmarshal(frame, got); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("batch %d: got %v, want %v", i, got, want)
		}
		if i == 0 {
			held, heldWant = frame, want
			continue
		}
		if release != nil {
			release()
		}
	}
	got := &consensuspb.CommittedResponse{}
	if err := proto.Unmarshal(held, got); err != nil || !proto.Equal(got, heldWant) {
		t.Fatalf("the unreleased first frame changed: %v, %v", got, err)
	}
	for i, e := range enc.entries {
		if e.Data != nil {
			t.Errorf("kept entry %d still holds %d bytes of data", i, len(e.Data))
		}
	}
}

// BenchmarkCommittedEncode compares a committed link's frame per batch as it was made (a message per entry,
// marshalled into a new buffer) with committedEncoder's (messages and written buffers reused).
// go test -run '^$' -bench CommittedEncode -benchmem ./services/consensus/
func BenchmarkCommittedEncode(b *testing.B) {
	for _, n := range []int{1, 64} {
		batch := committedBatch(1, n, 300)
		b.Run(fmt.Sprintf("%dx300B/marshal", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				resp := &consensuspb.CommittedResponse{Entries: make([]*consensuspb.Entry, len(batch))}
				for i, e := range batch {
					resp.Entries[i] = consensusclient.EntryToProto(e)
				}
				if _, err := proto.Marshal(resp); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("%dx300B/reused", n), func(b *testing.B) {
			b.ReportAllocs()
			var enc committedEncoder
			for range b.N {
				_, release, err := enc.encode(batch)
				if err != nil {
					b.Fatal(err)
				}
				release() // as the link does once the frame is written
			}
		})
	}
}
