package consensusclient

import (
	"bytes"
	"reflect"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/commitlog"
)

// TestDecodeCommittedAsProto checks that decodeCommitted gives the entries proto.Unmarshal gives for every kind
// of frame, sharing the frame for the common ones, and the error of a frame that ends the link.
func TestDecodeCommittedAsProto(t *testing.T) {
	put := bytes.Repeat([]byte("p"), 300)
	for _, tc := range []struct {
		name    string
		resp    *consensuspb.CommittedResponse
		shares  bool // the entries' Data share the frame
		errCode int32
	}{
		{"normal entries", &consensuspb.CommittedResponse{Entries: []*consensuspb.Entry{
			{Index: 7, Term: 2, Data: put}, {Index: 8, Term: 2, Data: []byte("x")}}}, true, 0},
		{"empty and conf change", &consensuspb.CommittedResponse{Entries: []*consensuspb.Entry{
			{Index: 1, Term: 1, Kind: consensuspb.EntryKind_EMPTY},
			{Index: 2, Term: 1, Kind: consensuspb.EntryKind_CONF_CHANGE, Data: []byte("cc")}}}, true, 0},
		{"snapshot", &consensuspb.CommittedResponse{Entries: []*consensuspb.Entry{
			{Index: 3, Term: 1, Data: []byte("a")},
			{Index: 9, Term: 3, Kind: consensuspb.EntryKind_SNAPSHOT, Snapshot: &consensuspb.SnapshotRef{Index: 9, Term: 3,
				SourceMemberId: 2, SourceStorageUrl: "http://127.0.0.1:1"}}}}, false, 0},
		{"error", &consensuspb.CommittedResponse{Error: &spb.Status{Code: 14, Message: "stopping"}}, false, 14},
		{"nothing", &consensuspb.CommittedResponse{}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame, err := proto.Marshal(tc.resp)
			if err != nil {
				t.Fatal(err)
			}
			var want []commitlog.Entry
			for _, e := range tc.resp.GetEntries() {
				want = append(want, EntryFromProto(e))
			}
			got, resp, err := decodeCommitted(frame, []commitlog.Entry{{Index: 99}}[:0])
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(normalize(got), normalize(want))) {
				t.Fatalf("decodeCommitted = %+v, want %+v", got, want)
			}
			if resp.GetError().GetCode() != tc.errCode {
				t.Fatalf("error code %d, want %d", resp.GetError().GetCode(), tc.errCode)
			}
			for _, e := range got {
				if len(e.Data) > 0 && sharesFrame(e.Data, frame) != tc.shares {
					t.Fatalf("entry %d shares the frame: %v, want %v", e.Index, !tc.shares, tc.shares)
				}
			}
		})
	}
	if _, _, err := decodeCommitted([]byte{0x0a, 0x05, 0x08}, nil); err == nil {
		t.Fatal("a truncated frame decoded without an error")
	}
}

// normalize makes empty Data nil, as the two decoders may differ there and nothing tells them apart.
func normalize(entries []commitlog.Entry) []commitlog.Entry {
	out := append([]commitlog.Entry(nil), entries...)
	for i := range out {
		if len(out[i].Data) == 0 {
			out[i].Data = nil
		}
	}
	return out
}

// sharesFrame reports whether sub starts inside frame.
func sharesFrame(sub, frame []byte) bool {
	for i := range frame {
		if &frame[i] == &sub[0] {
			return true
		}
	}
	return false
}

// BenchmarkDecodeCommitted compares decoding a committed frame of 16 puts' entries (300 bytes each) with
// proto.Unmarshal and with decodeCommitted, as a storage's apply loop does for every frame.
//
//	go test -run '^$' -bench DecodeCommitted -benchmem ./internal/consensusclient/
func BenchmarkDecodeCommitted(b *testing.B) {
	resp := &consensuspb.CommittedResponse{}
	for i := range 16 {
		resp.Entries = append(resp.Entries, &consensuspb.Entry{Index: uint64(100 + i), Term: 3, Data: bytes.Repeat([]byte("p"), 300)})
	}
	frame, err := proto.Marshal(resp)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		decode func([]byte, []commitlog.Entry) ([]commitlog.Entry, *consensuspb.CommittedResponse, error)
	}{{"proto", decodeCommittedProto}, {"shared", decodeCommitted}} {
		b.Run(tc.name, func(b *testing.B) {
			batch := make([]commitlog.Entry, 0, 16)
			b.ReportAllocs()
			for b.Loop() {
				if batch, _, err = tc.decode(frame, batch[:0]); err != nil || len(batch) != 16 {
					b.Fatal(len(batch), err)
				}
			}
		})
	}
}
