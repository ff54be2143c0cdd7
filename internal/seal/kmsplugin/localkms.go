package kmsplugin

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/kmspb"
)

// KeyFile is the reference plugin's key store: key versions, one primary. Secrets are base64 of 32 bytes.
type KeyFile struct {
	Primary  string       `json:"primary"`
	Versions []KeyVersion `json:"versions"`
}

// KeyVersion is one version of the local KMS's key.
type KeyVersion struct {
	ID      string    `json:"id"`
	Secret  string    `json:"secret"`
	Created time.Time `json:"created"`
}

// RotateKeyFile adds a new key version to the key file at path (creating the file when missing) and makes it
// primary; the running plugins pick it up at their next call. It returns the new version's ID.
func RotateKeyFile(path string) (string, error) {
	kf := &KeyFile{}
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return "", err
	default:
		if err := json.Unmarshal(raw, kf); err != nil {
			return "", fmt.Errorf("key file %s: %w", path, err)
		}
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	id := fmt.Sprintf("v%d", len(kf.Versions)+1)
	kf.Versions = append(kf.Versions, KeyVersion{ID: id, Secret: base64.StdEncoding.EncodeToString(secret), Created: time.Now().UTC()})
	kf.Primary = id
	out, err := json.MarshalIndent(kf, "", "  ")
	if err != nil {
		return "", err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return "", err
	}
	return id, os.Rename(tmp, path)
}

// LocalKMS is the reference plugin's KeyService: data keys wrapped with AES-256-GCM under the key versions of a
// KeyFile, re-read whenever the file changes.
type LocalKMS struct {
	kmspb.UnimplementedKeyServiceServer
	path string

	mu       sync.Mutex
	modTime  time.Time
	primary  string
	versions map[string]cipher.AEAD
}

// NewLocalKMS serves the key file at path, which must exist (see RotateKeyFile).
func NewLocalKMS(path string) (*LocalKMS, error) {
	k := &LocalKMS{path: path}
	if _, _, err := k.keys(); err != nil {
		return nil, err
	}
	return k, nil
}

// keys returns the primary key's ID and every version, reloading the file when it changed.
func (k *LocalKMS) keys() (string, map[string]cipher.AEAD, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	info, err := os.Stat(k.path)
	if err != nil {
		return "", nil, status.Errorf(codes.Unavailable, "key file: %v", err)
	}
	if info.ModTime().Equal(k.modTime) && k.versions != nil {
		return k.primary, k.versions, nil
	}
	raw, err := os.ReadFile(k.path)
	if err != nil {
		return "", nil, status.Errorf(codes.Unavailable, "key file: %v", err)
	}
	kf := &KeyFile{}
	if err := json.Unmarshal(raw, kf); err != nil {
		return "", nil, status.Errorf(codes.Unavailable, "key file %s: %v", k.path, err)
	}
	versions := map[string]cipher.AEAD{}
	for _, v := range kf.Versions {
		secret, err := base64.StdEncoding.DecodeString(v.Secret)
		if err != nil || len(secret) != 32 {
			return "", nil, status.Errorf(codes.Unavailable, "key file %s: version %s: not base64 of 32 bytes", k.path, v.ID)
		}
		block, _ := aes.NewCipher(secret)
		aead, _ := cipher.NewGCM(block)
		versions[v.ID] = aead
	}
	if versions[kf.Primary] == nil {
		return "", nil, status.Errorf(codes.Unavailable, "key file %s: primary %q is not a version", k.path, kf.Primary)
	}
	k.modTime, k.primary, k.versions = info.ModTime(), kf.Primary, versions
	return k.primary, k.versions, nil
}

// Status reports v1, ok and the primary key version.
func (k *LocalKMS) Status(context.Context, *kmspb.StatusRequest) (*kmspb.StatusResponse, error) {
	primary, _, err := k.keys()
	if err != nil {
		return nil, err
	}
	return &kmspb.StatusResponse{Version: "v1", Healthz: "ok", KeyId: primary}, nil
}

// Encrypt wraps a data key under the primary version.
func (k *LocalKMS) Encrypt(_ context.Context, r *kmspb.EncryptRequest) (*kmspb.EncryptResponse, error) {
	primary, versions, err := k.keys()
	if err != nil {
		return nil, err
	}
	aead := versions[primary]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(r.Plaintext)+aead.Overhead())
	_, _ = rand.Read(nonce)
	return &kmspb.EncryptResponse{KeyId: primary, Ciphertext: aead.Seal(nonce, nonce, r.Plaintext, []byte(primary))}, nil
}

// Decrypt unwraps a data key: NotFound for an unknown version, InvalidArgument when it does not authenticate.
func (k *LocalKMS) Decrypt(_ context.Context, r *kmspb.DecryptRequest) (*kmspb.DecryptResponse, error) {
	_, versions, err := k.keys()
	if err != nil {
		return nil, err
	}
	aead, ok := versions[r.KeyId]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "key version %q not in %s", r.KeyId, k.path)
	}
	if len(r.Ciphertext) < aead.NonceSize() {
		return nil, status.Error(codes.InvalidArgument, "ciphertext too short")
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, r.Ciphertext[:n], r.Ciphertext[n:], []byte(r.KeyId))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "ciphertext under %q does not authenticate", r.KeyId)
	}
	return &kmspb.DecryptResponse{Plaintext: plain}, nil
}
