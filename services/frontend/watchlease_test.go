package frontend_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/services/frontend"
)

// fakeHub is a stand-in watchhub at the frontend's boundary: every watch it creates gets one PUT event at
// the watch's start revision, whose value names the hub.
type fakeHub struct {
	pb.UnimplementedWatchServer
	name string
}

func (h *fakeHub) Watch(stream pb.Watch_WatchServer) error {
	var nextID int64
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		create := req.GetCreateRequest()
		if create == nil {
			continue
		}
		nextID++
		rev := max(create.StartRevision, 1)
		hdr := &pb.ResponseHeader{Revision: rev}
		if err := stream.Send(&pb.WatchResponse{Header: hdr, WatchId: nextID, Created: true}); err != nil {
			return err
		}
		ev := &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: create.Key, Value: []byte(h.name), ModRevision: rev}}
		if err := stream.Send(&pb.WatchResponse{Header: hdr, WatchId: nextID, Events: []*mvccpb.Event{ev}}); err != nil {
			return err
		}
	}
}

// fakeKeeper is a stand-in leasekeeper: the active one grants lease 42 and answers keep-alives, a standby
// refuses as the real keepers will.
type fakeKeeper struct {
	pb.UnimplementedLeaseServer
	active atomic.Bool
}

var errStandby = status.Error(codes.FailedPrecondition, "cairn leasekeeper: not the active leasekeeper")

func (k *fakeKeeper) LeaseGrant(_ context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	if !k.active.Load() {
		return nil, errStandby
	}
	return &pb.LeaseGrantResponse{Header: &pb.ResponseHeader{}, ID: 42, TTL: r.TTL}, nil
}

func (k *fakeKeeper) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	if !k.active.Load() {
		return errStandby
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		if err := stream.Send(&pb.LeaseKeepAliveResponse{Header: &pb.ResponseHeader{}, ID: req.ID, TTL: 5}); err != nil {
			return err
		}
	}
}

// serveFake serves register on a loopback port and returns its URL and server.
func serveFake(t *testing.T, register func(*grpc.Server)) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return "http://" + lis.Addr().String(), srv
}

func TestWatchAndLeaseForwarding(t *testing.T) {
	hubs := []*fakeHub{{name: "hub1"}, {name: "hub2"}}
	keepers := []*fakeKeeper{{}, {}}
	keepers[1].active.Store(true)
	var hubURLs, keeperURLs []string
	hubServers := map[*fakeHub]*grpc.Server{}
	for _, h := range hubs {
		u, srv := serveFake(t, func(s *grpc.Server) { pb.RegisterWatchServer(s, h) })
		hubURLs, hubServers[h] = append(hubURLs, u), srv
	}
	var keeperServers []*grpc.Server
	for _, k := range keepers {
		u, srv := serveFake(t, func(s *grpc.Server) { pb.RegisterLeaseServer(s, k) })
		keeperURLs, keeperServers = append(keeperURLs, u), append(keeperServers, srv)
	}
	c := clustertest.Start(t, clustertest.Options{Members: 1, ConfigureFrontend: func(cfg *frontend.Config) {
		cfg.WatchEndpoints, cfg.LeaseEndpoints = hubURLs, keeperURLs
	}})
	ctx := ctxFor(t)

	t.Run("watch streams spread over hubs and resume on another", func(t *testing.T) {
		first := c.Client(t).Watch(clientv3.WithRequireLeader(ctx), "w", clientv3.WithRev(7))
		second := c.Client(t).Watch(ctx, "w", clientv3.WithRev(7))
		var names []string
		for _, ch := range []clientv3.WatchChan{first, second} {
			resp := <-ch
			if len(resp.Events) != 1 || resp.Events[0].Kv.ModRevision != 7 {
				t.Fatalf("watch response %+v", resp)
			}
			names = append(names, string(resp.Events[0].Kv.Value))
		}
		if names[0] == names[1] {
			t.Fatalf("both streams went to %s, want one on each hub", names[0])
		}
		// Stop the first stream's hub: client/v3 reopens the watch, from the next revision, on the other hub.
		for _, h := range hubs {
			if h.name == names[0] {
				hubServers[h].Stop()
			}
		}
		deadline := time.After(10 * time.Second)
		for {
			select {
			case resp := <-first:
				if resp.Canceled {
					t.Fatalf("watch canceled: %v", resp.Err())
				}
				if len(resp.Events) == 1 {
					if resp.Events[0].Kv.ModRevision != 8 || string(resp.Events[0].Kv.Value) != names[1] {
						t.Fatalf("resumed event %v, want revision 8 from %s", resp.Events[0], names[1])
					}
					return
				}
			case <-deadline:
				t.Fatal("the watch did not resume on the other hub")
			}
		}
	})

	t.Run("lease calls go to the active keeper", func(t *testing.T) {
		cli := c.Client(t)
		grant, err := cli.Grant(ctx, 5)
		if err != nil || grant.ID != 42 {
			t.Fatalf("grant: %v %v", grant, err)
		}
		ka, err := cli.KeepAliveOnce(ctx, grant.ID)
		if err != nil || ka.ID != 42 {
			t.Fatalf("keep-alive: %v %v", ka, err)
		}
		keeperServers[1].Stop()
		keepers[0].active.Store(true)
		if grant, err := cli.Grant(ctx, 5); err != nil || grant.ID != 42 {
			t.Fatalf("grant after failover: %v %v", grant, err)
		}
	})
}

