package frontend

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/config"
	"github.com/cairn-kv/cairn/internal/consensusclient"
	"github.com/cairn-kv/cairn/internal/link"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/rpctune"
	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// storageReplica is one member's storage as the frontend sees it: a few warm connections and what its last
// status probe said.
type storageReplica struct {
	url     string
	conns   []*grpc.ClientConn
	clients []*storageclient.Client
	// pipeline carries the hot path (Range, Submit) on connections of its own (a link, with a span per call
	// while spans are recorded).
	pipeline *storageclient.Pipeline
	next     atomic.Uint32

	memberID atomic.Uint64
	term     atomic.Uint64 // raft term its log last reported
	healthy  atomic.Bool   // last probe (or call) succeeded and storage reported itself healthy
	rtt      atomic.Int64  // smoothed probe round trip, nanoseconds
	status   atomic.Pointer[storagepb.StatusResponse]
}

// client returns the next connection's client, round robin.
func (r *storageReplica) client() *storageclient.Client {
	if len(r.clients) == 1 {
		return r.clients[0]
	}
	return r.clients[int(r.next.Add(1))%len(r.clients)]
}

// kv is what the hot path asks of a storage: Range and Submit, always over the pipeline (traced or not), so a
// traced run measures the same system as an untraced one.
func (r *storageReplica) kv() *storageclient.Pipeline { return r.pipeline }

// rangeEncoded is Range answered in the response's wire encoding, storage's own: references to the buffers it
// arrived in (see storageclient.Pipeline.RangeEncoded).
func (r *storageReplica) rangeEncoded(ctx context.Context, req *pb.RangeRequest, authFence uint64) (mem.BufferSlice, error) {
	return r.pipeline.RangeEncoded(ctx, req, authFence)
}

// connected reports whether some connection is up or may come up without a failed dial.
func (r *storageReplica) connected() bool {
	for _, c := range r.conns {
		if s := c.GetState(); s != connectivity.TransientFailure && s != connectivity.Shutdown {
			return true
		}
	}
	return false
}

func (r *storageReplica) close() {
	if r.pipeline != nil {
		r.pipeline.Close()
	}
	for _, c := range r.conns {
		_ = c.Close()
	}
}

// consensusReplica is one member's consensus.
type consensusReplica struct {
	url     string
	client  *consensusclient.Client
	healthy atomic.Bool
	status  atomic.Pointer[commitlog.Status]
}

// view is an immutable routing snapshot, rebuilt after every probe round and whenever a replica is marked
// down, and read without locks on every request.
type view struct {
	clusterID uint64
	leader    uint64
	term      uint64
	members   []commitlog.Member
	// leaderFirst starts with the raft leader's storage (writes and linearizable reads save a hop there),
	// then the other healthy storages, then the unhealthy ones as a last resort.
	leaderFirst []*storageReplica
	// nearestFirst starts with the home member's storage, then the healthy ones by round trip, then the
	// unhealthy ones.
	nearestFirst []*storageReplica
	// home is the member this frontend speaks for in Status, Hash, HashKV and Snapshot (nil when unknown).
	home *storageReplica
	// consensusLeaderFirst starts with the leader's consensus, then the healthy ones, then the others.
	consensusLeaderFirst []*consensusReplica
}

// memberOf returns the member with id, if consensus listed it.
func (v *view) memberOf(id uint64) (commitlog.Member, bool) {
	for _, m := range v.members {
		if m.ID == id {
			return m, true
		}
	}
	return commitlog.Member{}, false
}

// pool keeps connections to every storage and consensus replica, probes them, and publishes a view.
type pool struct {
	cfg    Config
	tel    *obs.Telemetry
	logger *slog.Logger
	// internal secures the links to storages and consensus members; nil: plain.
	internal *tlsconfig.Link

	mu        sync.Mutex // guards storages and consensus lists and rebuilding the view
	storages  []*storageReplica
	consensus []*consensusReplica
	homeURL   string // sticky home storage when no member carries the frontend's name

	current atomic.Pointer[view]
	kick    chan struct{}
	// published, when set (before the first probe round), is told of every new view.
	published func(*view)
}

func newPool(cfg Config, tel *obs.Telemetry, logger *slog.Logger, internal *tlsconfig.Link) (*pool, error) {
	p := &pool{cfg: cfg, tel: tel, logger: logger, internal: internal, kick: make(chan struct{}, 1)}
	for _, u := range cfg.ConsensusEndpoints {
		client, err := consensusclient.New(consensusclient.Config{Target: u, DialOptions: p.dialOptions(), TLS: p.internal,
			Telemetry: tel, Logger: logger})
		if err != nil {
			p.close()
			return nil, err
		}
		p.consensus = append(p.consensus, &consensusReplica{url: u, client: client})
	}
	for _, u := range cfg.StorageEndpoints {
		if _, err := p.addStorage(u); err != nil {
			p.close()
			return nil, err
		}
	}
	p.rebuild()
	return p, nil
}

