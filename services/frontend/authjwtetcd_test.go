package frontend_test

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
	"github.com/cairn-kv/cairn/services/frontend"
)

// jwtServer is one of the two servers TestAuthJWTMatchesEtcd compares, with root's token from it.
type jwtServer struct {
	name  string
	auth  pb.AuthClient
	kv    pb.KVClient
	token string
}

// rangeWith reads one key with token and says how it went.
func (s jwtServer) rangeWith(ctx context.Context, token string) string {
	_, err := s.kv.Range(metadata.AppendToOutgoingContext(ctx, "token", token), &pb.RangeRequest{Key: []byte("k")})
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// TestAuthJWTMatchesEtcd: real etcd v3.7.3 and Cairn with the same --auth-token jwt keys and ttl each accept
// the other's token (etcd's claims and signature), and answer a malformed, a forged and an expired token with
// the same error.
func TestAuthJWTMatchesEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real etcd and a Cairn cluster")
	}
	priv, pub := certtest.WriteJWTKeys(t)
	option := "jwt,pub-key=" + pub + ",priv-key=" + priv + ",sign-method=ES256,ttl=3s"
	ref := etcdreftest.StartCluster(t, 1, "--auth-token="+option, "--bcrypt-cost=4")
	c := clustertest.Start(t, clustertest.Options{Members: 1,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost, cfg.AuthToken = 4, option }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	servers := []*jwtServer{{name: "etcd"}, {name: "cairn"}}
	for i, endpoint := range []string{ref.Endpoints()[0], c.Endpoints()[0]} {
		conn := rawConn(t, endpoint)
		auth := pb.NewAuthClient(conn)
		for _, step := range []func() error{
			func() error {
				_, err := auth.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"})
				return err
			},
			func() error {
				_, err := auth.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})
				return err
			},
			func() error { _, err := auth.AuthEnable(ctx, &pb.AuthEnableRequest{}); return err },
		} {
			if err := step(); err != nil {
				t.Fatalf("%s: %v", servers[i].name, err)
			}
		}
		servers[i].auth, servers[i].kv = auth, pb.NewKVClient(conn)
	}
	// Both logins last, so that both tokens are well within their TTL for the first answers.
	for _, s := range servers {
		login, err := s.auth.Authenticate(ctx, &pb.AuthenticateRequest{Name: "root", Password: "rootpw"})
		if err != nil {
			t.Fatalf("%s: authenticate: %v", s.name, err)
		}
		s.token = login.Token
	}

	answers := func(s, other *jwtServer) []string {
		forged := []byte(s.token)
		forged[len(forged)-2] ^= 1 // a bit of the signature
		return []string{
			"own token: " + s.rangeWith(ctx, s.token),
			"the other server's token: " + s.rangeWith(ctx, other.token),
			"malformed: " + s.rangeWith(ctx, "not.a.jwt"),
			"forged signature: " + s.rangeWith(ctx, string(forged)),
		}
	}
	etcd, cairn := servers[0], servers[1]
	want, got := answers(etcd, cairn), answers(cairn, etcd)
	// A JWT does not live longer for being used, so polling does not keep it alive.
	var expired [2]string
	for i, s := range servers {
		waittest.Until(t, 10*time.Second, 250*time.Millisecond, s.name+" refuses root's expired token", func() bool {
			expired[i] = s.rangeWith(ctx, s.token)
			return expired[i] != "ok"
		})
	}
	want, got = append(want, "expired: "+expired[0]), append(got, "expired: "+expired[1])
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("etcd:  %s\ncairn: %s", want[i], got[i])
		} else if testing.Verbose() {
			t.Log(want[i])
		}
	}
}