// TestLeaseWaitsOutKeeperHandover: while no keeper is active (the old one stepped down, no standby has claimed
// yet), a lease call waits for one, as etcd holds a proposal through a leader election, and fails with the
// keepers' refusal once --request-timeout has passed without one.
func TestLeaseWaitsOutKeeperHandover(t *testing.T) {
	keepers := []*fakeKeeper{{}, {}}
	var keeperURLs []string
	for _, k := range keepers {
		u, _ := serveFake(t, func(s *grpc.Server) { pb.RegisterLeaseServer(s, k) })
		keeperURLs = append(keeperURLs, u)
	}
	const requestTimeout = 2 * time.Second
	c := clustertest.Start(t, clustertest.Options{Members: 1, ConfigureFrontend: func(cfg *frontend.Config) {
		cfg.LeaseEndpoints, cfg.RequestTimeout = keeperURLs, requestTimeout
	}})
	cli := c.Client(t)
	ctx := ctxFor(t)

	began := time.Now()
	_, err := cli.Grant(ctx, 5)
	if took := time.Since(began); status.Code(err) != codes.FailedPrecondition || took < requestTimeout || took > 3*requestTimeout {
		t.Fatalf("grant with no active keeper: %v after %s; want the keepers' refusal after about %s", err, took, requestTimeout)
	}

	const handover = 300 * time.Millisecond
	began = time.Now()
	time.AfterFunc(handover, func() { keepers[1].active.Store(true) })
	grant, err := cli.Grant(ctx, 5)
	if took := time.Since(began); err != nil || grant.ID != 42 || took < handover {
		t.Fatalf("grant during a handover: %v, %v after %s; want lease 42 once a keeper is active (after %s)", grant, err, took, handover)
	}
}

// TestLeaseCallsRideOutKeeperCrash: on a stack with two keepers, lease calls made right after the active keeper
// crashes (before the standby has claimed) wait for the takeover and succeed, and the lease granted before the
// crash is still there.
func TestLeaseCallsRideOutKeeperCrash(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Leasekeepers: 2})
	active := c.ActiveLeasekeeper(10 * time.Second)
	cli := c.Client(t)
	ctx := ctxFor(t)
	before, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	active.Crash()
	began := time.Now()
	after, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatalf("grant right after the active keeper crashed: %v (after %s)", err, time.Since(began))
	}
	for _, id := range []clientv3.LeaseID{before.ID, after.ID} {
		if ttl, err := cli.TimeToLive(ctx, id); err != nil || ttl.TTL <= 0 {
			t.Fatalf("lease %x after the takeover: %v, %v", id, ttl, err)
		}
	}
	t.Logf("the grant waited %s for the takeover", time.Since(began))
}

// TestStopEndsRelayedWatches: a frontend that stops ends its relayed Watch streams with Unavailable (clients
// resume on another frontend) rather than waiting for them until its stop deadline.
func TestStopEndsRelayedWatches(t *testing.T) {
	hubURL, _ := serveFake(t, func(s *grpc.Server) { pb.RegisterWatchServer(s, &fakeHub{name: "hub"}) })
	c := clustertest.Start(t, clustertest.Options{Members: 1, ConfigureFrontend: func(cfg *frontend.Config) {
		cfg.WatchEndpoints = []string{hubURL}
	}})
	stream, err := pb.NewWatchClient(rawConn(t, c.Endpoints()[0])).Watch(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || !resp.Created {
		t.Fatalf("created: %v %v", resp, err)
	}
	began := time.Now()
	c.Frontends()[0].Stop()
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("stop took %s with a watch stream open", took)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("stream ended with %v, want Unavailable", err)
			}
			return
		}
	}
}

func TestWatchAndLeaseUnimplementedWithoutBackends(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1})
	ctx := ctxFor(t)
	conn := rawConn(t, c.Endpoints()[0])
	stream, err := pb.NewWatchClient(conn).Watch(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("watch: %v, want Unimplemented", err)
	}
	_, err = pb.NewLeaseClient(conn).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 5})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("lease grant: %v, want Unimplemented", err)
	}
}
