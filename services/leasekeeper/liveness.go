package leasekeeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
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

// sighting is what the peers say of the claim's holder.
type sighting int

const (
	// holderUnseen: no peer vouched for the holder, and some could not be asked (a timeout, a broken
	// connection) or answered that it is the holder but not serving (lapsed, it may serve again).
	holderUnseen sighting = iota
	// holderServing: a peer answered that the holder is active.
	holderServing
	// holderGone: every peer answered that it is not the holder, or refused the connection (nothing listens
	// there): no listed process is the holder. It has crashed if one of them was it (a process keeps its
	// claimant ID for life, and a restarted one has a new ID).
	holderGone
)

func (s sighting) String() string {
	switch s {
	case holderServing:
		return "serving"
	case holderGone:
		return "gone"
	default:
		return "unseen"
	}
}

// peers are the health clients of every keeper in Config.PeerURLs.
type peers struct {
	urls    []string
	conns   []*grpc.ClientConn
	clients []healthpb.HealthClient
	dials   []*dialRecord
	// vouched is the peer that last answered SERVING: the next look asks it first, so while the holder lives a
	// look is one call (to the holder itself), not one per peer. Used by the election loop alone.
	vouched int
}

// dialRecord remembers a peer connection's latest dial: whether it was refused (nothing listened at the
// address), and when.
type dialRecord struct {
	mu      sync.Mutex
	at      time.Time
	refused bool
}

// dialer wraps dial to record each attempt's outcome.
func (r *dialRecord) dialer(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := dial(ctx, addr)
		r.mu.Lock()
		r.at, r.refused = time.Now(), errors.Is(err, syscall.ECONNREFUSED)
		r.mu.Unlock()
		return conn, err
	}
}

// refusedSince reports whether the latest dial, made at or after since, was refused.
func (r *dialRecord) refusedSince(since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused && !r.at.Before(since)
}

// dialPeers makes (lazy) connections to every peer through dial; nothing is dialled until the first check.
func dialPeers(urls []string, opts []grpc.DialOption, dial func(context.Context, string) (net.Conn, error)) (*peers, error) {
	p := &peers{}
	for _, u := range urls {
		target, err := config.HostPort(u)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("leasekeeper peer %s: %w", u, err)
		}
		record := &dialRecord{}
		conn, err := grpc.NewClient(target, append(append(rpctune.DialOptions(), opts...), grpc.WithContextDialer(record.dialer(dial)))...)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("leasekeeper peer %s: %w", u, err)
		}
		p.urls = append(p.urls, u)
		p.conns = append(p.conns, conn)
		p.clients = append(p.clients, healthpb.NewHealthClient(conn))
		p.dials = append(p.dials, record)
	}
	return p, nil
}

// ask asks the peers in turn (there are a handful; the one that vouched last first) whether holder is the
// active keeper, each for at most timeout, and stops at the first that says so. A peer counts as refusing only when a dial made during this
// look or the one before (2 × timeout) was refused: grpc fails calls fast with its last dial error while it
// backs off, so when no peer vouched for the holder the refusing peers' backoff is reset for the next look to
// dial them afresh (while the holder answers, a peer that is down is left to grpc's backoff).
func (p *peers) ask(ctx context.Context, holder string, timeout time.Duration) (sighting, error) {
	var errs []error
	var refusing []*grpc.ClientConn
	since := time.Now().Add(-2 * timeout)
	gone := true
	for n := range p.clients {
		i := (p.vouched + n) % len(p.clients)
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := p.clients[i].Check(callCtx, &healthpb.HealthCheckRequest{Service: holder})
		cancel()
		switch {
		case err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING:
			p.vouched = i
			return holderServing, nil
		case err == nil: // the holder, lapsed
			gone = false
		case status.Code(err) == codes.NotFound: // another keeper
		case p.dials[i].refusedSince(since):
			refusing = append(refusing, p.conns[i])
		default:
			gone = false
			errs = append(errs, fmt.Errorf("peer %s: %w", p.urls[i], err))
			if p.dials[i].refusedSince(time.Time{}) { // refused long ago, grpc still backing off
				refusing = append(refusing, p.conns[i])
			}
		}
	}
	for _, conn := range refusing {
		conn.ResetConnectBackoff()
	}
	if gone {
		return holderGone, nil
	}
	return holderUnseen, errors.Join(errs...)
}

func (p *peers) close() {
	for _, conn := range p.conns {
		_ = conn.Close()
	}
}

// peerDialOptions reach the other keepers as the frontends do: the internal link's TLS and the relay secret
// (resolved: given, or read from its file).
func (k *Keeper) peerDialOptions(relaySecret string) []grpc.DialOption {
	return []grpc.DialOption{k.deps.Internal.DialOption(), relayauth.DialOption(relaySecret)}
}

// peerDialer makes the connections to the other keepers: the test dialer when there is one, else TCP.
func (k *Keeper) peerDialer() func(context.Context, string) (net.Conn, error) {
	if k.deps.Dialer != nil {
		return k.deps.Dialer
	}
	var d net.Dialer
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}
