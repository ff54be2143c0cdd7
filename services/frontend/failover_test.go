package frontend_test

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestRetriesOnDeadReplica stops the leader's storage and checks, through plain gRPC (no client retries),
// that the frontend routes every call around it at once, then back once it returns.
func TestRetriesOnDeadReplica(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	ctx := ctxFor(t)
	leader := c.Leader(10 * time.Second)
	var leaderFE, otherFE *clustertest.Frontend
	for i, fe := range c.Frontends() {
		if c.Members()[i] == leader {
			leaderFE = fe
		} else {
			otherFE = fe
		}
	}
	leader.StopStorage()
	kvLeader := pb.NewKVClient(rawConn(t, leaderFE.URL))
	kvOther := pb.NewKVClient(rawConn(t, otherFE.URL))
	for _, tc := range []struct {
		name string
		call func() (*pb.ResponseHeader, error)
	}{
		{"put through another frontend", func() (*pb.ResponseHeader, error) {
			resp, err := kvOther.Put(ctx, &pb.PutRequest{Key: []byte("failover"), Value: []byte("1")})
			return resp.GetHeader(), err
		}},
		{"put through the dead storage's frontend", func() (*pb.ResponseHeader, error) {
			resp, err := kvLeader.Put(ctx, &pb.PutRequest{Key: []byte("failover"), Value: []byte("2")})
			return resp.GetHeader(), err
		}},
		{"linearizable get", func() (*pb.ResponseHeader, error) {
			resp, err := kvLeader.Range(ctx, &pb.RangeRequest{Key: []byte("failover")})
			if err == nil && string(resp.Kvs[0].Value) != "2" {
				t.Errorf("linearizable get after the put saw %q", resp.Kvs[0].Value)
			}
			return resp.GetHeader(), err
		}},
		{"serializable get whose home storage is dead", func() (*pb.ResponseHeader, error) {
			resp, err := kvLeader.Range(ctx, &pb.RangeRequest{Key: []byte("failover"), Serializable: true})
			return resp.GetHeader(), err
		}},
		{"read-only txn", func() (*pb.ResponseHeader, error) {
			resp, err := kvLeader.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{
				RequestRange: &pb.RangeRequest{Key: []byte("failover")}}}}})
			return resp.GetHeader(), err
		}},
	} {
		h, err := tc.call()
		if err != nil {
			t.Fatalf("%s with the leader's storage down: %v", tc.name, err)
		}
		if h.MemberId == leader.ID() || h.MemberId == 0 {
			t.Errorf("%s: served by member %x, want another live member", tc.name, h.MemberId)
		}
	}
	// Status speaks for the home member, whose storage is down: an error, as from a dead etcd endpoint.
	_, err := pb.NewMaintenanceClient(rawConn(t, leaderFE.URL)).Status(ctx, &pb.StatusRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("status of a member whose storage is down: %v, want Unavailable", err)
	}

	if err := leader.StartStorage(); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the restarted storage serving its frontend's serializable reads again", func() bool {
		resp, err := kvLeader.Range(ctx, &pb.RangeRequest{Key: []byte("failover"), Serializable: true})
		return err == nil && resp.Header.MemberId == leader.ID() && string(resp.Kvs[0].Value) == "2"
	})

	// A dead consensus is routed around for membership reads too.
	follower := c.Members()[0]
	if follower == leader {
		follower = c.Members()[1]
	}
	follower.StopConsensus()
	cluster := pb.NewClusterClient(rawConn(t, c.Endpoints()[0]))
	for range 3 {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := cluster.MemberList(callCtx, &pb.MemberListRequest{})
		cancel()
		if err != nil || len(resp.Members) != 3 {
			t.Fatalf("member list with one consensus down: %v %v", resp, err)
		}
	}
	if err := follower.RestartConsensus(); err != nil {
		t.Fatal(err)
	}
}