func (p *pool) dialOptions() []grpc.DialOption {
	opts := append(append(p.tel.DialOptions(), rpctune.DialOptions()...), link.GRPCDialOptions()...)
	return append(opts, p.internal.DialOption(), grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: 10 * time.Second, Timeout: 5 * time.Second}))
}

// addStorage connects to a storage URL not yet known; p.mu must be held (or the pool not yet shared).
func (p *pool) addStorage(rawURL string) (*storageReplica, error) {
	target, err := config.HostPort(rawURL)
	if err != nil {
		return nil, fmt.Errorf("storage endpoint: %w", err)
	}
	canonical := "http://" + target
	for _, r := range p.storages {
		if r.url == canonical {
			return r, nil
		}
	}
	r := &storageReplica{url: canonical}
	opts := append([]grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<31 - 1))}, p.dialOptions()...)
	for range p.cfg.ConnsPerStorage {
		conn, err := grpc.NewClient(target, opts...)
		if err != nil {
			r.close()
			return nil, fmt.Errorf("dial storage %s: %w", canonical, err)
		}
		conn.Connect() // keep it warm: the first request must not pay for the handshake
		r.conns = append(r.conns, conn)
		r.clients = append(r.clients, storageclient.New(conn))
	}
	r.pipeline = storageclient.NewPipeline(target, p.cfg.storageCallBound(), p.tel, p.internal)
	p.storages = append(p.storages, r)
	p.logger.Info("storage replica added", "storage_url", canonical)
	return r, nil
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.storages {
		r.close()
	}
	for _, c := range p.consensus {
		_ = c.client.Close()
	}
}

// view returns the current routing snapshot.
func (p *pool) view() *view { return p.current.Load() }

// run probes every replica each ProbeInterval (sooner when kicked, less often while nothing changes: see
// probePace) until ctx ends.
func (p *pool) run(ctx context.Context) {
	pace := newProbePace(p.cfg.ProbeInterval)
	next := time.NewTimer(p.cfg.ProbeInterval)
	defer next.Stop()
	for {
		asked := false
		select {
		case <-ctx.Done():
			return
		case <-next.C:
		case <-p.kick:
			asked = true
		}
		p.probe(ctx)
		next.Reset(pace.next(p.marks(), asked))
	}
}

// refresh asks for a probe round soon (after a replica failed a call).
func (p *pool) refresh() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// markDown records that a call to r failed at the connection level, so requests avoid it until a probe
// finds it healthy again.
func (p *pool) markDown(r *storageReplica, err error) {
	if r.healthy.Swap(false) {
		p.logger.Warn("storage replica failed a call; routing around it", "storage_url", r.url,
			"member-id", fmt.Sprintf("%x", r.memberID.Load()), "err", err)
		p.rebuild()
	}
	p.refresh()
}

// probe asks every replica for its status, in parallel, adds storages discovered from membership and
// publishes a new view.
func (p *pool) probe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(p.cfg.ProbeInterval, time.Second))
	defer cancel()
	p.mu.Lock()
	storages, consensus := slices.Clone(p.storages), slices.Clone(p.consensus)
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range consensus {
		wg.Go(func() { probeConsensus(ctx, c) })
	}
	for _, r := range storages {
		wg.Go(func() { probeStorage(ctx, r) })
	}
	wg.Wait()
	for _, r := range p.discover(consensus) {
		wg.Go(func() { probeStorage(ctx, r) })
	}
	wg.Wait()
	p.rebuild()
}

func probeConsensus(ctx context.Context, c *consensusReplica) {
	st, err := c.client.Status(ctx)
	if err != nil {
		c.healthy.Store(false)
		return
	}
	c.status.Store(&st)
	c.healthy.Store(true)
}

func probeStorage(ctx context.Context, r *storageReplica) {
	start := time.Now()
	st, err := r.clients[0].Status(ctx)
	if err != nil {
		r.healthy.Store(false)
		return
	}
	took := time.Since(start).Nanoseconds()
	if old := r.rtt.Load(); old > 0 {
		took = (old*7 + took) / 8
	}
	r.rtt.Store(took)
	r.memberID.Store(st.MemberId)
	if st.RaftTerm > 0 {
		r.term.Store(st.RaftTerm)
	}
	r.status.Store(st)
	r.healthy.Store(st.Unhealthy == "")
}

// discover connects to every member's storage URL that consensus lists and the pool lacks, and returns the
// new ones.
func (p *pool) discover(consensus []*consensusReplica) []*storageReplica {
	p.mu.Lock()
	defer p.mu.Unlock()
	known := len(p.storages)
	for _, c := range consensus {
		st := c.status.Load()
		if st == nil {
			continue
		}
		for _, m := range st.Members {
			if u, err := url.Parse(m.StorageURL); err != nil || u.Scheme != "http" {
				continue // not reachable over the network (e.g. an in-process storage)
			}
			if _, err := p.addStorage(m.StorageURL); err != nil {
				p.logger.Warn("cannot connect to a discovered storage", "storage_url", m.StorageURL, "err", err)
			}
		}
	}
	return slices.Clone(p.storages[known:])
}
