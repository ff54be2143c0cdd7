package frontend

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
)

// hostScheme is the gRPC target scheme of watchhub and leasekeeper URLs: one URL's host may stand for several
// processes (a compose service scaled to N replicas answers its name with N addresses), all of which get used.
const hostScheme = "cairn-host"

// hostResolveInterval is how often a backend's host name is looked up again, so hubs started after the
// frontend (`docker compose up --scale watchhub=4`) get streams within seconds, and stopped ones stop getting
// them even before their connection fails.
const hostResolveInterval = 5 * time.Second

// minResolveGap bounds the lookups gRPC asks for (ResolveNow, on every failed connection) to one per gap.
const minResolveGap = time.Second

// backendDialOptions make one connection spread its calls round robin over every address its host resolves
// to, re-resolved every hostResolveInterval. gRPC's own dns resolver resolves again only after a failure, so
// it would never see a hub added by scaling up.
func backendDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithResolvers(hostResolverBuilder{lookup: net.DefaultResolver.LookupHost, interval: hostResolveInterval,
			minGap: minResolveGap}),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
	}
}

// hostResolverBuilder builds a hostResolver per connection.
type hostResolverBuilder struct {
	lookup func(ctx context.Context, host string) ([]string, error)
	// interval is the time between lookups; minGap the least time between two, even when gRPC asks.
	interval, minGap time.Duration
}

func (hostResolverBuilder) Scheme() string { return hostScheme }

// Build starts the resolver's polling goroutine, which Close stops.
func (b hostResolverBuilder) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	host, port, err := net.SplitHostPort(target.Endpoint())
	if err != nil {
		return nil, fmt.Errorf("frontend: backend target %q: %w", target.Endpoint(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &hostResolver{builder: b, host: host, port: port, cc: cc, now: make(chan struct{}, 1), cancel: cancel,
		done: make(chan struct{})}
	go r.run(ctx)
	return r, nil
}

// hostResolver looks one host up every interval (and when gRPC asks) and hands gRPC every address it has.
type hostResolver struct {
	builder    hostResolverBuilder
	host, port string
	cc         resolver.ClientConn
	now        chan struct{}
	cancel     context.CancelFunc
	done       chan struct{}
}

// run resolves until ctx ends. A failed lookup keeps the last addresses (a DNS hiccup must not drop every
// hub); it is reported to gRPC only while there are none. An IP address (every backend of `cairn up`) stands for
// itself forever: no ticker wakes the frontend to look at it again (gRPC's ResolveNow still does).
func (r *hostResolver) run(ctx context.Context) {
	defer close(r.done)
	var last []string
	var tick <-chan time.Time
	if net.ParseIP(r.host) == nil {
		ticker := time.NewTicker(r.builder.interval)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		addrs, err := r.resolve(ctx)
		switch {
		case err != nil && last == nil:
			r.cc.ReportError(err)
		case err == nil && !slices.Equal(addrs, last):
			last = addrs
			state := resolver.State{}
			for _, addr := range addrs {
				state.Addresses = append(state.Addresses, resolver.Address{Addr: addr})
			}
			_ = r.cc.UpdateState(state) // an error only asks for ResolveNow, which the ticker covers
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.builder.minGap):
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-r.now:
		}
	}
}

// resolve returns host's addresses with the port, sorted; an IP needs no lookup.
func (r *hostResolver) resolve(ctx context.Context) ([]string, error) {
	if net.ParseIP(r.host) != nil {
		return []string{net.JoinHostPort(r.host, r.port)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, r.builder.interval)
	defer cancel()
	ips, err := r.builder.lookup(ctx, r.host)
	if err != nil {
		return nil, fmt.Errorf("frontend: resolving backend host %s: %w", r.host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("frontend: backend host %s has no address", r.host)
	}
	addrs := make([]string, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, net.JoinHostPort(ip, r.port))
	}
	slices.Sort(addrs)
	return slices.Compact(addrs), nil
}

// ResolveNow asks for a lookup soon (at most one per minResolveGap).
func (r *hostResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

// Close stops the polling goroutine and waits for it.
func (r *hostResolver) Close() {
	r.cancel()
	<-r.done
}
