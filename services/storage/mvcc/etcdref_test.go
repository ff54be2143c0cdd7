package mvcc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// recordGolden runs every semantics case against a fresh real etcd (bin) and writes its answers to goldenPath.
func recordGolden(t *testing.T, bin string) {
	golden := map[string]outcome{}
	for _, tc := range semanticsCases {
		conn, stop := startEtcd(t, bin)
		kv, lease := pb.NewKVClient(conn), pb.NewLeaseClient(conn)
		for i, step := range tc.steps {
			resp, err := callEtcd(kv, lease, step)
			golden[stepKey(tc.name, i)] = toOutcome(t, resp, err)
		}
		stop()
	}
	writeGolden(t, golden)
}

func toOutcome(t *testing.T, resp proto.Message, err error) outcome {
	if err != nil {
		st, _ := status.FromError(err)
		return outcome{ErrorCode: int(st.Code()), ErrorMsg: st.Message()}
	}
	data, merr := protojson.Marshal(resp)
	if merr != nil {
		t.Fatal(merr)
	}
	return outcome{Response: data}
}

func callEtcd(kv pb.KVClient, lease pb.LeaseClient, req *pb.InternalRaftRequest) (proto.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case req.Range != nil:
		return kv.Range(ctx, req.Range)
	case req.Put != nil:
		return kv.Put(ctx, req.Put)
	case req.DeleteRange != nil:
		return kv.DeleteRange(ctx, req.DeleteRange)
	case req.Txn != nil:
		return kv.Txn(ctx, req.Txn)
	case req.Compaction != nil:
		return kv.Compact(ctx, req.Compaction)
	case req.LeaseGrant != nil:
		return lease.LeaseGrant(ctx, req.LeaseGrant)
	case req.LeaseRevoke != nil:
		return lease.LeaseRevoke(ctx, req.LeaseRevoke)
	}
	return nil, fmt.Errorf("unsupported request %v", req)
}

// startEtcd starts a single-member etcd on loopback with a fresh data dir and waits until it answers.
func startEtcd(t *testing.T, bin string) (*grpc.ClientConn, func()) {
	dir := t.TempDir()
	client := fmt.Sprintf("http://127.0.0.1:%d", loopbacktest.Port(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", loopbacktest.Port(t))
	cmd := exec.Command(bin, "--data-dir", filepath.Join(dir, "data"), "--name", "ref",
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "ref="+peer,
		"--log-level", "error")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	conn, err := grpc.NewClient(client[len("http://"):], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte("probe")})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return conn, func() {
		_ = conn.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}
