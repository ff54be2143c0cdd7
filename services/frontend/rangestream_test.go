package frontend_test

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// chunk is what one RangeStream message carried.
type chunk struct {
	kvs    int
	header bool
	more   bool
	count  int64
}

func TestRangeStreamAsEtcd(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	ctx := ctxFor(t)
	kv := pb.NewKVClient(rawConn(t, c.Endpoints()[1]))
	for i := range 25 {
		if _, err := kv.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "s/%02d", i), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the home member's storage applied every put", func() bool {
		resp, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("s/"), RangeEnd: []byte("s0"), CountOnly: true, Serializable: true})
		return err == nil && resp.Count == 25
	})
	receive := func(r *pb.RangeRequest, onFirst func()) ([]chunk, int64, error) {
		stream, err := kv.RangeStream(ctx, r)
		if err != nil {
			return nil, 0, err
		}
		var chunks []chunk
		var rev int64
		for {
			resp, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return chunks, rev, nil
			}
			if err != nil {
				return chunks, rev, err
			}
			rr := resp.RangeResponse
			chunks = append(chunks, chunk{len(rr.Kvs), rr.Header != nil, rr.More, rr.Count})
			if rr.Header != nil {
				rev = rr.Header.Revision
				if rr.Header.ClusterId == 0 || rr.Header.MemberId == 0 || rr.Header.RaftTerm == 0 {
					t.Errorf("last chunk header %v lacks cluster, member or term", rr.Header)
				}
			}
			if len(chunks) == 1 && onFirst != nil {
				onFirst()
			}
		}
	}
	all := &pb.RangeRequest{Key: []byte("s/"), RangeEnd: []byte("s0")}
	// The chunkings below are what etcd 3.7.3 sent for the same 25 keys.
	for _, tc := range []struct {
		name string
		req  *pb.RangeRequest
		want []chunk
		err  error
	}{
		{"whole range", all, []chunk{{10, false, false, 0}, {15, true, false, 25}}, nil},
		{"limit 13", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd, Limit: 13},
			[]chunk{{10, false, false, 0}, {3, true, true, 25}}, nil},
		{"count only", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd, CountOnly: true},
			[]chunk{{0, true, false, 25}}, nil},
		{"serializable", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd, Serializable: true},
			[]chunk{{10, false, false, 0}, {15, true, false, 25}}, nil},
		{"key ascending is the default order", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd,
			SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_KEY}, []chunk{{10, false, false, 0}, {15, true, false, 25}}, nil},
		{"no key", &pb.RangeRequest{Key: []byte("nothing")}, []chunk{{0, true, false, 0}}, nil},
		{"custom sort", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd, SortOrder: pb.RangeRequest_DESCEND}, nil,
			status.Error(codes.Unimplemented, "RangeStream does not support custom sort orders")},
		{"revision filter", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd, MinModRevision: 3}, nil,
			status.Error(codes.Unimplemented, "RangeStream does not support revision filters")},
		{"future revision", &pb.RangeRequest{Key: all.Key, RangeEnd: all.RangeEnd, Revision: 1 << 40}, nil,
			status.Error(codes.OutOfRange, "etcdserver: mvcc: required revision is a future revision")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := receive(tc.req, nil)
			wantStatus(t, tc.name, err, tc.err)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("chunks %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("pinned to the first chunk's revision", func(t *testing.T) {
		before, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("s/"), RangeEnd: []byte("s0"), CountOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		got, rev, err := receive(all, func() {
			if _, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("s/99"), Value: []byte("late")}); err != nil {
				t.Error(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if rev != before.Header.Revision || fmt.Sprint(got) != fmt.Sprint([]chunk{{10, false, false, 0}, {15, true, false, 25}}) {
			t.Fatalf("stream at revision %d (before: %d) gave %v: a write during the stream leaked in", rev, before.Header.Revision, got)
		}
	})
}
