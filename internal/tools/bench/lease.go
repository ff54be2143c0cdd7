package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultLeaseTTL is the TTL etcd's lease-keepalive benchmark grants (100s).
const DefaultLeaseTTL = 100

// LeaseConfig configures the lease benchmarks.
type LeaseConfig struct {
	// TTL of every lease granted, in seconds (default DefaultLeaseTTL).
	TTL int64
}

func (c LeaseConfig) ttl() int64 {
	if c.TTL <= 0 {
		return DefaultLeaseTTL
	}
	return c.TTL
}

// LeaseKeepAlive is the lease-keepalive benchmark, as etcd's `benchmark lease-keepalive`: each request sends one
// keep-alive on a long-lived LeaseKeepAlive stream and waits for its answer. Every stream renews a lease of its
// own, granted when the stream opens; streams are kept per connection and reused, so each worker in effect
// keeps one, as each client does in etcd's tool. Close ends the streams.
type LeaseKeepAlive struct {
	cfg    LeaseConfig
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	idle   map[*clientv3.Client][]*keepAliveStream
}

type keepAliveStream struct {
	lease  int64
	stream pb.Lease_LeaseKeepAliveClient
}

// NewLeaseKeepAlive prepares the benchmark; streams open on first use.
func NewLeaseKeepAlive(cfg LeaseConfig) *LeaseKeepAlive {
	ctx, cancel := context.WithCancel(context.Background())
	return &LeaseKeepAlive{cfg: cfg, ctx: ctx, cancel: cancel, idle: map[*clientv3.Client][]*keepAliveStream{}}
}

// Op is one keep-alive round trip.
func (b *LeaseKeepAlive) Op(ctx context.Context, client *clientv3.Client, _ int64) error {
	s, err := b.take(ctx, client)
	if err != nil {
		return err
	}
	answered := make(chan error, 1)
	go func() {
		if err := s.stream.Send(&pb.LeaseKeepAliveRequest{ID: s.lease}); err != nil {
			answered <- err
			return
		}
		resp, err := s.stream.Recv()
		if err == nil && resp.TTL <= 0 {
			err = fmt.Errorf("bench: keep-alive of lease %x answered TTL %d", s.lease, resp.TTL)
		}
		answered <- err
	}()
	select {
	case err = <-answered:
	case <-ctx.Done():
		err = ctx.Err() // the stream may still get the answer: it is not reused
	}
	if err != nil {
		_ = s.stream.CloseSend()
		return err
	}
	b.put(client, s)
	return nil
}

func (b *LeaseKeepAlive) take(ctx context.Context, client *clientv3.Client) (*keepAliveStream, error) {
	b.mu.Lock()
	if idle := b.idle[client]; len(idle) > 0 {
		s := idle[len(idle)-1]
		b.idle[client] = idle[:len(idle)-1]
		b.mu.Unlock()
		return s, nil
	}
	b.mu.Unlock()
	lc := pb.NewLeaseClient(client.ActiveConnection())
	grant, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: b.cfg.ttl()})
	if err != nil {
		return nil, err
	}
	stream, err := lc.LeaseKeepAlive(b.ctx)
	if err != nil {
		return nil, err
	}
	return &keepAliveStream{lease: grant.ID, stream: stream}, nil
}

func (b *LeaseKeepAlive) put(client *clientv3.Client, s *keepAliveStream) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.idle[client] = append(b.idle[client], s)
}

// Close ends every stream (their leases expire on their own).
func (b *LeaseKeepAlive) Close() { b.cancel() }

// LeaseGrantRevokeOp returns an Op that grants a lease and revokes it: two writes through the log per request.
func LeaseGrantRevokeOp(cfg LeaseConfig) Op {
	return func(ctx context.Context, client *clientv3.Client, _ int64) error {
		lc := pb.NewLeaseClient(client.ActiveConnection())
		grant, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: cfg.ttl()})
		if err != nil {
			return err
		}
		if grant.ID == 0 {
			return errors.New("bench: lease granted without an ID")
		}
		_, err = lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: grant.ID})
		return err
	}
}

// LeaseScenarios are the lease rows of a comparison: lease-keepalive with 100 clients on 10 connections (total
// requests), and lease-grant-revoke with 1 client (total/100) and with 100 clients on 10 connections (total/10).
// The keep-alive streams stay open until the process ends (each holds a lease that then expires).
func LeaseScenarios(total int64) []Scenario {
	keepAlive := NewLeaseKeepAlive(LeaseConfig{})
	grantRevoke := LeaseGrantRevokeOp(LeaseConfig{})
	return []Scenario{
		{Name: "lease-keepalive, 100 clients, 10 conns", Clients: 100, Conns: 10, Total: total, Op: keepAlive.Op},
		{Name: "lease-grant-revoke, 1 client, 1 conn", Clients: 1, Conns: 1, Total: max(1, total/100), Op: grantRevoke},
		{Name: "lease-grant-revoke, 100 clients, 10 conns", Clients: 100, Conns: 10, Total: max(1, total/10), Op: grantRevoke},
	}
}
