package leasekeeper

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// BenchmarkKeepAlive measures keep-alives answered by an active keeper over gRPC, from parallel streams (one
// per goroutine, each renewing its own lease), as etcd's `benchmark lease-keepalive` does.
func BenchmarkKeepAlive(b *testing.B) {
	env := newTestEnv(b, 1)
	k := env.startKeeper(env.keeperConfig("bench"))
	waitActive(b, k, 10*time.Second)
	lc := env.leaseClient(b, k)
	ctx := context.Background()
	b.SetParallelism(8) // 16 streams on 2 cores
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		g, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
		if err != nil {
			b.Error(err)
			return
		}
		stream, err := lc.LeaseKeepAlive(ctx)
		if err != nil {
			b.Error(err)
			return
		}
		defer stream.CloseSend()
		for p.Next() {
			if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: g.ID}); err != nil {
				b.Error(err)
				return
			}
			if r, err := stream.Recv(); err != nil || r.TTL != 60 {
				b.Errorf("keep-alive: %v, %v", r, err)
				return
			}
		}
	})
}

// BenchmarkGrantRevoke measures a lease's grant and revoke through the keeper (two log entries each op).
func BenchmarkGrantRevoke(b *testing.B) {
	env := newTestEnv(b, 1)
	k := env.startKeeper(env.keeperConfig("bench"))
	waitActive(b, k, 10*time.Second)
	lc := env.leaseClient(b, k)
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(8) // 16 streams on 2 cores
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		for p.Next() {
			id := next.Add(1)
			if _, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: 60}); err != nil {
				b.Error(err)
				return
			}
			if _, err := lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: id}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
