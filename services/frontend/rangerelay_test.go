package frontend_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestRangeRelayedAsStorageAnswers: KV.Range reaches the client as storage's own answer, relayed without being
// decoded, with the frontend's header fields merged into storage's header; large and small answers, limited,
// counted, keys only and sorted, at an older revision, and empty.
func TestRangeRelayedAsStorageAnswers(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	ctx := ctxFor(t)
	fe, home := c.Frontends()[0], c.Members()[0]
	cli := c.Client(t, fe.URL)
	value := strings.Repeat("v", 2048)
	const keys = 300
	var middle int64
	for i := range keys {
		resp, err := cli.Put(ctx, fmt.Sprintf("relay/k%03d", i), value)
		if err != nil {
			t.Fatal(err)
		}
		if i == keys/2 {
			middle = resp.Header.Revision
		}
	}
	all := &pb.RangeRequest{Key: []byte("relay/"), RangeEnd: []byte("relay0"), Serializable: true}
	waittest.Until(t, 10*time.Second, 10*time.Millisecond, "the home storage has every put", func() bool {
		resp, err := home.Storage().Range(ctx, all)
		return err == nil && resp.Count == keys
	})
	kv := pb.NewKVClient(rawConn(t, fe.URL))
	clusterID := home.Node().ClusterID()
	for _, tt := range []struct {
		name string
		req  *pb.RangeRequest
	}{
		{"all", all},
		{"limit", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd, Serializable: true, Limit: 10}},
		{"count only", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd, Serializable: true, CountOnly: true}},
		{"keys only, descending", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd, Serializable: true, KeysOnly: true,
			SortOrder: pb.RangeRequest_DESCEND, SortTarget: pb.RangeRequest_KEY}},
		{"older revision", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd, Serializable: true, Revision: middle}},
		{"no such key", &pb.RangeRequest{Key: []byte("relay/none"), Serializable: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, err := home.Storage().Range(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kv.Range(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			h, w := got.Header, want.Header
			if h.ClusterId != clusterID || h.MemberId != home.ID() || h.Revision != w.Revision || h.RaftTerm != w.RaftTerm {
				t.Errorf("header %v, want cluster %x, member %x, storage's revision %d and term %d",
					h, clusterID, home.ID(), w.Revision, w.RaftTerm)
			}
			got.Header, want.Header = nil, nil
			if !proto.Equal(got, want) {
				t.Errorf("answer differs from storage's: %d kvs (count %d, more %v), want %d (count %d, more %v)",
					len(got.Kvs), got.Count, got.More, len(want.Kvs), want.Count, want.More)
			}
		})
	}
}
