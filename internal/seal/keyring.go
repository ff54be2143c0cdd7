package seal

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"golang.org/x/sync/singleflight"
)

// Defaults of Options.
const (
	DefaultDataKeyUses = 1 << 20          // seals under one data key (far below AES-GCM's 2^32 random nonces)
	DefaultDataKeyAge  = 10 * time.Minute // a new data key (one Wrap, one KMS call) at least this often
	DefaultCacheSize   = 1024             // unwrapped data keys kept
	DefaultCacheTTL    = time.Hour        // an unwrapped data key is asked of its provider again after this
)

// Options tune a Keyring; zero fields take the defaults.
type Options struct {
	Logger      *slog.Logger
	DataKeyUses int64
	DataKeyAge  time.Duration
	CacheSize   int
	CacheTTL    time.Duration
	// PrimaryCheck is how often a KMS (a PrimaryReporter) is asked for its primary key while it seals.
	PrimaryCheck time.Duration
}

// Keyring seals and opens values as a Config says. It is safe for concurrent use. A nil *Keyring is encryption
// off: Seal and Open return the value as it is.
type Keyring struct {
	opts      Options
	resources []resource // longest prefix first
	providers map[string]Provider
	cache     *expirable.LRU[string, *dataKey]
	unwraps   singleflight.Group

	mu      sync.Mutex
	writers map[string]*writerKey // by provider name: the data key new values are sealed with
}

// resource is one prefix of the configuration with its sealing provider (nil: identity) and whether plain values
// are accepted.
type resource struct {
	prefix   string
	sealer   Provider
	identity bool
}

type writerKey struct {
	key     *dataKey
	header  Header
	uses    int64
	created time.Time
	checked time.Time // when a check of the provider's primary key against header's last started (checkPrimary)
	moved   bool      // the provider reported another primary key: wrap a new data key
}

// PrimaryReporter is a Provider whose primary key can change while it runs (a KMS rotating its key): the keyring
// asks it at most every Options.PrimaryCheck and wraps a new data key as soon as the primary moved.
type PrimaryReporter interface {
	PrimaryKeyID(ctx context.Context) (string, error)
}

// PrimaryCheckInterval is the default of Options.PrimaryCheck: how often a writer's data key is checked against
// its PrimaryReporter's primary key.
const PrimaryCheckInterval = 10 * time.Second

// primaryCheckDue reports whether w's provider p is a PrimaryReporter due to be asked for its primary key, and
// marks the check as started (so one seal asks, the others go on). k.mu is held.
func (k *Keyring) primaryCheckDue(p Provider, w *writerKey) (PrimaryReporter, bool) {
	reporter, ok := p.(PrimaryReporter)
	if !ok || time.Since(w.checked) < k.opts.PrimaryCheck {
		return nil, false
	}
	w.checked = time.Now()
	return reporter, true
}

// checkPrimary asks reporter for its primary key and marks w moved when it is not the one w's data key is wrapped
// under (an error keeps the current data key). It runs without k.mu: a KMS round trip, or a KMS that does not
// answer, must not hold the other seals.
func (k *Keyring) checkPrimary(ctx context.Context, reporter PrimaryReporter, w *writerKey) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	primary, err := reporter.PrimaryKeyID(ctx)
	if err != nil || primary == w.header.KeyID {
		return false
	}
	k.mu.Lock()
	w.moved = true
	k.mu.Unlock()
	return true
}

// KMSOpener starts a KMS provider; the binary passes kmsplugin's (see OpenKMS), tests may pass another.
type KMSOpener func(cfg KMSConfig, logger *slog.Logger) (Provider, error)

// NewKeyring builds the providers of cfg (starting KMS plugins with openKMS) and checks each sealing provider
// with a round trip, so a missing plugin or key fails here, at start.
func NewKeyring(ctx context.Context, cfg *Config, opts Options, openKMS KMSOpener) (*Keyring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, r := range cfg.Resources {
		for _, pc := range r.Providers {
			if pc.KMS != nil && pc.KMS.CacheSize > opts.CacheSize {
				opts.CacheSize = pc.KMS.CacheSize
			}
		}
	}
	opts = opts.withDefaults()
	k := &Keyring{opts: opts, providers: map[string]Provider{}, writers: map[string]*writerKey{},
		cache: expirable.NewLRU[string, *dataKey](opts.CacheSize, nil, opts.CacheTTL)}
	for _, r := range cfg.Resources {
		var providers []Provider
		identity := false
		for _, pc := range r.Providers {
			p, err := k.provider(pc, openKMS)
			if err != nil {
				_ = k.Close()
				return nil, err
			}
			if p == nil {
				identity = true
			}
			providers = append(providers, p)
		}
		for _, prefix := range r.Prefixes {
			k.resources = append(k.resources, resource{prefix: prefix, sealer: providers[0], identity: identity})
		}
	}
	sort.SliceStable(k.resources, func(i, j int) bool { return len(k.resources[i].prefix) > len(k.resources[j].prefix) })
	if err := k.check(ctx); err != nil {
		_ = k.Close()
		return nil, err
	}
	return k, nil
}

