package eventbus

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// RoleKeys are the public nkeys of a bus's users, by role (RoleStorage, RoleWatchhub, RoleLeasekeeper). A bus
// started with them (EmbeddedConfig.RoleKeys) lets in only a client that signs the server's nonce with one
// of their seeds (nats.go's nkey authentication, see NkeySeedFile), and gives it that role's permissions:
// the locked-down bus of a stack that runs without TLS certificates.
type RoleKeys map[string]string

// SeedFile is where LoadOrCreateRoleKeys keeps role's seed in dir: the credentials a process of that role
// connects with (--nats-nkey-seed-file).
func SeedFile(dir, role string) string { return filepath.Join(dir, role+".nk") }

// publicKeyFile is where LoadOrCreateRoleKeys keeps role's public key in dir: what the server needs.
func publicKeyFile(dir, role string) string { return filepath.Join(dir, role+".pub") }

// LoadOrCreateRoleKeys keeps an nkey per role in dir (created with mode 0700): the seed in SeedFile (mode
// 0600), the public key beside it. Keys already there are kept, so a stack's credentials outlive restarts.
func LoadOrCreateRoleKeys(dir string) (RoleKeys, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("eventbus: nkeys dir: %w", err)
	}
	keys := RoleKeys{}
	for _, role := range Roles() {
		seed, err := os.ReadFile(SeedFile(dir, role))
		if errors.Is(err, fs.ErrNotExist) {
			seed, err = createSeed(dir, role)
		}
		if err != nil {
			return nil, fmt.Errorf("eventbus: nkey of %s: %w", role, err)
		}
		pair, err := nkeys.FromSeed(bytes.TrimSpace(seed))
		if err != nil {
			return nil, fmt.Errorf("eventbus: nkey seed %s: %w", SeedFile(dir, role), err)
		}
		public, err := pair.PublicKey()
		pair.Wipe()
		if err != nil {
			return nil, fmt.Errorf("eventbus: nkey seed %s: %w", SeedFile(dir, role), err)
		}
		if err := writeFileAtomic(publicKeyFile(dir, role), []byte(public+"\n"), 0o644); err != nil {
			return nil, err
		}
		keys[role] = public
	}
	return keys, nil
}

// createSeed writes a new user nkey's seed for role in dir.
func createSeed(dir, role string) ([]byte, error) {
	pair, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	defer pair.Wipe()
	seed, err := pair.Seed() // wiped with the pair: copied
	if err != nil {
		return nil, err
	}
	seed = append(bytes.Clone(seed), '\n')
	return seed, writeFileAtomic(SeedFile(dir, role), seed, 0o600)
}

// LoadRoleKeys reads the public keys LoadOrCreateRoleKeys keeps in dir: what a server needs (it reads no
// seed). Every role must have one.
func LoadRoleKeys(dir string) (RoleKeys, error) {
	keys := RoleKeys{}
	for _, role := range Roles() {
		raw, err := os.ReadFile(publicKeyFile(dir, role))
		if err != nil {
			return nil, fmt.Errorf("eventbus: public nkey of %s: %w", role, err)
		}
		key := string(bytes.TrimSpace(raw))
		if !nkeys.IsValidPublicUserKey(key) {
			return nil, fmt.Errorf("eventbus: %s holds no public user nkey", publicKeyFile(dir, role))
		}
		keys[role] = key
	}
	return keys, nil
}

// NkeySeedFile authenticates a connection with the nkey seed in path (as SeedFile holds it), read again at
// each (re)connect; no option at all when path is empty.
func NkeySeedFile(path string) nats.Option {
	return func(o *nats.Options) error {
		if path == "" {
			return nil
		}
		option, err := nats.NkeyOptionFromSeed(path)
		if err != nil {
			return fmt.Errorf("eventbus: --nats-nkey-seed-file %s: %w", path, err)
		}
		return option(o)
	}
}

// writeFileAtomic writes data to path through a temporary file renamed over it, so a crash leaves the old
// file or the new one (as tlsconfig writes certificates).
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("eventbus: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("eventbus: write %s: %w", path, err)
	}
	return nil
}
