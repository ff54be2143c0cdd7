package leasekeeper

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
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
			if got, err := p.ask(ctx, holder, 300*time.Millisecond); got != tt.want {
				t.Fatalf("ask: %v (%v), want %v", got, err, tt.want)
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
