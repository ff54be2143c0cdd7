package seal

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Kind is the only kind a configuration file may declare, as Kubernetes names it.
const Kind = "EncryptionConfiguration"

// Provider kinds a configuration may name.
const (
	KindAESGCM    = "aesgcm"
	KindSecretbox = "secretbox"
	KindKMS       = "kms"
	KindIdentity  = "identity"
)

// KeySize is the size of every local key (AES-256, secretbox), in bytes.
const KeySize = 32

// DefaultKMSTimeout bounds one call to a KMS plugin when the file sets no timeout.
const DefaultKMSTimeout = 3 * time.Second

// ErrConfig marks every error about a configuration file.
var ErrConfig = errors.New("seal: bad encryption configuration")

// Config is an EncryptionConfiguration: resources, each a set of key prefixes with its providers in order.
type Config struct {
	Kind       string           `yaml:"kind"`
	APIVersion string           `yaml:"apiVersion"`
	Resources  []ResourceConfig `yaml:"resources"`
}

// ResourceConfig is one resource: the key prefixes it covers (where Kubernetes has resource names) and its
// providers; the first seals, all open.
type ResourceConfig struct {
	Prefixes  []string         `yaml:"prefixes"`
	Providers []ProviderConfig `yaml:"providers"`
}

// ProviderConfig is one provider; exactly one of its fields is set (Kind says which).
type ProviderConfig struct {
	Kind      string
	AESGCM    *KeysConfig
	Secretbox *KeysConfig
	KMS       *KMSConfig
}

// KeysConfig lists a local provider's keys; the first is primary (seals new data keys).
type KeysConfig struct {
	Keys []KeyConfig `yaml:"keys"`
}

// KeyConfig is a named local key; Secret is the base64 of KeySize random bytes.
type KeyConfig struct {
	Name   string `yaml:"name"`
	Secret string `yaml:"secret"`
}

// KMSConfig is a KMS provider run as a go-plugin plugin: Command (with Args) is started and spoken to over
// gRPC; Name names it in sealed values' headers, so it must stay the same for as long as values use it.
type KMSConfig struct {
	// APIVersion is accepted for Kubernetes' shape and ignored: the plugin protocol is kmsplugin's version 1.
	APIVersion string        `yaml:"apiVersion"`
	Name       string        `yaml:"name"`
	Command    string        `yaml:"command"`
	Args       []string      `yaml:"args"`
	Timeout    time.Duration `yaml:"timeout"`
	// CacheSize bounds the unwrapped data keys kept (0: DefaultCacheSize); the keyring's one cache takes the
	// largest of the file.
	CacheSize int `yaml:"cachesize"`
}

// UnmarshalYAML reads a provider: a mapping with exactly one known provider kind.
func (p *ProviderConfig) UnmarshalYAML(node *yaml.Node) error {
	var fields map[string]yaml.Node
	if err := node.Decode(&fields); err != nil {
		return err
	}
	if len(fields) != 1 {
		return fmt.Errorf("line %d: a provider has exactly one kind (aesgcm, secretbox, kms or identity), got %d", node.Line, len(fields))
	}
	for kind, body := range fields {
		p.Kind = kind
		switch kind {
		case KindAESGCM:
			p.AESGCM = &KeysConfig{}
			return decodeStrict(&body, p.AESGCM)
		case KindSecretbox:
			p.Secretbox = &KeysConfig{}
			return decodeStrict(&body, p.Secretbox)
		case KindKMS:
			p.KMS = &KMSConfig{}
			return decodeStrict(&body, p.KMS)
		case KindIdentity:
			return nil
		default:
			return fmt.Errorf("line %d: unknown provider %q (known: aesgcm, secretbox, kms, identity)", body.Line, kind)
		}
	}
	return nil
}

// decodeStrict decodes node into out, refusing fields out does not have.
func decodeStrict(node *yaml.Node, out any) error {
	raw, err := yaml.Marshal(node)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("line %d: %w", node.Line, err)
	}
	return nil
}

