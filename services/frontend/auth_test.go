package frontend_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-kv/cairn/api/v3lockpb"
	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
	"github.com/cairn-kv/cairn/services/frontend"
)

// authClient is a client/v3 client of the cluster logged in as user (client/v3 authenticates at dial and
// again when its token is refused as old).
func authClient(t *testing.T, c *clustertest.Cluster, user, password string, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: user, Password: password})
	if err != nil {
		t.Fatalf("client as %q: %v", user, err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// TestAuthRBAC: users and roles through one frontend, auth enabled, then every frontend checks keys, ranges,
// prefixes, txns, watches, leases and root-only calls as etcd does; an auth change makes old tokens stale
// (client/v3 logs in again), and auth disable restores anonymous access.
func TestAuthRBAC(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 3, Frontends: 2, Leasekeepers: 1, Watchhubs: 1,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost = 4 }})
	c.ActiveLeasekeeper(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := c.Client(t, c.Endpoints()[0])
	mustOK := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	mustErr := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: err %v, want %v", what, err, want)
		}
	}
	_, err := admin.AuthEnable(ctx)
	mustErr("enable without root", err, rpctypes.ErrRootUserNotExist)
	_, err = admin.UserAdd(ctx, "root", "rootpw")
	mustOK("add root", err)
	_, err = admin.UserAdd(ctx, "root", "x")
	mustErr("add root again", err, rpctypes.ErrUserAlreadyExist)
	_, err = admin.UserAdd(ctx, "", "x")
	mustErr("add empty user", err, rpctypes.ErrUserEmpty)
	_, err = admin.AuthEnable(ctx)
	mustErr("enable without root role", err, rpctypes.ErrRootRoleNotExist)
	_, err = admin.UserGrantRole(ctx, "root", "root")
	mustOK("grant root", err)
	_, err = admin.RoleAdd(ctx, "reader")
	mustOK("add role", err)
	_, err = admin.RoleGrantPermission(ctx, "reader", "app/", clientv3.GetPrefixRangeEnd("app/"), clientv3.PermissionType(clientv3.PermRead))
	mustOK("grant prefix read", err)
	_, err = admin.RoleGrantPermission(ctx, "reader", "app/mine", "", clientv3.PermissionType(clientv3.PermReadWrite))
	mustOK("grant key readwrite", err)
	_, err = admin.UserAdd(ctx, "alice", "alicepw")
	mustOK("add alice", err)
	_, err = admin.UserGrantRole(ctx, "alice", "reader")
	mustOK("grant reader", err)
	_, err = admin.Put(ctx, "app/x", "1")
	mustOK("put before enable", err)
	_, err = admin.AuthEnable(ctx)
	mustOK("enable", err)

	_, err = admin.Get(ctx, "app/x")
	mustErr("anonymous get", err, rpctypes.ErrUserEmpty)
	if _, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		Logger: zap.NewNop(), Username: "alice", Password: "wrong"}); !errors.Is(err, rpctypes.ErrAuthFailed) {
		t.Fatalf("wrong password: %v, want ErrAuthFailed", err)
	}

	root := authClient(t, c, "root", "rootpw", c.Endpoints()[0])
	alice := authClient(t, c, "alice", "alicepw", c.Endpoints()[1]) // another frontend than root's
	resp, err := alice.Get(ctx, "app/", clientv3.WithPrefix())
	mustOK("alice reads the prefix", err)
	if len(resp.Kvs) != 1 {
		t.Fatalf("alice's prefix read = %v", resp.Kvs)
	}
	_, err = alice.Put(ctx, "app/x", "2")
	mustErr("alice writes a read-only key", err, rpctypes.ErrPermissionDenied)
	_, err = alice.Put(ctx, "app/mine", "2")
	mustOK("alice writes her key", err)
	_, err = alice.Get(ctx, "other")
	mustErr("alice reads outside", err, rpctypes.ErrPermissionDenied)
	_, err = alice.Get(ctx, "", clientv3.WithFromKey())
	mustErr("alice reads everything", err, rpctypes.ErrPermissionDenied)
	_, err = alice.Txn(ctx).If(clientv3.Compare(clientv3.Value("app/x"), "=", "1")).
		Then(clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("other", "v")}, nil)).Commit()
	mustErr("alice's nested txn put outside", err, rpctypes.ErrPermissionDenied)
	_, err = alice.Txn(ctx).If(clientv3.Compare(clientv3.Value("app/x"), "=", "1")).
		Then(clientv3.OpPut("app/mine", "3")).Commit()
	mustOK("alice's txn", err)
	_, err = alice.Compact(ctx, 1)
	mustErr("alice compacts", err, rpctypes.ErrPermissionDenied)
	_, err = alice.MemberAdd(ctx, []string{"http://127.0.0.1:1"})
	mustErr("alice adds a member", err, rpctypes.ErrPermissionDenied)
	_, err = alice.Defragment(ctx, c.Endpoints()[1])
	mustErr("alice defragments", err, rpctypes.ErrPermissionDenied)
	_, err = alice.UserList(ctx)
	mustErr("alice lists users", err, rpctypes.ErrPermissionDenied)
	if _, err := alice.UserGet(ctx, "alice"); err != nil {
		t.Fatalf("alice gets herself: %v", err)
	}
	_, err = root.Compact(ctx, 1)
	mustOK("root compacts", err)

	// A watch on a range alice may not read is refused as etcd refuses it; one she may read works.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	denied := alice.Watch(wctx, "other")
	if w, ok := <-denied; ok && !w.Canceled {
		t.Fatalf("watch on a denied key: %+v, want canceled", w)
	}
	allowed := alice.Watch(wctx, "app/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	// The put waits for the created response: one applied before the hub creates the watch is not its event.
	if w := <-allowed; !w.Created || w.Canceled {
		t.Fatalf("alice's watch on app/: %+v (err %v), want created", w, w.Err())
	}
	_, err = root.Put(ctx, "app/y", "v")
	mustOK("root puts", err)
	select {
	case w := <-allowed:
		if w.Err() != nil || len(w.Events) != 1 || string(w.Events[0].Kv.Key) != "app/y" {
			t.Fatalf("alice's watch = %+v, %v", w, w.Err())
		}
	case <-ctx.Done():
		t.Fatal("alice's watch saw nothing")
	}

	// Revoking a lease needs write on its keys.
	lease, err := root.Grant(ctx, 60)
	mustOK("root grants", err)
	_, err = root.Put(ctx, "app/x", "leased", clientv3.WithLease(lease.ID))
	mustOK("root attaches", err)
	_, err = alice.Revoke(ctx, lease.ID)
	mustErr("alice revokes a lease on app/x", err, rpctypes.ErrPermissionDenied)
	// Its time to live needs read on its keys only when they are asked for (etcd's checkLeaseTimeToLive).
	secret, err := root.Grant(ctx, 60)
	mustOK("root grants", err)
	_, err = root.Put(ctx, "secret/x", "leased", clientv3.WithLease(secret.ID))
	mustOK("root attaches", err)
	_, err = alice.TimeToLive(ctx, secret.ID)
	mustOK("alice asks the TTL of a lease on secret/x", err)
	_, err = alice.TimeToLive(ctx, secret.ID, clientv3.WithAttachedKeys())
	mustErr("alice asks the keys of a lease on secret/x", err, rpctypes.ErrPermissionDenied)

	// An auth change makes every token old: client/v3 logs in again and goes on.
	_, err = root.RoleGrantPermission(ctx, "reader", "other", "", clientv3.PermissionType(clientv3.PermRead))
	mustOK("grant other", err)
	_, err = alice.Get(ctx, "other")
	mustOK("alice reads other after the grant", err)

	_, err = root.UserRevokeRole(ctx, "root", "root")
	mustErr("revoke root's root role", err, rpctypes.ErrInvalidAuthMgmt)
	_, err = root.AuthDisable(ctx)
	mustOK("disable", err)
	_, err = admin.Get(ctx, "other")
	mustOK("anonymous get after disable", err)
}

