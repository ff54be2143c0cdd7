package frontend

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/authstate"
	"github.com/cairn-kv/cairn/internal/authtoken"
)

// errAuthUnknown answers while the frontend has not yet read the auth store: it never lets a request through
// unchecked.
var errAuthUnknown = status.Error(codes.Unavailable, "cairn frontend: auth state not loaded yet")

// authGate holds this frontend's copy of the auth store (read from storage, refreshed when a probe shows it
// changed, after every auth change made here, and when a token is newer than the copy) and the token
// provider, and tells who a request comes from.
type authGate struct {
	f      *Frontend
	tokens authtoken.Provider
	// state is immutable once stored (sealed); nil until first read.
	state atomic.Pointer[gateState]
	// refreshMu makes concurrent refreshes wait for one read of the store.
	refreshMu sync.Mutex
	kick      chan struct{}
	// passwordChecks bounds the bcrypt comparisons running at once (one per CPU).
	passwordChecks chan struct{}
}

// gateState is one read of the auth store.
type gateState struct {
	*authstate.State
	appliedIndex uint64    // the storage's applied index the state was read at
	readAt       time.Time // when it was read
}

// staleDisabledAfter is how old a copy saying "disabled" may be before a request carrying a token makes the
// frontend read the store again (tokens exist only once auth is enabled, perhaps through another frontend).
const staleDisabledAfter = 50 * time.Millisecond

// caller is who a request comes from: the user and the auth revision its token was issued at. The zero
// caller is anonymous.
type caller struct {
	user string
	rev  uint64
}

type callerKey struct{}

func newAuthGate(f *Frontend, tokens authtoken.Provider) *authGate {
	return &authGate{f: f, tokens: tokens, kick: make(chan struct{}, 1),
		passwordChecks: make(chan struct{}, runtime.GOMAXPROCS(0))}
}

// run refreshes the copy whenever kicked, until ctx ends.
func (g *authGate) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.kick:
		}
		rctx, cancel := context.WithTimeout(ctx, g.f.cfg.RequestTimeout)
		if _, err := g.refresh(rctx); err != nil && ctx.Err() == nil {
			g.f.logger.Warn("reading the auth store failed", "err", err)
		}
		cancel()
	}
}

// observe is told of every new view: a storage reporting another auth revision or enabled flag than the copy
// asks for a refresh.
func (g *authGate) observe(v *view) {
	cur := g.state.Load()
	for _, r := range v.leaderFirst {
		st := r.status.Load()
		if st == nil || !r.healthy.Load() {
			continue
		}
		if cur == nil || (st.AppliedIndex > cur.appliedIndex &&
			(st.AuthRevision != cur.Revision || st.AuthEnabled != cur.Enabled)) {
			g.kickRefresh()
			return
		}
	}
}