// LoadConfig reads and validates the configuration file at path.
func LoadConfig(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	cfg, err := ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes and validates a configuration file's contents.
func ParseConfig(raw []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	cfg := &Config{}
	if err := dec.Decode(cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Validate reports every problem of the file: a wrong kind, a resource without prefixes or providers, a
// duplicate prefix, a key that is short, unnamed, named twice or not base64, a KMS provider without a name or
// command, or two KMS providers of one name.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Kind != Kind {
		bad("kind is %q, want %q", c.Kind, Kind)
	}
	if len(c.Resources) == 0 {
		bad("no resources")
	}
	prefixes := map[string]bool{}
	secrets := map[string]string{} // kind/name → secret: one name, one secret across the file
	kmsNames := map[string]bool{}
	for i, r := range c.Resources {
		where := fmt.Sprintf("resources[%d]", i)
		if len(r.Prefixes) == 0 {
			bad("%s: no prefixes", where)
		}
		for _, p := range r.Prefixes {
			if prefixes[p] {
				bad("%s: prefix %q is in more than one resource", where, p)
			}
			prefixes[p] = true
		}
		if len(r.Providers) == 0 {
			bad("%s: no providers", where)
		}
		identities := 0
		for j, p := range r.Providers {
			pwhere := fmt.Sprintf("%s.providers[%d] (%s)", where, j, p.Kind)
			switch p.Kind {
			case KindIdentity:
				identities++
			case KindAESGCM, KindSecretbox:
				keys := p.AESGCM
				if keys == nil {
					keys = p.Secretbox
				}
				if len(keys.Keys) == 0 {
					bad("%s: no keys", pwhere)
				}
				names := map[string]bool{}
				for _, k := range keys.Keys {
					if err := checkName(k.Name); err != nil {
						bad("%s: key %q: %v", pwhere, k.Name, err)
					}
					if names[k.Name] {
						bad("%s: duplicate key name %q", pwhere, k.Name)
					}
					names[k.Name] = true
					if _, err := decodeSecret(k.Secret); err != nil {
						bad("%s: key %q: %v", pwhere, k.Name, err)
					}
					id := p.Kind + "/" + k.Name
					if s, ok := secrets[id]; ok && s != k.Secret {
						bad("%s: key name %q is used with another secret elsewhere in the file", pwhere, k.Name)
					}
					secrets[id] = k.Secret
				}
			case KindKMS:
				if err := checkName(p.KMS.Name); err != nil {
					bad("%s: name %q: %v", pwhere, p.KMS.Name, err)
				} else if p.KMS.Name == KindAESGCM || p.KMS.Name == KindSecretbox {
					bad("%s: name %q is a local provider's", pwhere, p.KMS.Name)
				}
				if kmsNames[p.KMS.Name] && !sameKMS(c, p.KMS) {
					bad("%s: duplicate kms name %q", pwhere, p.KMS.Name)
				}
				kmsNames[p.KMS.Name] = true
				if p.KMS.Command == "" {
					bad("%s: no command", pwhere)
				}
				if p.KMS.Timeout < 0 || p.KMS.CacheSize < 0 {
					bad("%s: negative timeout or cachesize", pwhere)
				}
			default:
				bad("%s: unknown provider", pwhere)
			}
		}
		if identities > 1 {
			bad("%s: identity listed %d times", where, identities)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// sameKMS reports whether every KMS provider of c named like k is configured exactly as k (one plugin listed in
// several resources).
func sameKMS(c *Config, k *KMSConfig) bool {
	for _, r := range c.Resources {
		for _, p := range r.Providers {
			if p.KMS != nil && p.KMS.Name == k.Name && (p.KMS.Command != k.Command ||
				strings.Join(p.KMS.Args, "\x00") != strings.Join(k.Args, "\x00")) {
				return false
			}
		}
	}
	return true
}

// checkName refuses names that cannot stand in a sealed value's header.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case len(name) > 64:
		return errors.New("name longer than 64 bytes")
	case strings.ContainsAny(name, ": \t\n"):
		return errors.New("name contains ':' or white space")
	}
	return nil
}

// decodeSecret decodes a base64 key and checks its size.
func decodeSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(secret)
	if err != nil {
		return nil, fmt.Errorf("secret is not base64: %w", err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("secret is %d bytes, want %d (base64 of %d random bytes)", len(key), KeySize, KeySize)
	}
	return key, nil
}