// TestAuthJWTGatewayAndRecipes: with --auth-token jwt a token from one frontend is accepted by another, on
// gRPC and on the JSON gateway (Authorization header); Lock runs as its caller (allowed on a prefix the
// caller may write, refused elsewhere); a forged token is refused.
func TestAuthJWTGatewayAndRecipes(t *testing.T) {
	priv, pub := certtest.WriteJWTKeys(t)
	c := clustertest.Start(t, clustertest.Options{Members: 1, Frontends: 2, Leasekeepers: 1, Watchhubs: 1,
		ConfigureFrontend: func(cfg *frontend.Config) {
			cfg.BcryptCost = 4
			cfg.AuthToken = "jwt,pub-key=" + pub + ",priv-key=" + priv + ",sign-method=ES256"
		}})
	c.ActiveLeasekeeper(10 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := c.Client(t)
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "locker"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "locker", "locks/", clientv3.GetPrefixRangeEnd("locks/"),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "bob", "bobpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "bob", "locker"); return err },
		func() error { _, err := admin.Put(ctx, "locks/x", "v"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}

	// Frontend 1 learns that auth is on within a probe interval (as a lagging etcd member applies the enable
	// late); until then it serves as before.
	kv1 := pb.NewKVClient(rawConn(t, c.Endpoints()[1]))
	waittest.Until(t, 5*time.Second, 10*time.Millisecond, "frontend 1 knows auth is enabled", func() bool {
		_, err := kv1.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
		return errors.Is(err, rpctypes.ErrGRPCUserEmpty)
	})

	// Authenticate on frontend 0's gateway, use the token on frontend 1's gateway.
	token := gatewayPost(t, c.Endpoints()[0]+"/v3/auth/authenticate", "", `{"name":"bob","password":"bobpw"}`)["token"].(string)
	key := base64.StdEncoding.EncodeToString([]byte("locks/x"))
	got := gatewayPost(t, c.Endpoints()[1]+"/v3/kv/range", token, `{"key":"`+key+`"}`)
	if kvs, _ := got["kvs"].([]any); len(kvs) != 1 {
		t.Fatalf("range with bob's token on the other frontend = %v", got)
	}
	denied := gatewayPost(t, c.Endpoints()[1]+"/v3/kv/range", token,
		`{"key":"`+base64.StdEncoding.EncodeToString([]byte("other"))+`"}`)
	if !strings.Contains(fmt.Sprint(denied["message"]), "permission denied") {
		t.Fatalf("range outside bob's prefix = %v, want permission denied", denied)
	}
	forged := gatewayPost(t, c.Endpoints()[1]+"/v3/kv/range", token[:len(token)-4]+"AAAA", `{"key":"`+key+`"}`)
	if !strings.Contains(fmt.Sprint(forged["message"]), "invalid auth token") {
		t.Fatalf("range with a forged token = %v, want invalid auth token", forged)
	}

	bob := authClient(t, c, "bob", "bobpw", c.Endpoints()[1])
	lease, err := bob.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	locks := v3lockpb.NewLockClient(bob.ActiveConnection())
	if _, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("locks/a"), Lease: int64(lease.ID)}); err != nil {
		t.Fatalf("bob locks under locks/: %v", err)
	}
	if _, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("elsewhere"), Lease: int64(lease.ID)}); err == nil ||
		!strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("bob locks elsewhere: %v, want permission denied", err)
	}
}

