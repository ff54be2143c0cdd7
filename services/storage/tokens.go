package storage

import (
	"context"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/api/storagepb"
)

// simpleTokens are the simple auth tokens of the Authenticate entries this storage applied, as etcd's members
// keep them: in memory, "<prefix>.<log index>", forgotten when unused for the TTL the frontends ask with, when
// their user is deleted or changes password, and on restart. Any frontend can so accept a token another issued.
type simpleTokens struct {
	mu     sync.Mutex
	tokens map[string]*simpleToken
	now    func() time.Time
}

type simpleToken struct {
	user     string
	revision uint64
	lastUsed time.Time
}

// defaultTokenRetention bounds how long a token nobody looked up is kept (etcd's default --auth-token-ttl).
const defaultTokenRetention = 300 * time.Second

func newSimpleTokens() *simpleTokens {
	return &simpleTokens{tokens: map[string]*simpleToken{}, now: time.Now}
}

// applied records what an applied auth request means for tokens.
func (t *simpleTokens) applied(index uint64, req *pb.InternalRaftRequest, authRevision uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case req.Authenticate != nil && req.Authenticate.SimpleToken != "":
		now := t.now()
		for tok, st := range t.tokens {
			if now.Sub(st.lastUsed) > defaultTokenRetention {
				delete(t.tokens, tok)
			}
		}
		token := fmt.Sprintf("%s.%d", req.Authenticate.SimpleToken, index)
		t.tokens[token] = &simpleToken{user: req.Authenticate.Name, revision: authRevision, lastUsed: now}
	case req.AuthUserDelete != nil:
		t.invalidateLocked(req.AuthUserDelete.Name)
	case req.AuthUserChangePassword != nil:
		t.invalidateLocked(req.AuthUserChangePassword.Name)
	}
}

func (t *simpleTokens) invalidateLocked(user string) {
	for tok, st := range t.tokens {
		if st.user == user {
			delete(t.tokens, tok)
		}
	}
}

// lookup answers a token unused for less than ttl, renewing it.
func (t *simpleTokens) lookup(token string, ttl time.Duration) (*storagepb.AuthTokenResponse, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.tokens[token]
	now := t.now()
	if st == nil || now.Sub(st.lastUsed) >= ttl {
		return &storagepb.AuthTokenResponse{}, false
	}
	st.lastUsed = now
	return &storagepb.AuthTokenResponse{Found: true, Username: st.user, Revision: st.revision}, true
}

// AuthToken looks up a simple token (see simpleTokens).
func (s *Storage) AuthToken(_ context.Context, r *storagepb.AuthTokenRequest) (*storagepb.AuthTokenResponse, error) {
	ttl := time.Duration(r.TtlSeconds) * time.Second
	if ttl <= 0 {
		ttl = defaultTokenRetention
	}
	resp, _ := s.tokens.lookup(r.Token, ttl)
	return resp, nil
}
