package frontend_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// rawKV dials one frontend with plain gRPC (no client/v3 retries), so errors arrive exactly as sent.
func rawConn(t testing.TB, endpoint string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(endpoint, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// wantStatus checks err is exactly want (code and message), as real etcd 3.7.3 answers; client/v3's typed
// errors (rpctypes.EtcdError) compare by their code and description.
func wantStatus(t *testing.T, what string, err, want error) {
	t.Helper()
	if ee, ok := err.(rpctypes.EtcdError); ok {
		err = status.Error(ee.Code(), ee.Error())
	}
	got, wantS := status.Convert(err), status.Convert(want)
	if want == nil {
		if err != nil {
			t.Fatalf("%s: unexpected error %v", what, err)
		}
		return
	}
	if got.Code() != wantS.Code() || got.Message() != wantS.Message() {
		t.Fatalf("%s: got %v %q, want %v %q", what, got.Code(), got.Message(), wantS.Code(), wantS.Message())
	}
}

func TestKVErrorsAsEtcd(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	kv := pb.NewKVClient(rawConn(t, c.Endpoints()[0]))
	ctx := ctxFor(t)
	ops := func(n int) []*pb.RequestOp {
		out := make([]*pb.RequestOp, n)
		for i := range out {
			out[i] = &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: fmt.Appendf(nil, "k%d", i)}}}
		}
		return out
	}
	put := func(key string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(key)}}}
	}
	// Codes and messages below are what etcd 3.7.3 answered to the same requests on loopback.
	tooLarge := status.Error(codes.ResourceExhausted, "grpc: received message larger than max (2252810 vs. 2097152)")
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"range empty key", func() error { _, err := kv.Range(ctx, &pb.RangeRequest{}); return err }, rpctypes.ErrGRPCEmptyKey},
		{"range bad sort", func() error {
			_, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("a"), SortOrder: 9})
			return err
		}, rpctypes.ErrGRPCInvalidSortOption},
		{"range future revision", func() error {
			_, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("a"), Revision: 1 << 40})
			return err
		}, rpctypes.ErrGRPCFutureRev},
		{"put empty key", func() error { _, err := kv.Put(ctx, &pb.PutRequest{}); return err }, rpctypes.ErrGRPCEmptyKey},
		{"put ignore value with value", func() error {
			_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte("v"), IgnoreValue: true})
			return err
		}, rpctypes.ErrGRPCValueProvided},
		{"put 1.5 MiB value", func() error {
			_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("big"), Value: make([]byte, 1536*1024)})
			return err
		}, rpctypes.ErrGRPCRequestTooLarge},
		{"put 2.2 MiB value", func() error {
			_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("big"), Value: make([]byte, 2200*1024)})
			return err
		}, tooLarge},
		{"delete empty key", func() error { _, err := kv.DeleteRange(ctx, &pb.DeleteRangeRequest{}); return err }, rpctypes.ErrGRPCEmptyKey},
		{"txn 129 ops", func() error { _, err := kv.Txn(ctx, &pb.TxnRequest{Success: ops(129)}); return err }, rpctypes.ErrGRPCTooManyOps},
		{"txn 128 ops", func() error { _, err := kv.Txn(ctx, &pb.TxnRequest{Success: ops(128)}); return err }, nil},
		{"txn duplicate key", func() error {
			_, err := kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{put("d"), put("d")}})
			return err
		}, rpctypes.ErrGRPCDuplicateKey},
		{"compact future revision", func() error {
			_, err := kv.Compact(ctx, &pb.CompactionRequest{Revision: 1 << 40})
			return err
		}, rpctypes.ErrGRPCFutureRev},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.name, tc.call(), tc.want) })
	}

	// Compacted revisions, through client/v3 as a client sees them.
	cli := c.Client(t)
	var revs []int64
	for i := range 5 {
		resp, err := cli.Put(ctx, "compact/key", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, resp.Header.Revision)
	}
	if _, err := cli.Compact(ctx, revs[3], clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	_, err := cli.Get(ctx, "compact/key", clientv3.WithRev(revs[1]))
	wantStatus(t, "get compacted revision", err, rpctypes.ErrGRPCCompacted)
	_, err = cli.Compact(ctx, revs[2])
	wantStatus(t, "compact again below", err, rpctypes.ErrGRPCCompacted)
	if resp, err := cli.Get(ctx, "compact/key", clientv3.WithRev(revs[3])); err != nil || string(resp.Kvs[0].Value) != "3" {
		t.Fatalf("get at compact revision: %v %v", resp, err)
	}
}

