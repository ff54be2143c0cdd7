package relayauth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MetadataKey is the gRPC metadata key a frontend's relayed calls carry the relay secret in.
const MetadataKey = "cairn-relay-secret"

// ErrDirectClient answers a caller that is not a frontend while authentication is enabled.
var ErrDirectClient = status.Error(codes.PermissionDenied,
	"cairn: authentication is enabled and this port serves only Cairn's frontends: connect through a frontend")

// Guard is the check on one hub's or keeper's gRPC server. The zero value is not usable: use NewGuard.
type Guard struct {
	secret      []byte
	internalTLS bool
	authEnabled atomic.Bool
	known       chan struct{} // closed once the auth state is known
	knownOnce   sync.Once

	setAt     atomic.Int64 // Unix nanoseconds of the last SetAuthEnabled
	refresh   func(context.Context) error
	refreshMu sync.Mutex // one refresh at a time; the callers queued behind it find the state fresh
}

// FreshFor is how old a "disabled" may be when a direct caller (neither internal TLS nor the secret) is let
// through on it, on a guard with a refresh (SetRefresh); an older one is read again first.
const FreshFor = 500 * time.Millisecond

// SetRefresh gives the guard a way to read the auth state again (by calling SetAuthEnabled), so that the
// service may poll it rarely: a direct caller is never let through on a "disabled" older than FreshFor. Call it
// before the server serves.
func (g *Guard) SetRefresh(refresh func(context.Context) error) { g.refresh = refresh }

// NewGuard returns the guard of a server whose listener is internal mutual TLS (internalTLS: every caller has
// been verified as internal), or else expects secret from its frontends (an empty secret: no caller proves
// anything, so while authentication is enabled every call is refused). Until SetAuthEnabled is first called
// calls wait for it.
func NewGuard(secret string, internalTLS bool) *Guard {
	return &Guard{secret: []byte(secret), internalTLS: internalTLS, known: make(chan struct{})}
}

// SetAuthEnabled records whether the auth store has authentication enabled.
func (g *Guard) SetAuthEnabled(enabled bool) {
	g.authEnabled.Store(enabled)
	g.setAt.Store(time.Now().UnixNano())
	g.knownOnce.Do(func() { close(g.known) })
}

// Check returns ErrDirectClient when authentication is enabled and ctx's call comes from neither an internal
// TLS peer nor a caller with the relay secret. Until the auth state is known it waits for it, as long as ctx
// lets it.
func (g *Guard) Check(ctx context.Context) error {
	if g.internalTLS {
		return nil
	}
	select {
	case <-g.known:
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
	if !g.authEnabled.Load() && (g.refresh == nil || g.fresh()) {
		return nil
	}
	for _, v := range metadata.ValueFromIncomingContext(ctx, MetadataKey) {
		if len(g.secret) > 0 && subtle.ConstantTimeCompare([]byte(v), g.secret) == 1 {
			return nil
		}
	}
	if g.authEnabled.Load() {
		return ErrDirectClient
	}
	// A direct caller on an old "disabled": read the state again.
	g.refreshMu.Lock()
	defer g.refreshMu.Unlock()
	if !g.fresh() {
		if err := g.refresh(ctx); err != nil {
			return status.Errorf(codes.Unavailable, "cairn: whether authentication is enabled is not known: %v", err)
		}
	}
	if g.authEnabled.Load() {
		return ErrDirectClient
	}
	return nil
}

// fresh reports whether the auth state was set within FreshFor.
func (g *Guard) fresh() bool { return time.Now().UnixNano()-g.setAt.Load() < int64(FreshFor) }

// ServerOptions are the interceptors that apply the guard to every call but grpc health's.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			if info.FullMethod != healthpb.Health_Check_FullMethodName {
				if err := g.Check(ctx); err != nil {
					return nil, err
				}
			}
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			if info.FullMethod != healthpb.Health_Watch_FullMethodName {
				if err := g.Check(ss.Context()); err != nil {
					return err
				}
			}
			return handler(srv, ss)
		}),
	}
}

// NewSecret returns a fresh random relay secret (256 bits, hex), for a stack that starts its own frontends,
// hubs and keepers.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("relayauth: random secret: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// DialOption makes every call on a connection carry secret (none when it is empty), for a frontend's
// connections to hubs and keepers.
func DialOption(secret string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(secretCredentials(secret))
}

type secretCredentials string

func (s secretCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	return map[string]string{MetadataKey: string(s)}, nil
}

// RequireTransportSecurity is false: on a plain stack the secret travels in clear, as everything else does
// (the internal TLS links are what keeps it from the network).
func (secretCredentials) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = secretCredentials("")

// SecretFile is where a stack keeps its relay secret in dir (`cairn up` in its data dir, `cairn keys` in
// --dir): the file every frontend, watchhub and leasekeeper reads with --relay-secret-file.
func SecretFile(dir string) string { return filepath.Join(dir, "relay-secret") }

// LoadOrCreateSecretFile makes sure path holds a relay secret: a new one (NewSecret, written mode 0600 through
// a temporary file renamed over it) when there is none, the one there otherwise, so the processes of a stack
// that restart one at a time keep agreeing.
func LoadOrCreateSecretFile(path string) error {
	if _, err := ReadSecretFile(path); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	secret, err := NewSecret()
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("relayauth: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("relayauth: write %s: %w", path, err)
	}
	return nil
}

// ReadSecretFile reads the relay secret in path (surrounding white space dropped); an empty file is an error,
// since an empty secret would leave a hub refusing every frontend.
func ReadSecretFile(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("relayauth: relay secret: %w", err)
	}
	secret := strings.TrimSpace(string(raw))
	if secret == "" {
		return "", fmt.Errorf("relayauth: relay secret file %s is empty", path)
	}
	return secret, nil
}

// SecretConfig is how a service is given the relay secret: the value (--relay-secret), or a file holding it
// (--relay-secret-file), so that it shows on no command line; at most one. Each service's Config embeds it.
type SecretConfig struct {
	// RelaySecret is the secret itself (--relay-secret).
	RelaySecret string
	// RelaySecretFile holds the secret instead (--relay-secret-file; exclusive with RelaySecret).
	RelaySecretFile string
}

// RegisterFlags registers --relay-secret, with usage saying what the service does with it, and
// --relay-secret-file.
func (c *SecretConfig) RegisterFlags(fs *flag.FlagSet, usage string) {
	fs.StringVar(&c.RelaySecret, "relay-secret", c.RelaySecret, usage)
	fs.StringVar(&c.RelaySecretFile, "relay-secret-file", c.RelaySecretFile, "File holding the relay secret "+
		"(--relay-secret without showing it in ps; cairn up keeps it in DATA-DIR/relay-secret, cairn keys in "+
		"DIR/relay-secret).")
}

// Resolve returns the secret c gives (ResolveSecret).
func (c SecretConfig) Resolve() (string, error) {
	return ResolveSecret(c.RelaySecret, c.RelaySecretFile)
}

// ResolveSecret is the relay secret a process was given: secret (--relay-secret) or the content of file
// (--relay-secret-file), which are exclusive; "" when neither is set.
func ResolveSecret(secret, file string) (string, error) {
	switch {
	case file == "":
		return secret, nil
	case secret != "":
		return "", errors.New("relayauth: --relay-secret and --relay-secret-file are exclusive: give one")
	}
	return ReadSecretFile(file)
}