// kickRefresh asks for a refresh soon.
func (g *authGate) kickRefresh() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// refresh reads the auth store linearizably and keeps it unless a newer read was kept meanwhile.
func (g *authGate) refresh(ctx context.Context) (*gateState, error) {
	g.refreshMu.Lock()
	defer g.refreshMu.Unlock()
	var resp *storagepb.AuthStateResponse
	_, err := g.f.readOn(ctx, g.f.pool.view().leaderFirst, func(r *storageReplica) (err error) {
		resp, err = r.client().AuthState(ctx, false)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read auth state: %w", err)
	}
	st := authstate.New()
	st.Enabled, st.Revision = resp.Enabled, resp.Revision
	for _, u := range resp.Users {
		st.Users[string(u.Name)] = u
	}
	for _, r := range resp.Roles {
		st.Roles[string(r.Name)] = r
	}
	st.Seal()
	next := &gateState{State: st, appliedIndex: resp.AppliedIndex, readAt: time.Now()}
	if cur := g.state.Load(); cur != nil && cur.appliedIndex > next.appliedIndex {
		return cur, nil
	}
	g.state.Store(next)
	return next, nil
}

// current returns the copy, reading the store first when there is none or when it is older than atLeast.
func (g *authGate) current(ctx context.Context, atLeast uint64) (*gateState, error) {
	cur := g.state.Load()
	if cur != nil && cur.Revision >= atLeast {
		return cur, nil
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	next, err := g.refresh(rctx)
	if err != nil {
		if cur != nil {
			return cur, nil
		}
		return nil, errAuthUnknown
	}
	return next, nil
}

// identify returns the auth store and who ctx's request comes from: the user of its token ("token" or
// "authorization" metadata; an unknown, expired or forged one is ErrInvalidAuthToken), else with
// --client-cert-auth the common name of its verified client certificate (not through the gateway), as etcd.
// With authentication disabled the caller is anonymous and tokens are ignored.
func (g *authGate) identify(ctx context.Context) (*gateState, caller, error) {
	st, err := g.current(ctx, 0)
	if err != nil {
		return nil, caller{}, err
	}
	md, _ := metadata.FromIncomingContext(ctx)
	tokens := md.Get(rpctypes.TokenFieldNameGRPC)
	if len(tokens) == 0 {
		tokens = md.Get(rpctypes.TokenFieldNameSwagger)
	}
	if !st.Enabled && len(tokens) > 0 && time.Since(st.readAt) > staleDisabledAfter {
		if fresh, err := g.refresh(ctx); err == nil {
			st = fresh
		}
	}
	if !st.Enabled {
		return st, caller{}, nil
	}
	if len(tokens) > 0 {
		token := strings.TrimPrefix(tokens[0], "Bearer ")
		info, ok := g.tokens.Info(token)
		if !ok {
			if info, ok = g.lookupSimpleToken(ctx, token); !ok {
				return st, caller{}, rpctypes.ErrGRPCInvalidAuthToken
			}
		}
		if info.Revision > st.Revision { // issued after our copy was read: catch up first
			if st, err = g.current(ctx, info.Revision); err != nil {
				return nil, caller{}, err
			}
		}
		if _, simple := g.tokens.(*authtoken.Simple); simple && st.Users[info.Username] == nil {
			// Deleted (through any frontend): etcd's members drop the user's simple tokens.
			g.tokens.InvalidateUser(info.Username)
			return st, caller{}, rpctypes.ErrGRPCInvalidAuthToken
		}
		return st, caller{user: info.Username, rev: info.Revision}, nil
	}
	if cn := g.certCommonName(ctx, md); cn != "" {
		return st, caller{user: cn, rev: st.Revision}, nil
	}
	return st, caller{}, nil
}

// lookupSimpleToken asks the storages about a simple token this frontend did not issue (another frontend
// did: every storage recorded it when it applied its Authenticate entry) and remembers it when found.
func (g *authGate) lookupSimpleToken(ctx context.Context, token string) (authtoken.Info, bool) {
	simple, ok := g.tokens.(*authtoken.Simple)
	if !ok || !strings.Contains(token, ".") {
		return authtoken.Info{}, false
	}
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, r := range g.f.pool.view().leaderFirst { // a storage that has not applied it yet may not know it
		resp, err := r.client().AuthToken(lctx, token, simple.TTL())
		if err == nil && resp.Found {
			info := authtoken.Info{Username: resp.Username, Revision: resp.Revision}
			simple.Remember(token, info)
			return info, true
		}
	}
	return authtoken.Info{}, false
}

// certCommonName is the CN of the request's verified client certificate, with --client-cert-auth.
func (g *authGate) certCommonName(ctx context.Context, md metadata.MD) string {
	if !g.f.cfg.TLS.ClientCertAuth || len(md.Get("grpcgateway-accept")) > 0 {
		return ""
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return ""
	}
	tlsInfo, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return ""
	}
	for _, chain := range tlsInfo.State.VerifiedChains {
		if len(chain) > 0 {
			return chain[0].Subject.CommonName
		}
	}
	return ""
}

// mint issues a token for ctx's caller when it has a user but came without a token (a client certificate), so
// calls this frontend makes on its behalf (Lock, Election) are checked as its own; "" otherwise.
func (g *authGate) mint(ctx context.Context) string {
	c := callerOf(ctx)
	if c.user == "" {
		return ""
	}
	prefix, err := g.tokens.Prefix()
	if err != nil {
		return ""
	}
	token, err := g.tokens.Assign(prefix, 0, c.user, c.rev)
	if err != nil {
		return "" // a verify-only JWT frontend: the calls go anonymous and are refused
	}
	return token
}

// callerOf returns the caller the interceptor recorded in ctx.
func callerOf(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// requireUser is etcd's requireAuthInfo: with authentication enabled, a request must name a user.
func requireUser(st *gateState, c caller) error {
	if st.Enabled && c.user == "" {
		return rpctypes.ErrGRPCUserEmpty
	}
	return nil
}
