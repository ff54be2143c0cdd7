package seal

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"

	"golang.org/x/crypto/nacl/secretbox"
)

// Provider holds key-encryption keys: it wraps new data keys under its primary key and unwraps the data keys of
// any key it has. A KMS plugin is a Provider (package kmsplugin); the local ones are aesgcm and secretbox.
type Provider interface {
	// Name is the provider's name in sealed values' headers.
	Name() string
	// Wrap wraps dataKey under the primary key and returns that key's name with the wrapped bytes.
	Wrap(ctx context.Context, dataKey []byte) (keyID string, wrapped []byte, err error)
	// Unwrap returns the data key that Wrap wrapped under keyID; ErrUnknownKey when the key is not there,
	// ErrAuthFailed when wrapped does not authenticate, ErrUnavailable when the provider cannot answer now.
	Unwrap(ctx context.Context, keyID string, wrapped []byte) ([]byte, error)
	// Close releases what the provider holds (a plugin process).
	Close() error
}

// localProvider is aesgcm or secretbox: named keys from the configuration file, the first one primary.
type localProvider struct {
	kind    string
	primary string
	keys    map[string][]byte
}

func newLocalProvider(kind string, keys *KeysConfig) (*localProvider, error) {
	p := &localProvider{kind: kind, primary: keys.Keys[0].Name, keys: map[string][]byte{}}
	for _, k := range keys.Keys {
		secret, err := decodeSecret(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("%w: %s key %q: %w", ErrConfig, kind, k.Name, err)
		}
		p.keys[k.Name] = secret
	}
	return p, nil
}

// merge adds the keys of another listing of the same provider kind (the file's validation made sure a name has
// one secret); the primary stays the first key of the first listing.
func (p *localProvider) merge(pc ProviderConfig) error {
	keys := pc.AESGCM
	if keys == nil {
		keys = pc.Secretbox
	}
	for _, k := range keys.Keys {
		secret, err := decodeSecret(k.Secret)
		if err != nil {
			return fmt.Errorf("%w: %s key %q: %w", ErrConfig, p.kind, k.Name, err)
		}
		p.keys[k.Name] = secret
	}
	return nil
}

func (p *localProvider) Name() string { return p.kind }

func (p *localProvider) Close() error { return nil }

func (p *localProvider) Wrap(_ context.Context, dataKey []byte) (string, []byte, error) {
	kek := p.keys[p.primary]
	if p.kind == KindSecretbox {
		var nonce [24]byte
		_, _ = rand.Read(nonce[:])
		return p.primary, secretbox.Seal(nonce[:], dataKey, &nonce, (*[32]byte)(kek)), nil
	}
	aead, err := gcm(kek)
	if err != nil {
		return "", nil, err
	}
	nonce := make([]byte, nonceSize, nonceSize+len(dataKey)+aead.Overhead())
	_, _ = rand.Read(nonce)
	return p.primary, aead.Seal(nonce, nonce, dataKey, []byte(p.primary)), nil
}

func (p *localProvider) Unwrap(_ context.Context, keyID string, wrapped []byte) ([]byte, error) {
	kek, ok := p.keys[keyID]
	if !ok {
		return nil, fmt.Errorf("%w: %s key %q", ErrUnknownKey, p.kind, keyID)
	}
	if p.kind == KindSecretbox {
		if len(wrapped) < 24 {
			return nil, ErrMalformed
		}
		dataKey, ok := secretbox.Open(nil, wrapped[24:], (*[24]byte)(wrapped[:24]), (*[32]byte)(kek))
		if !ok {
			return nil, fmt.Errorf("%w: data key under %s key %q", ErrAuthFailed, p.kind, keyID)
		}
		return dataKey, nil
	}
	aead, err := gcm(kek)
	if err != nil {
		return nil, err
	}
	if len(wrapped) < nonceSize {
		return nil, ErrMalformed
	}
	dataKey, err := aead.Open(nil, wrapped[:nonceSize], wrapped[nonceSize:], []byte(keyID))
	if err != nil {
		return nil, fmt.Errorf("%w: data key under %s key %q", ErrAuthFailed, p.kind, keyID)
	}
	return dataKey, nil
}

func gcm(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
