package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
)

// Magic starts every sealed value; the version is part of it.
const Magic = "cairn:enc:v1:"

const nonceSize = 12

// Errors of Open (wrapped with the etcd key and the value's provider and key name).
var (
	// ErrAuthFailed: the ciphertext, its header or its data key did not authenticate (tampered, or a key of the
	// same name with another secret). Never retry.
	ErrAuthFailed = errors.New("seal: sealed value failed authentication")
	// ErrUnknownKey: the value names a provider or key the configuration does not have.
	ErrUnknownKey = errors.New("seal: sealed with a provider or key that is not configured")
	// ErrNotSealed: a plain value where the key's resource does not list identity.
	ErrNotSealed = errors.New("seal: value is not sealed and identity is not configured for its key")
	// ErrUnavailable: the provider (a KMS plugin) did not answer; the call may be retried.
	ErrUnavailable = errors.New("seal: key provider unavailable")
	// ErrMalformed: the value starts like a sealed value but its header cannot be read.
	ErrMalformed = errors.New("seal: malformed sealed value")
)

// Header is what a sealed value's header says.
type Header struct {
	Provider string // "aesgcm", "secretbox" or a KMS provider's name
	KeyID    string // the key-encryption key's name (a KMS plugin's key version)
	Wrapped  []byte // the wrapped data key
}

// IsSealed reports whether value carries a sealed value's header.
func IsSealed(value []byte) bool { return bytes.HasPrefix(value, []byte(Magic)) }

// ParseHeader reads a sealed value's header and returns it with the length of the header in bytes.
func ParseHeader(value []byte) (Header, int, error) {
	provider, keyID, wrapped, headerLen, err := splitHeader(value)
	if err != nil {
		return Header{}, 0, err
	}
	return Header{Provider: string(provider), KeyID: string(keyID), Wrapped: wrapped}, headerLen, nil
}

// splitHeader is ParseHeader without allocating: the header's fields are slices of value.
func splitHeader(value []byte) (provider, keyID, wrapped []byte, headerLen int, err error) {
	if !IsSealed(value) {
		return nil, nil, nil, 0, ErrNotSealed
	}
	rest := value[len(Magic):]
	provider, rest, ok := bytes.Cut(rest, []byte(":"))
	if !ok {
		return nil, nil, nil, 0, ErrMalformed
	}
	keyID, rest, ok = bytes.Cut(rest, []byte(":"))
	if !ok {
		return nil, nil, nil, 0, ErrMalformed
	}
	wrappedLen, n := binary.Uvarint(rest)
	if n <= 0 || wrappedLen > uint64(len(rest)-n) {
		return nil, nil, nil, 0, ErrMalformed
	}
	rest = rest[n:]
	return provider, keyID, rest[:wrappedLen], len(value) - len(rest) + int(wrappedLen), nil
}

// appendHeader appends h's encoding to out.
func appendHeader(out []byte, h Header) []byte {
	out = append(out, Magic...)
	out = append(out, h.Provider...)
	out = append(out, ':')
	out = append(out, h.KeyID...)
	out = append(out, ':')
	out = binary.AppendUvarint(out, uint64(len(h.Wrapped)))
	return append(out, h.Wrapped...)
}

// dataKey is an unwrapped data key ready to seal or open values, with its encoded header.
type dataKey struct {
	aead   cipher.AEAD
	header []byte
}

func newDataKey(secret []byte, h Header) (*dataKey, error) {
	block, err := aes.NewCipher(secret)
	if err != nil {
		return nil, fmt.Errorf("data key of %s/%s: %w", h.Provider, h.KeyID, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &dataKey{aead: aead, header: appendHeader(nil, h)}, nil
}

// seal returns header ‖ nonce ‖ AES-GCM(value), authenticating the header and the etcd key.
func (k *dataKey) seal(key, value []byte) []byte {
	out := make([]byte, 0, len(k.header)+nonceSize+len(value)+k.aead.Overhead())
	out = append(out, k.header...)
	nonce := out[len(out) : len(out)+nonceSize]
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails (Go ≥ 1.24)
	out = out[:len(out)+nonceSize]
	return k.aead.Seal(out, nonce, value, additionalData(out[:len(k.header)], key))
}

// appendOpen authenticates and decrypts the ciphertext that follows a headerLen-byte header, appending the plain
// value to dst (no allocation when dst has room for it).
func (k *dataKey) appendOpen(dst, key, sealed []byte, headerLen int) ([]byte, error) {
	if len(sealed) < headerLen+nonceSize+k.aead.Overhead() {
		return nil, ErrMalformed
	}
	nonce := sealed[headerLen : headerLen+nonceSize]
	plain, err := k.aead.Open(dst, nonce, sealed[headerLen+nonceSize:], additionalData(sealed[:headerLen], key))
	if err != nil {
		return nil, ErrAuthFailed
	}
	return plain, nil
}

// tagSize is AES-GCM's authentication tag, the ciphertext's overhead over the plain value.
const tagSize = 16

// OpenedLen is the length of the plain value Open returns for stored: stored's own length when it is not sealed.
// It lets a caller make room for the plain value before opening it into that room (Keyring.AppendOpen).
func OpenedLen(stored []byte) (int, error) {
	if !IsSealed(stored) {
		return len(stored), nil
	}
	_, _, _, headerLen, err := splitHeader(stored)
	if err != nil {
		return 0, err
	}
	if len(stored) < headerLen+nonceSize+tagSize {
		return 0, ErrMalformed
	}
	return len(stored) - headerLen - nonceSize - tagSize, nil
}

// additionalData is what a value's ciphertext authenticates besides itself: its header and its etcd key.
func additionalData(header, key []byte) []byte {
	ad := make([]byte, 0, len(header)+len(key))
	return append(append(ad, header...), key...)
}
