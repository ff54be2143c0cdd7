package leasekeeper

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestPeersAsk: what the peers say of the holder. A SERVING answer vouches for it; a NOT_SERVING one (the
// holder, lapsed) or a peer that cannot be asked leaves it unseen; it is gone when every peer is another keeper
// or refuses the connection.
func TestPeersAsk(t *testing.T) {
	const holder = "lk-holder"
	tests := []struct {
		name  string
		peers []string // "serving", "lapsed": the holder in that state; "other": another keeper; "refused": nothing listens; "silent": accepts and never answers
		want  sighting
	}{
		{"the holder serving", []string{"refused", "other", "serving"}, holderServing},
		{"the holder lapsed", []string{"refused", "lapsed"}, holderUnseen},
		{"other keepers, one address refused", []string{"other", "refused"}, holderGone},
		{"other keepers only (the holder's address taken by a restarted keeper)", []string{"other", "other"}, holderGone},
		{"a peer that does not answer", []string{"refused", "silent"}, holderUnseen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var urls []string
			for _, kind := range tt.peers {
				urls = append(urls, "http://"+peerOfKind(t, kind, holder))
			}
			p, err := dialPeers(urls, []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
				(&Keeper{}).peerDialer())
			if err != nil {
				t.Fatal(err)
			}
			defer p.close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for look := range 2 { // the second look starts with the peer that vouched in the first
				if got, err := p.ask(ctx, holder, 300*time.Millisecond); got != tt.want {
					t.Fatalf("look %d: ask: %v (%v), want %v", look, got, err, tt.want)
				}
				if tt.want == holderServing && tt.peers[p.vouched] != "serving" {
					t.Fatalf("look %d: the next look starts at a %s peer, want the one that vouched", look, tt.peers[p.vouched])
				}
			}
		})
	}
}

// peerOfKind starts what a peer of that kind is on a loopback address, for the test's life, and returns the
// address.
func peerOfKind(t *testing.T, kind, holder string) string {
	t.Helper()
	addr := loopbacktest.Addr(t)
	if kind == "refused" {
		return addr
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if kind == "silent" {
		t.Cleanup(func() { _ = lis.Close() })
		return addr // the kernel accepts; nobody speaks HTTP/2
	}
	hs := health.NewServer()
	switch kind {
	case "serving":
		hs.SetServingStatus(holder, healthpb.HealthCheckResponse_SERVING)
	case "lapsed":
		hs.SetServingStatus(holder, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return addr
}

// TestStandbyMisledByARefusalKeepsLeases: a standby that sees the holder refuse its connection takes over at once,
// even when the holder is in fact alive and serves everyone else (a firewall that rejects, say). No lease the
// holder kept alive until it stopped serving (ActiveTimeout after its last confirmation) expires before its TTL
// on the new keeper:
// the new keeper counts the old one as serving until ActiveTimeout after its claim, however soon it claimed.
func TestStandbyMisledByARefusalKeepsLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // time is the subject: takeover timings on the bubble's fake clock
		env := newBubbleEnv(t, 1).withPeers("a", "b")
		a := env.startKeeper(env.keeperConfig("a"))
		waitActive(t, a, 5*time.Second)
		// b reaches a only through a route the test can cut.
		route := &cuttableRoute{dial: env.network.Dial, target: env.peerAddrs["a"]}
		routeLis := env.network.Listen()
		routeAddr := routeLis.Addr().String()
		_ = routeLis.Close()
		env.network.Route(routeAddr, route.connect)
		bConfig := env.keeperConfig("b")
		bConfig.PeerURLs = []string{bConfig.ListenURL, "http://" + routeAddr}
		b := env.startKeeper(bConfig)
		time.Sleep(time.Second) // b has seen a active
		if b.Active() {
			t.Fatal("b took over from a holder it can see")
		}
		ctx := ctxT(t, 30*time.Second)
		const ttl = 2
		g, err := env.leaseClient(t, a).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		env.put(ctx, "misled/k", g.ID)
		// a's confirmations stall as well, so it serves until ActiveTimeout after its last one: as long as a
		// holder the standby wrongly thinks gone can.
		route.cut()
		a.pauseElection.Store(true)
		cut := time.Now()
		var lastServed time.Time
		for {
			sent := time.Now()
			if renewed, err := a.Renew(ctx, g.ID); err != nil || renewed <= 0 {
				t.Logf("a stopped serving %v after the cut (b active: %v): %d, %v", time.Since(cut), b.Active(), renewed, err)
				break
			}
			lastServed = sent
			time.Sleep(50 * time.Millisecond)
		}
		if !b.Active() || a.Active() {
			t.Fatalf("after a stopped serving: a active %v, b active %v; want b alone", a.Active(), b.Active())
		}
		if took := time.Since(cut); took >= b.cfg.TakeoverTimeout {
			t.Fatalf("b took over %v after the cut, want at once (before the takeover timeout %v)", took, b.cfg.TakeoverTimeout)
		}
		time.Sleep(time.Until(lastServed.Add(ttl*time.Second - 50*time.Millisecond)))
		if !env.keyExists(ctx, "misled/k") {
			t.Fatalf("the lease a kept alive expired %v after its last keep-alive, TTL %ds", time.Since(lastServed), ttl)
		}
		waittest.Until(t, 10*time.Second, 20*time.Millisecond, "the abandoned lease to expire on b", func() bool {
			return !env.keyExists(ctx, "misled/k")
		})
		t.Logf("expired %v after its last keep-alive on the old holder", time.Since(lastServed))
	})
}

// cuttableRoute forwards connections to target until cut, then closes them and refuses new ones.
type cuttableRoute struct {
	dial   func(context.Context, string) (net.Conn, error)
	target string

	mu    sync.Mutex
	isCut bool
	conns []net.Conn
}

func (r *cuttableRoute) connect(ctx context.Context) (net.Conn, error) {
	conn, err := r.dial(ctx, r.target)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case r.isCut:
		_ = conn.Close()
		return nil, &net.OpError{Op: "dial", Net: "memnet", Err: syscall.ECONNREFUSED}
	}
	r.conns = append(r.conns, conn)
	return conn, nil
}

func (r *cuttableRoute) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.isCut = true
	for _, conn := range r.conns {
		_ = conn.Close()
	}
}
