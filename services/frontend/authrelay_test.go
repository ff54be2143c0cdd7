package frontend_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/frontend"
	"github.com/cairn-kv/cairn/services/leasekeeper"
	"github.com/cairn-kv/cairn/services/watchhub"
)

// TestAuthDirectHubAndKeeperRefused: with auth enabled, a client that reaches a watchhub or a leasekeeper
// directly (not through a frontend) is refused with relayauth.ErrDirectClient, since nothing checks it there;
// through a frontend the same watch and lease calls work, with permissions checked. With auth disabled the
// hub and keeper serve direct clients (benchmarks stream to hubs directly).
func TestAuthDirectHubAndKeeperRefused(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1, Watchhubs: 1, Leasekeepers: 1,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost = 4 }})
	c.ActiveLeasekeeper(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hub := pb.NewWatchClient(rawConn(t, c.WatchhubURLs()[0]))
	keeper := pb.NewLeaseClient(rawConn(t, c.LeasekeeperURLs()[0]))
	directWatch := func(ctx context.Context, key string) error {
		stream, err := hub.Watch(ctx)
		if err != nil {
			return err
		}
		if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
			CreateRequest: &pb.WatchCreateRequest{Key: []byte(key)}}}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		// Send answers io.EOF when the server has already ended the stream; Recv gives its status.
		resp, err := stream.Recv()
		if err == nil && !resp.Created {
			t.Fatalf("direct watch: %v, want created", resp)
		}
		return err
	}
	directGrant := func(ctx context.Context) error {
		_, err := keeper.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
		return err
	}
	if err := directWatch(ctx, "w/a"); err != nil {
		t.Fatalf("direct watch with auth disabled: %v", err)
	}
	if err := directGrant(ctx); err != nil {
		t.Fatalf("direct lease grant with auth disabled: %v", err)
	}

	setup := c.Client(t)
	addRootAndUser(ctx, t, setup, "alice", "alicepw", "reader")
	for _, step := range []func() error{
		func() error {
			_, err := setup.RoleGrantPermission(ctx, "reader", "w/", clientv3.GetPrefixRangeEnd("w/"),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := setup.UserGrantRole(ctx, "alice", "reader"); return err },
		func() error { _, err := setup.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	// The hub and keeper learn that auth is enabled from storage's status, which they poll.
	waittest.Until(t, 5*time.Second, 20*time.Millisecond, "the hub refuses a direct watch", func() bool {
		return errors.Is(directWatch(ctx, "w/a"), relayauth.ErrDirectClient)
	})
	waittest.Until(t, 5*time.Second, 20*time.Millisecond, "the keeper refuses a direct lease grant", func() bool {
		return errors.Is(directGrant(ctx), relayauth.ErrDirectClient)
	})
	withToken := metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, "anything")
	if err := directWatch(withToken, "w/a"); !errors.Is(err, relayauth.ErrDirectClient) {
		t.Fatalf("direct watch with a token: %v, want %v", err, relayauth.ErrDirectClient)
	}
	asFrontend := metadata.AppendToOutgoingContext(ctx, relayauth.MetadataKey, clustertest.RelaySecret)
	if err := directWatch(asFrontend, "w/a"); err != nil {
		t.Fatalf("direct watch with the relay secret: %v", err)
	}

	alice := authClient(t, c, "alice", "alicepw")
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	allowed := alice.Watch(wctx, "w/a", clientv3.WithCreatedNotify())
	if resp := <-allowed; !resp.Created || resp.Canceled {
		t.Fatalf("watch through the frontend on a readable key: %+v", resp)
	}
	if resp := <-alice.Watch(wctx, "x", clientv3.WithCreatedNotify()); !resp.Canceled ||
		status.Convert(resp.Err()).Message() != rpctypes.ErrGRPCPermissionDenied.Error() {
		t.Fatalf("watch through the frontend on an unreadable key: %+v (err %v), want permission denied", resp, resp.Err())
	}
	lease, err := alice.Grant(ctx, 60)
	if err != nil {
		t.Fatalf("lease grant through the frontend: %v", err)
	}
	if _, err := alice.Put(ctx, "w/a", "v", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if resp := <-allowed; len(resp.Events) != 1 || string(resp.Events[0].Kv.Key) != "w/a" {
		t.Fatalf("event through the frontend: %+v", resp)
	}
	if _, err := alice.KeepAliveOnce(ctx, lease.ID); err != nil {
		t.Fatalf("keep-alive through the frontend: %v", err)
	}
}

// TestAuthRelaySecretFile: frontends, hubs and keepers given the relay secret as a file (--relay-secret-file,
// as the compose stack and `cairn up` run them) agree on it: with auth enabled, root's watch and lease through a
// frontend work, and a direct client is still refused.
func TestAuthRelaySecretFile(t *testing.T) {
	secretFile := relayauth.SecretFile(t.TempDir())
	if err := relayauth.LoadOrCreateSecretFile(secretFile); err != nil {
		t.Fatal(err)
	}
	c := clustertest.Start(t, clustertest.Options{Members: 1, Watchhubs: 1, Leasekeepers: 1,
		ConfigureFrontend: func(cfg *frontend.Config) {
			cfg.BcryptCost, cfg.RelaySecret, cfg.RelaySecretFile = 4, "", secretFile
		},
		ConfigureWatchhub:    func(cfg *watchhub.Config) { cfg.RelaySecret, cfg.RelaySecretFile = "", secretFile },
		ConfigureLeasekeeper: func(cfg *leasekeeper.Config) { cfg.RelaySecret, cfg.RelaySecretFile = "", secretFile },
	})
	c.ActiveLeasekeeper(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	setup := c.Client(t)
	for _, step := range []func() error{
		func() error { _, err := setup.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := setup.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := setup.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	keeper := pb.NewLeaseClient(rawConn(t, c.LeasekeeperURLs()[0]))
	waittest.Until(t, 5*time.Second, 20*time.Millisecond, "the keeper refuses a direct lease grant", func() bool {
		_, err := keeper.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
		return errors.Is(err, relayauth.ErrDirectClient)
	})

	root := authClient(t, c, "root", "rootpw")
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watch := root.Watch(wctx, "k", clientv3.WithCreatedNotify())
	if resp := <-watch; !resp.Created || resp.Canceled {
		t.Fatalf("root's watch through the frontend: %+v (err %v)", resp, resp.Err())
	}
	lease, err := root.Grant(ctx, 60)
	if err != nil {
		t.Fatalf("root's lease grant through the frontend: %v", err)
	}
	if _, err := root.Put(ctx, "k", "v", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if resp := <-watch; len(resp.Events) != 1 || string(resp.Events[0].Kv.Value) != "v" {
		t.Fatalf("event through the frontend: %+v (err %v)", resp, resp.Err())
	}
}
