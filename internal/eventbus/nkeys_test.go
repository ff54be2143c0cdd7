package eventbus

import (
	"maps"
	"os"
	"testing"
)

// TestRoleKeysKeptPrivate: the seeds are created once, readable by their owner only, kept across calls, and
// the public keys a server loads are theirs.
func TestRoleKeysKeptPrivate(t *testing.T) {
	dir := t.TempDir() + "/nats"
	first, err := LoadOrCreateRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadOrCreateRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(first, again) {
		t.Errorf("keys changed across calls: %v, then %v", first, again)
	}
	public, err := LoadRoleKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(first, public) || len(public) != len(Roles()) {
		t.Errorf("a server loads %v, want %v", public, first)
	}
	for _, role := range Roles() {
		info, err := os.Stat(SeedFile(dir, role))
		if err != nil {
			t.Fatal(err)
		}
		if mode := info.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s seed has mode %v, want 0600", role, mode)
		}
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("keys dir: %v, %v; want mode 0700", info.Mode().Perm(), err)
	}
	if err := os.Remove(publicKeyFile(dir, RoleWatchhub)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRoleKeys(dir); err == nil {
		t.Error("a server loaded the keys with a role's public key missing")
	}
}