// gatewayPost posts body to a /v3 gateway URL (with token in Authorization, when set) and decodes the JSON
// answer, whatever its status.
func gatewayPost(t *testing.T, url, token, body string) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s: decode: %v", url, err)
	}
	return out
}

// TestAuthClientCertCommonName: with --client-cert-auth and auth enabled, a request without a token is the
// user its certificate's common name names ("client" here), as in etcd; Lock runs as that user too.
func TestAuthClientCertCommonName(t *testing.T) {
	certs := certtest.Write(t)
	c := clustertest.Start(t, clustertest.Options{Members: 1, Leasekeepers: 1, Watchhubs: 1,
		ConfigureFrontend: func(cfg *frontend.Config) { clustertest.ServeHTTPS(certs)(cfg); cfg.BcryptCost = 4 },
		ClientTLS:         certs.ClientTLS(t, certs.ClientCert, certs.ClientKey)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := c.Client(t)
	addRootAndUser(ctx, t, cli, "client", "pw", "tls")
	for _, step := range []func() error{
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "tls", "tls/", clientv3.GetPrefixRangeEnd("tls/"),
				clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserGrantRole(ctx, "client", "tls"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, "tls/a", "v"); err != nil {
		t.Fatalf("put as the certificate's user: %v", err)
	}
	if _, err := cli.Put(ctx, "other", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("put outside the certificate user's prefix: %v, want permission denied", err)
	}
	c.ActiveLeasekeeper(10 * time.Second)
	locks := v3lockpb.NewLockClient(cli.ActiveConnection())
	if _, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("tls/lock")}); err != nil {
		t.Fatalf("lock as the certificate's user: %v", err)
	}
	if _, err := locks.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("other/lock")}); err == nil ||
		!strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("lock outside the certificate user's prefix: %v, want permission denied", err)
	}
}

