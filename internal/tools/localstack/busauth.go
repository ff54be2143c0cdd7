package localstack

import (
	"fmt"
	"path/filepath"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/relayauth"
)

// CreateStackKeys creates in dir, keeping those already there, the credentials a plain stack (no internal
// TLS) shares between its processes: an nkey per bus role in dir/nats (eventbus.LoadOrCreateRoleKeys; seeds
// mode 0600) and the relay secret in dir/relay-secret (mode 0600). `cairn up` keeps them in its data dir,
// `cairn keys` makes them for the compose stack.
func CreateStackKeys(dir string) error {
	if _, err := eventbus.LoadOrCreateRoleKeys(NkeysDir(dir)); err != nil {
		return fmt.Errorf("localstack: %w", err)
	}
	if err := relayauth.LoadOrCreateSecretFile(relayauth.SecretFile(dir)); err != nil {
		return fmt.Errorf("localstack: %w", err)
	}
	return nil
}

// NkeysDir is where CreateStackKeys keeps the bus roles' nkeys under dir (the --nkeys-dir of NATS).
func NkeysDir(dir string) string { return filepath.Join(dir, "nats") }

// createStackKeys creates a plain stack's credentials on its first run, keeping those already there. A TLS
// stack needs none: its certificates prove the bus roles and that a caller of a hub or keeper is a frontend.
func (s *Stack) createStackKeys() error {
	if s.plan.tls() {
		return nil
	}
	return CreateStackKeys(s.cfg.DataDir)
}

// keyArgs hand a plain stack's credentials to its processes, as files so that no secret shows in ps: NATS
// lets in only the roles' nkeys, a storage, watchhub or leasekeeper connects with its role's seed, and the
// frontends prove themselves to the watchhubs and leasekeepers with the relay secret.
func (p *plan) keyArgs(svc service) []string {
	if p.tls() {
		return nil
	}
	dir := NkeysDir(p.cfg.DataDir)
	var args []string
	switch svc.name {
	case "nats":
		args = append(args, "--nkeys-dir", dir)
	case eventbus.RoleStorage, eventbus.RoleWatchhub, eventbus.RoleLeasekeeper:
		args = append(args, "--nats-nkey-seed-file", eventbus.SeedFile(dir, svc.name))
	}
	switch svc.name {
	case "frontend", eventbus.RoleWatchhub, eventbus.RoleLeasekeeper:
		args = append(args, "--relay-secret-file", relayauth.SecretFile(p.cfg.DataDir))
	}
	return args
}
