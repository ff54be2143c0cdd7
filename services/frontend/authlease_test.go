package frontend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/frontend"
)

// TestAuthLeaseAfterChangeElsewhere: a lease grant or revoke is proposed by the leasekeeper, not by the
// frontend that checked it, and it is fenced all the same: an auth enable, or a permission revoke, made through
// one frontend holds at once for lease calls through another frontend, though that frontend learns of the
// change only later by probing. The frontend sends the fence it checked the call at, the keeper copies it into
// its entry's header, storage refuses a stale one with ErrAuthOldRevision and the frontend checks the call
// again against a fresh copy. Every iteration, no waiting.
func TestAuthLeaseAfterChangeElsewhere(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Frontends: 2, Leasekeepers: 1,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost = 4 }})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	setup := c.Client(t, c.Endpoints()[0])
	addRootAndUser(ctx, t, setup, "alice", "alicepw", "leaser")
	for _, step := range []func() error{
		func() error { _, err := setup.UserGrantRole(ctx, "alice", "leaser"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	admin := authClient(t, c, "root", "rootpw", c.Endpoints()[0])

	t.Run("anonymous after auth enable", func(t *testing.T) {
		anonymous := c.Client(t, c.Endpoints()[1])
		for i := range 10 {
			// A disable is learnt by probing (a copy that still says enabled is stricter, not weaker).
			var lease *clientv3.LeaseGrantResponse
			waittest.Until(t, 5*time.Second, 10*time.Millisecond, "frontend 1 knows auth is disabled", func() bool {
				var err error
				lease, err = anonymous.Grant(ctx, 60)
				return err == nil
			})
			if _, err := setup.AuthEnable(ctx); err != nil {
				t.Fatal(err)
			}
			what, call := "grant", func() error { _, err := anonymous.Grant(ctx, 60); return err }
			if i%2 == 1 {
				what, call = "revoke", func() error { _, err := anonymous.Revoke(ctx, lease.ID); return err }
			}
			if err := call(); !errors.Is(rpctypes.Error(err), rpctypes.ErrUserEmpty) {
				t.Fatalf("iteration %d: anonymous lease %s right after auth enable through another frontend: %v, want %v",
					i, what, err, rpctypes.ErrUserEmpty)
			}
			if _, err := admin.AuthDisable(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("revoke after permission revoke", func(t *testing.T) {
		if _, err := setup.AuthEnable(ctx); err != nil {
			t.Fatal(err)
		}
		alice := authClient(t, c, "alice", "alicepw", c.Endpoints()[1]) // only through frontend 1
		for i := range 10 {
			if _, err := admin.RoleGrantPermission(ctx, "leaser", "lease/", clientv3.GetPrefixRangeEnd("lease/"),
				clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
				t.Fatal(err)
			}
			lease, err := alice.Grant(ctx, 60)
			if err != nil {
				t.Fatalf("iteration %d: grant: %v", i, err)
			}
			if _, err := alice.Put(ctx, "lease/k", "v", clientv3.WithLease(lease.ID)); err != nil {
				t.Fatalf("iteration %d: put with the lease, permission granted: %v", i, err)
			}
			if _, err := admin.RoleRevokePermission(ctx, "leaser", "lease/", clientv3.GetPrefixRangeEnd("lease/")); err != nil {
				t.Fatal(err)
			}
			// etcd's checkLeasePuts: revoking a lease needs write on every key attached to it.
			if _, err := alice.Revoke(ctx, lease.ID); !errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) {
				t.Fatalf("iteration %d: lease revoke right after the permission revoke through another frontend: %v, want %v",
					i, err, rpctypes.ErrPermissionDenied)
			}
			if _, err := admin.Revoke(ctx, lease.ID); err != nil {
				t.Fatalf("iteration %d: root's revoke: %v", i, err)
			}
		}
	})
}

// TestAuthLeaseKeepAliveNeedsWrite: a keep-alive is etcd's checkLeaseRenew: root may renew any lease, anyone
// else a lease only while they may write every key attached to it (a lease with no keys is anyone's). A
// refusal is etcd's ErrGRPCPermissionDenied and ends the keep-alive stream, as etcd's LeaseServer returns the
// error from the stream's handler. TestAuthEtcdctlMatchesEtcd diffs the same answers against etcd v3.7.3.
func TestAuthLeaseKeepAliveNeedsWrite(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Leasekeepers: 1,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost = 4 }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setup := c.Client(t, c.Endpoints()[0])
	addRootAndUser(ctx, t, setup, "alice", "alicepw", "leaser")
	for _, step := range []func() error{
		func() error {
			_, err := setup.RoleGrantPermission(ctx, "leaser", "lease/", clientv3.GetPrefixRangeEnd("lease/"),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error {
			_, err := setup.RoleGrantPermission(ctx, "leaser", "ro", "", clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := setup.UserGrantRole(ctx, "alice", "leaser"); return err },
		func() error { _, err := setup.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	c.ActiveLeasekeeper(10 * time.Second)
	admin := authClient(t, c, "root", "rootpw")
	alice := authClient(t, c, "alice", "alicepw")
	// grant grants alice a lease and attaches keys, in order: a put with a lease needs write on the lease's
	// keys too (etcd's checkLeasePuts), so alice's keys go first.
	type attach struct {
		key string
		as  *clientv3.Client
	}
	grant := func(keys ...attach) clientv3.LeaseID {
		t.Helper()
		lease, err := alice.Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if _, err := k.as.Put(ctx, k.key, "v", clientv3.WithLease(lease.ID)); err != nil {
				t.Fatalf("put %s with the lease: %v", k.key, err)
			}
		}
		return lease.ID
	}
	noKeys := grant()
	writable := grant(attach{"lease/a", alice}, attach{"lease/b", alice})
	readOnly := grant(attach{"lease/c", alice}, attach{"ro", admin})
	gone := grant()
	if _, err := alice.Revoke(ctx, gone); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		as    *clientv3.Client
		lease clientv3.LeaseID
		want  error
	}{
		{"no keys", alice, noKeys, nil},
		{"every key writable", alice, writable, nil},
		{"a key only readable", alice, readOnly, rpctypes.ErrGRPCPermissionDenied},
		{"root, a key only readable", admin, readOnly, nil},
		{"revoked", alice, gone, rpctypes.ErrGRPCLeaseNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.as.KeepAliveOnce(ctx, tc.lease)
			wantStatus(t, "keep-alive once", err, tc.want)
		})
	}

	// etcd reads the request before it refuses it: a stream refused as it opens would race the client's first
	// Send, which then fails with a bare EOF (client/v3's KeepAliveOnce returns it as is).
	// The first stream of a new connection loses that race most often.
	t.Run("anonymous, every time", func(t *testing.T) {
		for i := range 300 {
			anonymous, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints()[:1], DialTimeout: 5 * time.Second,
				Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			_, err = anonymous.KeepAliveOnce(ctx, noKeys)
			_ = anonymous.Close()
			if !errors.Is(rpctypes.Error(err), rpctypes.ErrUserEmpty) {
				t.Fatalf("anonymous keep-alive %d: %v, want %v", i, err, rpctypes.ErrUserEmpty)
			}
		}
	})

	t.Run("a refusal ends the stream", func(t *testing.T) {
		conn := rawConn(t, c.Endpoints()[0])
		login, err := pb.NewAuthClient(conn).Authenticate(ctx, &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
		if err != nil {
			t.Fatal(err)
		}
		stream, err := pb.NewLeaseClient(conn).LeaseKeepAlive(metadata.AppendToOutgoingContext(ctx, "token", login.Token))
		if err != nil {
			t.Fatal(err)
		}
		for _, lease := range []clientv3.LeaseID{writable, readOnly} {
			if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(lease)}); err != nil {
				t.Fatal(err)
			}
		}
		if resp, err := stream.Recv(); err != nil || resp.ID != int64(writable) || resp.TTL <= 0 {
			t.Fatalf("keep-alive of the writable lease: %v, %v", resp, err)
		}
		_, err = stream.Recv()
		wantStatus(t, "keep-alive of the read-only lease on the same stream", err, rpctypes.ErrGRPCPermissionDenied)
	})
}
