package authtoken

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"math/big"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Defaults, etcd's.
const (
	// DefaultSimpleTTL is etcd's --auth-token-ttl (300 s).
	DefaultSimpleTTL = 300 * time.Second
	// DefaultJWTTTL is etcd's JWT ttl option default.
	DefaultJWTTTL = 5 * time.Minute
)

// ErrInvalidOptions is an --auth-token value etcd would refuse.
var ErrInvalidOptions = errors.New("auth: invalid auth options")

// ErrVerifyOnly is an attempt to issue a JWT with only a public key.
var ErrVerifyOnly = errors.New("auth: token signing attempted with verify-only key")

// Info is who a token speaks for.
type Info struct {
	Username string
	Revision uint64
}

// Provider issues and reads tokens.
type Provider interface {
	// Prefix is what a proposer puts in InternalAuthenticateRequest.simple_token (empty for JWT).
	Prefix() (string, error)
	// Assign issues user's token at auth revision rev, for the Authenticate entry applied at log index index
	// with prefix.
	Assign(prefix string, index uint64, user string, rev uint64) (string, error)
	// Info reads a token; false when it is unknown, expired, forged or malformed.
	Info(token string) (Info, bool)
	// InvalidateUser forgets user's tokens (a deleted user, a changed password), where the provider can.
	InvalidateUser(user string)
}

// New returns the provider --auth-token names. now is the clock (time.Now outside tests).
func New(option string, simpleTTL time.Duration, now func() time.Time) (Provider, error) {
	parts := strings.Split(option, ",")
	switch parts[0] {
	case "simple", "":
		if simpleTTL <= 0 {
			simpleTTL = DefaultSimpleTTL
		}
		return &Simple{ttl: simpleTTL, now: now, tokens: map[string]*simpleToken{}}, nil
	case "jwt":
		opts := map[string]string{}
		for _, p := range parts[1:] {
			k, v, ok := strings.Cut(p, "=")
			if !ok {
				return nil, fmt.Errorf("%w: %q is not key=value", ErrInvalidOptions, p)
			}
			opts[k] = v
		}
		return newJWT(opts, now)
	}
	return nil, fmt.Errorf("%w: unknown token type %q", ErrInvalidOptions, parts[0])
}

// Simple is etcd's simple token provider.
type Simple struct {
	ttl time.Duration
	now func() time.Time

	mu     sync.Mutex
	tokens map[string]*simpleToken
}

type simpleToken struct {
	info    Info
	expires time.Time
}

const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// Prefix is 16 random letters, as etcd's GenTokenPrefix.
func (s *Simple) Prefix() (string, error) {
	var b strings.Builder
	for range 16 {
		n, err := rand.Int(rand.Reader, big.NewInt(int64(len(letters))))
		if err != nil {
			return "", fmt.Errorf("token prefix: %w", err)
		}
		b.WriteByte(letters[n.Int64()])
	}
	return b.String(), nil
}

// Assign records "prefix.index" for user until its TTL passes unused.
func (s *Simple) Assign(prefix string, index uint64, user string, rev uint64) (string, error) {
	token := fmt.Sprintf("%s.%d", prefix, index)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked()
	s.tokens[token] = &simpleToken{info: Info{Username: user, Revision: rev}, expires: s.now().Add(s.ttl)}
	return token, nil
}

// TTL is how long a token may go unused.
func (s *Simple) TTL() time.Duration { return s.ttl }

// Remember records a token another process issued (a storage answered who it is), from now on as if issued
// here.
func (s *Simple) Remember(token string, info Info) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = &simpleToken{info: info, expires: s.now().Add(s.ttl)}
}

// Info reads a live token and extends its life by the TTL, as etcd's simple tokens.
func (s *Simple) Info(token string) (Info, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[token]
	now := s.now()
	if t == nil || !now.Before(t.expires) {
		delete(s.tokens, token)
		return Info{}, false
	}
	t.expires = now.Add(s.ttl)
	return t.info, true
}

// InvalidateUser forgets every token of user.
func (s *Simple) InvalidateUser(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tok, t := range s.tokens {
		if t.info.Username == user {
			delete(s.tokens, tok)
		}
	}
}

// sweepLocked drops expired tokens, so the table does not grow with abandoned ones.
func (s *Simple) sweepLocked() {
	now := s.now()
	for tok, t := range s.tokens {
		if !now.Before(t.expires) {
			delete(s.tokens, tok)
		}
	}
}

// JWT is etcd's JWT provider.
type JWT struct {
	method     jwt.SigningMethod
	signKey    any // nil: verify only
	verifyKey  any
	ttl        time.Duration
	now        func() time.Time
	parserOpts []jwt.ParserOption
}

