package frontend_test

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/frontend"
)

// TestAuthReadAfterRevokeElsewhere: a read permission revoked through one frontend is enforced at once by
// another frontend's linearizable reads (Range, read-only Txn, RangeStream), though that frontend learns of
// the change only later by probing: storage refuses a read checked against an older auth store after its
// read barrier, and the frontend checks it again. Every iteration, no waiting.
func TestAuthReadAfterRevokeElsewhere(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Frontends: 2,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost = 4 }})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	setup := c.Client(t, c.Endpoints()[0])
	addRootAndUser(ctx, t, setup, "alice", "alicepw", "reader")
	for _, step := range []func() error{
		func() error { _, err := setup.UserGrantRole(ctx, "alice", "reader"); return err },
		func() error { _, err := setup.Put(ctx, "fence/k", "v"); return err },
		func() error { _, err := setup.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	admin := authClient(t, c, "root", "rootpw", c.Endpoints()[0])
	alice := authClient(t, c, "alice", "alicepw", c.Endpoints()[1]) // reads only through frontend 1
	reads := []struct {
		name string
		read func() error
	}{
		{"range", func() error { _, err := alice.Get(ctx, "fence/k"); return err }},
		{"read-only txn", func() error {
			_, err := alice.Txn(ctx).If(clientv3.Compare(clientv3.Version("fence/k"), ">", 0)).
				Then(clientv3.OpGet("fence/k")).Commit()
			return err
		}},
		{"range stream", func() error {
			stream, err := pb.NewKVClient(alice.ActiveConnection()).RangeStream(ctx, &pb.RangeRequest{Key: []byte("fence/k")})
			if err == nil {
				_, err = stream.Recv()
			}
			return err
		}},
	}
	for _, r := range reads {
		t.Run(r.name, func(t *testing.T) {
			for i := range 10 {
				if _, err := admin.RoleGrantPermission(ctx, "reader", "fence/", clientv3.GetPrefixRangeEnd("fence/"),
					clientv3.PermissionType(clientv3.PermRead)); err != nil {
					t.Fatal(err)
				}
				if err := r.read(); err != nil {
					t.Fatalf("iteration %d: read with the permission granted: %v", i, err)
				}
				if _, err := admin.RoleRevokePermission(ctx, "reader", "fence/", clientv3.GetPrefixRangeEnd("fence/")); err != nil {
					t.Fatal(err)
				}
				if err := r.read(); !errors.Is(rpctypes.Error(err), rpctypes.ErrPermissionDenied) {
					t.Fatalf("iteration %d: read right after the revoke through another frontend: %v, want %v",
						i, err, rpctypes.ErrPermissionDenied)
				}
			}
		})
	}
}

// TestAuthAfterEnableElsewhere: auth enabled through one frontend is enforced at once by another frontend,
// for reads and writes, though its copy still says disabled: storage refuses a read checked against a
// disabled copy, and an anonymous write, once auth is enabled, so the auth-off path needs no check of its own.
func TestAuthAfterEnableElsewhere(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Frontends: 2,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost = 4 }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	enabler := c.Client(t, c.Endpoints()[0])
	anonymous := c.Client(t, c.Endpoints()[1])
	if _, err := enabler.UserAdd(ctx, "root", "rootpw"); err != nil {
		t.Fatal(err)
	}
	if _, err := enabler.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	admin := authClient(t, c, "root", "rootpw", c.Endpoints()[0])
	for i := range 10 {
		// A disable is learnt by probing (a copy that still says enabled is stricter, not weaker).
		waittest.Until(t, 5*time.Second, 10*time.Millisecond, "frontend 1 knows auth is disabled", func() bool {
			_, err := anonymous.Get(ctx, "k")
			return err == nil
		})
		if _, err := enabler.AuthEnable(ctx); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := anonymous.Get(ctx, "k"); !errors.Is(rpctypes.Error(err), rpctypes.ErrUserEmpty) {
				t.Fatalf("iteration %d: anonymous read right after auth enable through another frontend: %v, want %v",
					i, err, rpctypes.ErrUserEmpty)
			}
		} else {
			if _, err := anonymous.Put(ctx, "k", "v"); !errors.Is(rpctypes.Error(err), rpctypes.ErrUserEmpty) {
				t.Fatalf("iteration %d: anonymous write right after auth enable through another frontend: %v, want %v",
					i, err, rpctypes.ErrUserEmpty)
			}
		}
		if _, err := admin.AuthDisable(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