// TestAuthSimpleTokenExpires: a simple token unused for --auth-token-ttl seconds is refused with etcd's
// ErrInvalidAuthToken; a wrong password changes nothing.
func TestAuthSimpleTokenExpires(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost, cfg.AuthTokenTTL = 4, 1 }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	auth := pb.NewAuthClient(rawConn(t, c.Endpoints()[0]))
	kv := pb.NewKVClient(rawConn(t, c.Endpoints()[0]))
	for _, step := range []func() error{
		func() error {
			_, err := auth.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: "pw"})
			return err
		},
		func() error {
			_, err := auth.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})
			return err
		},
		func() error { _, err := auth.AuthEnable(ctx, &pb.AuthEnableRequest{}); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	before, err := auth.AuthStatus(ctx, &pb.AuthStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Authenticate(ctx, &pb.AuthenticateRequest{Name: "root", Password: "guess"}); !errors.Is(err, rpctypes.ErrGRPCAuthFailed) {
		t.Fatalf("wrong password: %v, want ErrGRPCAuthFailed", err)
	}
	resp, err := auth.Authenticate(ctx, &pb.AuthenticateRequest{Name: "root", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	withToken := metadata.AppendToOutgoingContext(ctx, "token", resp.Token)
	if _, err := kv.Range(withToken, &pb.RangeRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("range with a fresh token: %v", err)
	}
	if after, err := auth.AuthStatus(withToken, &pb.AuthStatusRequest{}); err != nil || after.AuthRevision != before.AuthRevision {
		t.Fatalf("auth revision after a failed and a good login = %v, %v; want %d (nothing changed)", after, err, before.AuthRevision)
	}
	// Each use renews the token, so look less often than its TTL.
	waittest.Until(t, 10*time.Second, 1500*time.Millisecond, "the token expires", func() bool {
		_, err := kv.Range(withToken, &pb.RangeRequest{Key: []byte("k")})
		return errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken)
	})
}

// TestAuthSimpleTokenAcrossFrontends: a simple token issued by one frontend is accepted by another (every
// storage records the tokens of the Authenticate entries it applies, as etcd's members do), and no longer once
// its user is deleted.
func TestAuthSimpleTokenAcrossFrontends(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 3, Frontends: 2,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost = 4 }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	auth0 := pb.NewAuthClient(rawConn(t, c.Endpoints()[0]))
	kv1 := pb.NewKVClient(rawConn(t, c.Endpoints()[1]))
	for _, req := range []*pb.AuthUserAddRequest{{Name: "root", Password: "pw"}, {Name: "carol", Password: "pw"}} {
		if _, err := auth0.UserAdd(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := auth0.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}); err != nil {
		t.Fatal(err)
	}
	if _, err := auth0.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "carol", Role: "root"}); err != nil {
		t.Fatal(err)
	}
	if _, err := auth0.AuthEnable(ctx, &pb.AuthEnableRequest{}); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 5*time.Second, 10*time.Millisecond, "frontend 1 knows auth is enabled", func() bool {
		_, err := kv1.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
		return errors.Is(err, rpctypes.ErrGRPCUserEmpty)
	})
	login := func(name string) context.Context {
		resp, err := auth0.Authenticate(ctx, &pb.AuthenticateRequest{Name: name, Password: "pw"})
		if err != nil {
			t.Fatal(err)
		}
		return metadata.AppendToOutgoingContext(ctx, "token", resp.Token)
	}
	asRoot, asCarol := login("root"), login("carol")
	if _, err := kv1.Put(asCarol, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("frontend 1 with frontend 0's token: %v", err)
	}
	if _, err := auth0.UserDelete(asRoot, &pb.AuthUserDeleteRequest{Name: "carol"}); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 5*time.Second, 10*time.Millisecond, "frontend 1 refuses the deleted user's token", func() bool {
		_, err := kv1.Range(asCarol, &pb.RangeRequest{Key: []byte("k")})
		return errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken)
	})
	fresh := login("root")
	if _, err := kv1.Range(metadata.AppendToOutgoingContext(ctx, "token", "forged.1"), &pb.RangeRequest{Key: []byte("k")}); !errors.Is(err, rpctypes.ErrGRPCInvalidAuthToken) {
		t.Fatalf("forged simple token: %v, want ErrGRPCInvalidAuthToken", err)
	}
	if _, err := kv1.Range(fresh, &pb.RangeRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("root's new token on frontend 1: %v", err)
	}
}

// addRootAndUser makes what every auth test starts from: root (password rootpw) with the root role, and user
// (with password) and an empty role, not yet granted to each other.
func addRootAndUser(ctx context.Context, t testing.TB, cli *clientv3.Client, user, password, role string) {
	t.Helper()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, user, password); return err },
		func() error { _, err := cli.RoleAdd(ctx, role); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}