func TestKVHeadersAndRouting(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	ctx := ctxFor(t)
	clusterID := c.Members()[0].Node().ClusterID()
	leader := c.Leader(10 * time.Second)
	ids := map[uint64]bool{}
	for _, m := range c.Members() {
		ids[m.ID()] = true
	}
	for i, fe := range c.Frontends() {
		cli := c.Client(t, fe.URL)
		home := c.Members()[i]
		// A frontend learns the leader from its probes: one that started before the election routes to another
		// storage (a hop, not a wrong answer) until a probe round sees it. Route once it has.
		waittest.Until(t, 10*time.Second, 20*time.Millisecond, "frontend "+fe.Name+" to route writes to the leader", func() bool {
			warm, err := cli.Put(ctx, "warm/"+fe.Name, "v")
			return err == nil && warm.Header.MemberId == leader.ID()
		})
		put, err := cli.Put(ctx, "hdr/"+fe.Name, "v", clientv3.WithPrevKV())
		if err != nil {
			t.Fatal(err)
		}
		lin, err := cli.Get(ctx, "hdr/"+fe.Name)
		if err != nil {
			t.Fatal(err)
		}
		ser, err := cli.Get(ctx, "hdr/"+fe.Name, clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		list, err := cli.Get(ctx, "hdr/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		first, err := cli.Get(ctx, "hdr/", clientv3.WithPrefix(), clientv3.WithLimit(1))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name       string
			h          *pb.ResponseHeader
			wantMember uint64
			minRev     int64 // a serializable read may lag
		}{
			{"put goes to the leader's storage", put.Header, leader.ID(), put.Header.Revision},
			{"linearizable get goes to the leader's storage", lin.Header, leader.ID(), put.Header.Revision},
			{"serializable get goes to the home member's storage", ser.Header, home.ID(), 1},
			{"linearizable prefix get goes to the home member's storage", list.Header, home.ID(), put.Header.Revision},
			{"linearizable prefix get of one key goes to the leader's storage", first.Header, leader.ID(), put.Header.Revision},
		} {
			h := tc.h
			if h.ClusterId != clusterID || h.MemberId != tc.wantMember || h.RaftTerm == 0 || h.Revision < tc.minRev {
				t.Errorf("frontend %s, %s: header %v, want cluster %x member %x, a term and revision >= %d",
					fe.Name, tc.name, h, clusterID, tc.wantMember, tc.minRev)
			}
		}
		if len(lin.Kvs) != 1 || lin.Kvs[0].ModRevision != put.Header.Revision {
			t.Errorf("linearizable read after put: %v", lin.Kvs)
		}
		if n := len(list.Kvs); n != i+1 || list.Kvs[n-1].ModRevision != put.Header.Revision {
			t.Errorf("frontend %s: linearizable prefix read after put (on member %x): %v", fe.Name, home.ID(), list.Kvs)
		}
	}

	// A read-only txn is a read; a txn with a put is a write; both carry full headers.
	cli := c.Client(t)
	txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("hdr/m1"), ">", 0)).
		Then(clientv3.OpGet("hdr/m1"), clientv3.OpPut("hdr/txn", "x")).Else(clientv3.OpGet("nothing")).Commit()
	if err != nil || !txn.Succeeded || txn.Header.ClusterId != clusterID || !ids[txn.Header.MemberId] {
		t.Fatalf("txn: %v %v", txn, err)
	}
	ro, err := cli.Txn(ctx).Then(clientv3.OpGet("hdr/txn")).Commit()
	if err != nil || ro.Header.Revision != txn.Header.Revision || string(ro.Responses[0].GetResponseRange().Kvs[0].Value) != "x" {
		t.Fatalf("read-only txn: %v %v", ro, err)
	}
	del, err := cli.Delete(ctx, "hdr/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	if err != nil || del.Deleted != 4 || len(del.PrevKvs) != 4 || del.Header.MemberId != leader.ID() {
		t.Fatalf("delete prefix: %v %v", del, err)
	}
}

func writeFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }
