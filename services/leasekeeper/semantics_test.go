package leasekeeper

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// leaseTarget is what a semantics case runs against: the Lease API, and key writes and reads of the same store.
type leaseTarget struct {
	lease pb.LeaseClient
	put   func(ctx context.Context, key string, lease int64) error
	get   func(ctx context.Context, key string) (bool, error)
}

// semanticsCase is one behaviour of etcd's Lease API; the expectations are what etcd v3.7.3 answers (run them
// against it with CAIRN_LEASE_ETCDREF=1).
type semanticsCase struct {
	name string
	run  func(ctx context.Context, tg leaseTarget) error
}

func grant(ctx context.Context, tg leaseTarget, id, ttl int64) (*pb.LeaseGrantResponse, error) {
	return tg.lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: ttl})
}

// wantErr checks that err is etcd's want (same code and message).
func wantErr(err, want error) error {
	got, want2 := status.Convert(err), status.Convert(want)
	if err == nil || got.Code() != want2.Code() || got.Message() != want2.Message() {
		return fmt.Errorf("error %v, want %v", err, want)
	}
	return nil
}

var semanticsCases = []semanticsCase{
	{"grant with a server-chosen ID", func(ctx context.Context, tg leaseTarget) error {
		g, err := grant(ctx, tg, 0, 10)
		if err != nil || g.ID <= 0 || g.TTL != 10 || g.Error != "" {
			return fmt.Errorf("grant = %v, %v; want a positive ID and TTL 10", g, err)
		}
		return nil
	}},
	{"grant with a client-chosen ID, then again", func(ctx context.Context, tg leaseTarget) error {
		g, err := grant(ctx, tg, 0x1234, 10)
		if err != nil || g.ID != 0x1234 || g.TTL != 10 {
			return fmt.Errorf("grant = %v, %v; want ID 0x1234", g, err)
		}
		_, err = grant(ctx, tg, 0x1234, 10)
		return wantErr(err, rpctypes.ErrGRPCLeaseExist)
	}},
	{"TTLs below the minimum are raised to it", func(ctx context.Context, tg leaseTarget) error {
		for _, ttl := range []int64{1, 0, -5} {
			g, err := grant(ctx, tg, 0, ttl)
			if err != nil || g.TTL != 2 {
				return fmt.Errorf("grant TTL %d = %v, %v; want TTL 2 (etcd's minimum)", ttl, g, err)
			}
		}
		return nil
	}},
	{"TTL too large", func(ctx context.Context, tg leaseTarget) error {
		_, err := grant(ctx, tg, 0, 9000000001)
		return wantErr(err, rpctypes.ErrGRPCLeaseTTLTooLarge)
	}},
	{"revoke of an unknown lease", func(ctx context.Context, tg leaseTarget) error {
		_, err := tg.lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: 0x777})
		return wantErr(err, rpctypes.ErrGRPCLeaseNotFound)
	}},
	{"time to live of an unknown lease is -1", func(ctx context.Context, tg leaseTarget) error {
		r, err := tg.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: 0x778, Keys: true})
		if err != nil || r.TTL != -1 || r.ID != 0x778 || r.GrantedTTL != 0 || len(r.Keys) != 0 {
			return fmt.Errorf("time to live = %v, %v; want TTL -1", r, err)
		}
		return nil
	}},
	{"keep-alives of several leases on one stream, one unknown", func(ctx context.Context, tg leaseTarget) error {
		a, err := grant(ctx, tg, 0, 10)
		if err != nil {
			return err
		}
		b, err := grant(ctx, tg, 0, 20)
		if err != nil {
			return err
		}
		stream, err := tg.lease.LeaseKeepAlive(ctx)
		if err != nil {
			return err
		}
		want := []struct{ id, ttl int64 }{{a.ID, 10}, {b.ID, 20}, {0x779, 0}, {a.ID, 10}}
		for _, w := range want {
			if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: w.id}); err != nil {
				return err
			}
		}
		for _, w := range want {
			r, err := stream.Recv()
			if err != nil || r.ID != w.id || r.TTL != w.ttl {
				return fmt.Errorf("keep-alive answer %v, %v; want ID %x TTL %d", r, err, w.id, w.ttl)
			}
		}
		return stream.CloseSend()
	}},
	{"time to live with keys", func(ctx context.Context, tg leaseTarget) error {
		g, err := grant(ctx, tg, 0, 10)
		if err != nil {
			return err
		}
		for _, k := range []string{"ttl/b", "ttl/a"} {
			if err := tg.put(ctx, k, g.ID); err != nil {
				return err
			}
		}
		r, err := tg.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: g.ID, Keys: true})
		if err != nil || r.TTL < 8 || r.TTL > 10 || r.GrantedTTL != 10 || len(r.Keys) != 2 {
			return fmt.Errorf("time to live = %v, %v; want TTL 8..10 of 10 and 2 keys", r, err)
		}
		keys := []string{string(r.Keys[0]), string(r.Keys[1])}
		slices.Sort(keys) // etcd lists them in no order
		if keys[0] != "ttl/a" || keys[1] != "ttl/b" {
			return fmt.Errorf("keys %q", keys)
		}
		if r, err = tg.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: g.ID}); err != nil || len(r.Keys) != 0 {
			return fmt.Errorf("time to live without keys = %v, %v", r, err)
		}
		return nil
	}},
	{"revoke deletes the lease's keys", func(ctx context.Context, tg leaseTarget) error {
		g, err := grant(ctx, tg, 0, 30)
		if err != nil {
			return err
		}
		if err := tg.put(ctx, "revoked/k", g.ID); err != nil {
			return err
		}
		if r, err := tg.lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: g.ID}); err != nil || r.Header == nil || r.Header.Revision == 0 {
			return fmt.Errorf("revoke = %v, %v", r, err)
		}
		if exists, err := tg.get(ctx, "revoked/k"); err != nil || exists {
			return fmt.Errorf("key after revoke: exists %v, %v", exists, err)
		}
		r, err := tg.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: g.ID})
		if err != nil || r.TTL != -1 {
			return fmt.Errorf("time to live after revoke = %v, %v", r, err)
		}
		_, err = tg.lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: g.ID})
		return wantErr(err, rpctypes.ErrGRPCLeaseNotFound)
	}},
	{"put with an unknown lease", func(ctx context.Context, tg leaseTarget) error {
		return wantErr(tg.put(ctx, "nolease", 0x77a), rpctypes.ErrGRPCLeaseNotFound)
	}},
	{"leases are listed soonest to expire first", func(ctx context.Context, tg leaseTarget) error {
		list, err := tg.lease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
		if err != nil {
			return err
		}
		before := len(list.Leases)
		var ids []int64
		for _, ttl := range []int64{300, 100, 200} {
			g, err := grant(ctx, tg, 0, ttl)
			if err != nil {
				return err
			}
			ids = append(ids, g.ID)
		}
		if list, err = tg.lease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{}); err != nil || len(list.Leases) != before+3 {
			return fmt.Errorf("list = %v, %v; want %d leases", list, err, before+3)
		}
		got := list.Leases[len(list.Leases)-3:]
		if got[0].ID != ids[1] || got[1].ID != ids[2] || got[2].ID != ids[0] {
			return fmt.Errorf("last three leases %v, want by expiry %x %x %x", got, ids[1], ids[2], ids[0])
		}
		return nil
	}},
}

// TestLeaseSemantics runs every case against an active keeper.
func TestLeaseSemantics(t *testing.T) {
	env := newTestEnv(t, 1)
	k := env.startKeeper(env.keeperConfig("a"))
	waitActive(t, k, 5*time.Second)
	tg := leaseTarget{lease: env.leaseClient(t, k),
		put: func(ctx context.Context, key string, lease int64) error {
			_, err := env.store.Put(ctx, &pb.PutRequest{Key: []byte(key), Lease: lease})
			return err
		},
		get: func(ctx context.Context, key string) (bool, error) {
			r, err := env.store.Range(ctx, &pb.RangeRequest{Key: []byte(key)})
			return err == nil && len(r.Kvs) == 1, err
		}}
	runSemantics(t, tg)
}

// TestLeaseSemanticsOfEtcd runs the same cases against the real etcd, to show they are etcd's behaviour
// (opt-in: it builds etcd v3.7.3 when it is not cached).
func TestLeaseSemanticsOfEtcd(t *testing.T) {
	if os.Getenv("CAIRN_LEASE_ETCDREF") == "" {
		t.Skip("set CAIRN_LEASE_ETCDREF=1 to run the cases against the real etcd")
	}
	cluster := etcdreftest.StartCluster(t, 1)
	conn, err := grpc.NewClient(trimScheme(cluster.Endpoints()[0]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kv := pb.NewKVClient(conn)
	tg := leaseTarget{lease: pb.NewLeaseClient(conn),
		put: func(ctx context.Context, key string, lease int64) error {
			_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(key), Lease: lease})
			return err
		},
		get: func(ctx context.Context, key string) (bool, error) {
			r, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte(key)})
			return err == nil && len(r.Kvs) == 1, err
		}}
	runSemantics(t, tg)
}

func runSemantics(t *testing.T, tg leaseTarget) {
	for _, tc := range semanticsCases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.run(ctxT(t, 20*time.Second), tg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func trimScheme(endpoint string) string {
	for _, p := range []string{"http://", "https://"} {
		if len(endpoint) > len(p) && endpoint[:len(p)] == p {
			return endpoint[len(p):]
		}
	}
	return endpoint
}