// LoadKeyring is NewKeyring of the file at path; an empty path is encryption off (a nil Keyring).
func LoadKeyring(ctx context.Context, path string, opts Options, openKMS KMSOpener) (*Keyring, error) {
	if path == "" {
		return nil, nil
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		return nil, err
	}
	k, err := NewKeyring(ctx, cfg, opts, openKMS)
	if err != nil {
		return nil, fmt.Errorf("encryption config %s: %w", path, err)
	}
	return k, nil
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DataKeyUses <= 0 {
		o.DataKeyUses = DefaultDataKeyUses
	}
	if o.DataKeyAge <= 0 {
		o.DataKeyAge = DefaultDataKeyAge
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.CacheTTL <= 0 {
		o.CacheTTL = DefaultCacheTTL
	}
	if o.PrimaryCheck <= 0 {
		o.PrimaryCheck = PrimaryCheckInterval
	}
	return o
}

// provider returns the Provider of pc, building it once per name; nil for identity.
func (k *Keyring) provider(pc ProviderConfig, openKMS KMSOpener) (Provider, error) {
	var name string
	switch pc.Kind {
	case KindIdentity:
		return nil, nil
	case KindKMS:
		name = pc.KMS.Name
	default:
		name = pc.Kind
	}
	if p, ok := k.providers[name]; ok {
		if local, isLocal := p.(*localProvider); isLocal {
			return local, local.merge(pc)
		}
		return p, nil
	}
	var p Provider
	var err error
	switch pc.Kind {
	case KindAESGCM:
		p, err = newLocalProvider(KindAESGCM, pc.AESGCM)
	case KindSecretbox:
		p, err = newLocalProvider(KindSecretbox, pc.Secretbox)
	case KindKMS:
		if openKMS == nil {
			return nil, fmt.Errorf("%w: kms provider %q: no plugin support in this process", ErrConfig, name)
		}
		p, err = openKMS(*pc.KMS, k.opts.Logger)
	}
	if err != nil {
		return nil, fmt.Errorf("provider %s: %w", name, err)
	}
	k.providers[name] = p
	return p, nil
}

// check seals and opens a probe with every sealing provider.
func (k *Keyring) check(ctx context.Context) error {
	for _, r := range k.resources {
		if r.sealer == nil {
			continue
		}
		probeKey := []byte(r.prefix + "\x00cairn-seal-probe")
		sealed, err := k.Seal(ctx, probeKey, []byte("probe"))
		if err != nil {
			return fmt.Errorf("provider %s cannot seal: %w", r.sealer.Name(), err)
		}
		k.cache.Purge() // open through the provider, not the cache
		if _, err := k.Open(ctx, probeKey, sealed); err != nil {
			return fmt.Errorf("provider %s cannot open what it sealed: %w", r.sealer.Name(), err)
		}
	}
	return nil
}

// Close stops the providers (KMS plugin processes).
func (k *Keyring) Close() error {
	if k == nil {
		return nil
	}
	var errs []error
	for _, p := range k.providers {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	return errors.Join(errs...)
}

func (k *Keyring) resourceOf(key []byte) (resource, bool) {
	for _, r := range k.resources {
		if strings.HasPrefix(string(key), r.prefix) {
			return r, true
		}
	}
	return resource{}, false
}

// Covers reports whether key belongs to a resource of the configuration (its values sealed, or plain only where
// the resource lists identity); the values of a key in no resource stay plain whatever the file lists.
func (k *Keyring) Covers(key []byte) bool {
	if k == nil {
		return false
	}
	_, ok := k.resourceOf(key)
	return ok
}

// Seal returns value sealed for key by the first provider of key's resource; a key in no resource, or whose
// resource's first provider is identity, keeps its value plain.
func (k *Keyring) Seal(ctx context.Context, key, value []byte) ([]byte, error) {
	if k == nil {
		return value, nil
	}
	r, ok := k.resourceOf(key)
	if !ok || r.sealer == nil {
		return value, nil
	}
	dk, err := k.writerKey(ctx, r.sealer)
	if err != nil {
		return nil, fmt.Errorf("seal value of key %q: %w", key, err)
	}
	return dk.seal(key, value), nil
}

// writerKey returns the data key p seals with now, wrapping a new one when the last is used up, old, or wrapped
// under a key its KMS no longer has as primary.
func (k *Keyring) writerKey(ctx context.Context, p Provider) (*dataKey, error) {
	k.mu.Lock()
	w := k.writers[p.Name()]
	if w != nil && !w.moved && w.uses < k.opts.DataKeyUses && time.Since(w.created) < k.opts.DataKeyAge {
		w.uses++
		reporter, due := k.primaryCheckDue(p, w)
		k.mu.Unlock()
		if due && k.checkPrimary(ctx, reporter, w) {
			return k.writerKey(ctx, p) // wraps under the new primary (or takes the data key another seal wrapped)
		}
		return w.key, nil
	}
	defer k.mu.Unlock()
	secret := make([]byte, KeySize)
	_, _ = rand.Read(secret)
	keyID, wrapped, err := p.Wrap(ctx, secret)
	if err != nil {
		return nil, fmt.Errorf("wrap a data key with %s: %w", p.Name(), err)
	}
	h := Header{Provider: p.Name(), KeyID: keyID, Wrapped: wrapped}
	dk, err := newDataKey(secret, h)
	if err != nil {
		return nil, err
	}
	k.writers[p.Name()] = &writerKey{key: dk, header: h, uses: 1, created: time.Now(), checked: time.Now()}
	k.cache.Add(string(dk.header), dk)
	k.opts.Logger.Info("new data key", "provider", p.Name(), "key", keyID)
	return dk, nil
}

// Open returns the plain value of stored, which belongs to key: opened when sealed, as it is when plain and the
// key's resource lists identity (or the key is in no resource).
func (k *Keyring) Open(ctx context.Context, key, stored []byte) ([]byte, error) {
	return k.AppendOpen(ctx, nil, key, stored)
}

// AppendOpen is Open appending the plain value to dst: the bytes of OpenedLen(stored), decrypted straight into
// dst's spare capacity when it has room, so a reader that sized its answer with OpenedLen copies a large value
// once. With dst nil, a plain value is returned as it is (stored itself, as Open does).
func (k *Keyring) AppendOpen(ctx context.Context, dst, key, stored []byte) ([]byte, error) {
	if k == nil {
		return appendPlain(dst, stored), nil
	}
	if !IsSealed(stored) {
		if r, ok := k.resourceOf(key); ok && !r.identity {
			return nil, fmt.Errorf("open value of key %q: %w", key, ErrNotSealed)
		}
		return appendPlain(dst, stored), nil
	}
	provider, keyID, _, headerLen, err := splitHeader(stored)
	if err != nil {
		return nil, fmt.Errorf("open value of key %q: %w", key, err)
	}
	dk, err := k.readerKey(ctx, stored[:headerLen])
	if err != nil {
		return nil, fmt.Errorf("open value of key %q (%s key %q): %w", key, provider, keyID, err)
	}
	plain, err := dk.appendOpen(dst, key, stored, headerLen)
	if err != nil {
		return nil, fmt.Errorf("open value of key %q (%s key %q): %w", key, provider, keyID, err)
	}
	return plain, nil
}

// appendPlain appends a plain value to dst; with dst nil it is the value itself.
func appendPlain(dst, plain []byte) []byte {
	if dst == nil {
		return plain
	}
	return append(dst, plain...)
}

// readerKey returns the data key of a sealed value's encoded header, from the cache (keyed by the header: one
// allocation per value, no parsing) or unwrapped by its provider (one call for concurrent misses of the same key).
func (k *Keyring) readerKey(ctx context.Context, header []byte) (*dataKey, error) {
	id := string(header)
	if dk, ok := k.cache.Get(id); ok {
		return dk, nil
	}
	h, _, err := ParseHeader(header)
	if err != nil {
		return nil, err
	}
	p, ok := k.providers[h.Provider]
	if !ok || p == nil {
		return nil, fmt.Errorf("%w: provider %q", ErrUnknownKey, h.Provider)
	}
	v, err, _ := k.unwraps.Do(id, func() (any, error) {
		secret, err := p.Unwrap(ctx, h.KeyID, h.Wrapped)
		if err != nil {
			return nil, err
		}
		dk, err := newDataKey(secret, h)
		if err != nil {
			return nil, err
		}
		k.cache.Add(id, dk)
		return dk, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*dataKey), nil
}

// Describe names the provider and key that sealed stored ("identity" and "" for a plain value); used to count
// values per key.
func Describe(stored []byte) (provider, keyID string) {
	h, _, err := ParseHeader(stored)
	if err != nil {
		return KindIdentity, ""
	}
	return h.Provider, h.KeyID
}

// Uses reports, for the status of a rotation, whether the configuration still has provider's keyID.
func (k *Keyring) Uses(provider, keyID string) bool {
	if k == nil {
		return provider == KindIdentity
	}
	if provider == KindIdentity {
		for _, r := range k.resources {
			if r.identity {
				return true
			}
		}
		return false
	}
	p, ok := k.providers[provider]
	if !ok {
		return false
	}
	if local, isLocal := p.(*localProvider); isLocal {
		_, has := local.keys[keyID]
		return has
	}
	return true // a KMS plugin knows its own key versions
}

// Primary names the provider and key that seal new values of key now.
func (k *Keyring) Primary(key []byte) (provider, keyID string) {
	if k == nil {
		return KindIdentity, ""
	}
	r, ok := k.resourceOf(key)
	if !ok || r.sealer == nil {
		return KindIdentity, ""
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if w := k.writers[r.sealer.Name()]; w != nil {
		return w.header.Provider, w.header.KeyID
	}
	if local, isLocal := r.sealer.(*localProvider); isLocal {
		return local.kind, local.primary
	}
	return r.sealer.Name(), ""
}
