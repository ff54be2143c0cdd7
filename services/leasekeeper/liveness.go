package leasekeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/rpctune"
)

// With Config.PeerURLs the claim's holder proves it is alive to the standbys over gRPC, not through the log:
// every keeper answers grpc health's Check for the service named by its own claimant ID, SERVING while it is the
// active keeper, and a standby asks its peers about the holder the stored claim names.

// livenessServer is grpc health on the keeper's port: "" (the process) is always SERVING, the keeper's own ID is
// SERVING while it is active and NOT_SERVING otherwise, any other name is NotFound.
type livenessServer struct {
	healthpb.UnimplementedHealthServer
	k *Keeper
}

func (s livenessServer) Check(_ context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch {
	case r.GetService() == "":
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case r.GetService() != s.k.id:
		return nil, status.Errorf(codes.NotFound, "leasekeeper %s is not %s", s.k.id, r.GetService())
	case s.k.Active():
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	default:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}, nil
	}
}

// peers are the health clients of every keeper in Config.PeerURLs.
type peers struct {
	urls    []string
	conns   []*grpc.ClientConn
	clients []healthpb.HealthClient
}

// dialPeers makes (lazy) connections to every peer; nothing is dialled until the first check.
func dialPeers(urls []string, opts []grpc.DialOption) (*peers, error) {
	p := &peers{}
	for _, u := range urls {
		target, err := config.HostPort(u)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("leasekeeper peer %s: %w", u, err)
		}
		conn, err := grpc.NewClient(target, append(rpctune.DialOptions(), opts...)...)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("leasekeeper peer %s: %w", u, err)
		}
		p.urls = append(p.urls, u)
		p.conns = append(p.conns, conn)
		p.clients = append(p.clients, healthpb.NewHealthClient(conn))
	}
	return p, nil
}

// alive reports whether some peer answers that holder is the active keeper; each peer gets at most timeout.
// The peers are asked in turn (there are a handful), stopping at the first that says so.
func (p *peers) alive(ctx context.Context, holder string, timeout time.Duration) (bool, error) {
	var errs []error
	for i, client := range p.clients {
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := client.Check(callCtx, &healthpb.HealthCheckRequest{Service: holder})
		cancel()
		switch {
		case err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING:
			return true, nil
		case err != nil && status.Code(err) != codes.NotFound:
			errs = append(errs, fmt.Errorf("peer %s: %w", p.urls[i], err))
		}
	}
	return false, errors.Join(errs...)
}

func (p *peers) close() {
	for _, conn := range p.conns {
		_ = conn.Close()
	}
}

// peerDialOptions reach the other keepers as the frontends do: the internal link's TLS, the relay secret, and
// the test dialer when there is one.
func (k *Keeper) peerDialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{k.deps.Internal.DialOption(), relayauth.DialOption(k.cfg.RelaySecret)}
	if k.deps.Dialer != nil {
		opts = append(opts, grpc.WithContextDialer(k.deps.Dialer))
	}
	return opts
}