func newJWT(opts map[string]string, now func() time.Time) (*JWT, error) {
	for k := range opts {
		switch k {
		case "pub-key", "priv-key", "sign-method", "ttl":
		default:
			return nil, fmt.Errorf("%w: unknown option %q", ErrInvalidOptions, k)
		}
	}
	t := &JWT{ttl: DefaultJWTTTL, now: now}
	if v := opts["ttl"]; v != "" {
		ttl, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("%w: ttl: %w", ErrInvalidOptions, err)
		}
		t.ttl = ttl
	}
	t.method = jwt.GetSigningMethod(opts["sign-method"])
	if t.method == nil {
		return nil, fmt.Errorf("%w: sign-method %q", ErrInvalidOptions, opts["sign-method"])
	}
	read := func(name string) ([]byte, error) {
		if opts[name] == "" {
			return nil, nil
		}
		data, err := os.ReadFile(opts[name])
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidOptions, name, err)
		}
		return data, nil
	}
	priv, err := read("priv-key")
	if err != nil {
		return nil, err
	}
	pub, err := read("pub-key")
	if err != nil {
		return nil, err
	}
	if err := t.loadKeys(priv, pub); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	t.parserOpts = []jwt.ParserOption{jwt.WithValidMethods([]string{t.method.Alg()}), jwt.WithTimeFunc(now),
		jwt.WithExpirationRequired()}
	return t, nil
}

func (t *JWT) loadKeys(priv, pub []byte) error {
	if len(priv) == 0 && len(pub) == 0 {
		return errors.New("missing key data")
	}
	var err error
	switch t.method.(type) {
	case *jwt.SigningMethodHMAC:
		if len(priv) == 0 {
			return errors.New("HMAC needs priv-key")
		}
		t.signKey, t.verifyKey = priv, priv
		return nil
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS:
		if len(priv) > 0 {
			var k *rsa.PrivateKey
			if k, err = jwt.ParseRSAPrivateKeyFromPEM(priv); err == nil {
				t.signKey, t.verifyKey = k, &k.PublicKey
			}
		} else {
			t.verifyKey, err = jwt.ParseRSAPublicKeyFromPEM(pub)
		}
	case *jwt.SigningMethodECDSA:
		if len(priv) > 0 {
			var k *ecdsa.PrivateKey
			if k, err = jwt.ParseECPrivateKeyFromPEM(priv); err == nil {
				t.signKey, t.verifyKey = k, &k.PublicKey
			}
		} else {
			t.verifyKey, err = jwt.ParseECPublicKeyFromPEM(pub)
		}
	case *jwt.SigningMethodEd25519:
		if len(priv) > 0 {
			var k any
			if k, err = jwt.ParseEdPrivateKeyFromPEM(priv); err == nil {
				t.signKey, t.verifyKey = k, k.(ed25519.PrivateKey).Public()
			}
		} else {
			t.verifyKey, err = jwt.ParseEdPublicKeyFromPEM(pub)
		}
	default:
		return fmt.Errorf("unsupported signing method %s", t.method.Alg())
	}
	return err
}

// Prefix is empty: a JWT needs none.
func (t *JWT) Prefix() (string, error) { return "", nil }

// Assign signs etcd's claims: username, revision, exp.
func (t *JWT) Assign(_ string, _ uint64, user string, rev uint64) (string, error) {
	if t.signKey == nil {
		return "", ErrVerifyOnly
	}
	token := jwt.NewWithClaims(t.method, jwt.MapClaims{"username": user, "revision": rev,
		"exp": t.now().Add(t.ttl).Unix()})
	signed, err := token.SignedString(t.signKey)
	if err != nil {
		return "", fmt.Errorf("sign token for %q: %w", user, err)
	}
	return signed, nil
}

// Info verifies the signature, method and expiry and reads the claims.
func (t *JWT) Info(token string) (Info, bool) {
	parsed, err := jwt.Parse(token, func(*jwt.Token) (any, error) { return t.verifyKey, nil }, t.parserOpts...)
	if err != nil || !parsed.Valid {
		return Info{}, false
	}
	claims, ok := parsed.Claims.(jwt.MapClaims)
	if !ok {
		return Info{}, false
	}
	user, ok := claims["username"].(string)
	if !ok {
		return Info{}, false
	}
	rev, ok := claims["revision"].(float64)
	if !ok {
		return Info{}, false
	}
	return Info{Username: user, Revision: uint64(rev)}, true
}

// InvalidateUser does nothing: a JWT stays valid until it expires or the auth revision moves past it.
func (t *JWT) InvalidateUser(string) {}
