package localstack

import (
	"fmt"
	"path/filepath"

	"github.com/cairn-kv/cairn/internal/eventbus"
)

// nkeysDir is where a plain stack keeps its bus credentials: an nkey per role (seeds mode 0600).
func (p *plan) nkeysDir() string { return filepath.Join(p.cfg.DataDir, "nats") }

// createBusKeys creates a plain stack's bus credentials on its first run, keeping those already there. A TLS
// stack needs none: its certificates prove the roles.
func (s *Stack) createBusKeys() error {
	if s.plan.tls() {
		return nil
	}
	if _, err := eventbus.LoadOrCreateRoleKeys(s.plan.nkeysDir()); err != nil {
		return fmt.Errorf("localstack: %w", err)
	}
	return nil
}

// busArgs lock a plain stack's bus down: NATS lets in only the roles' nkeys, and a storage, watchhub or
// leasekeeper connects with its role's seed (a file, so no secret shows in ps).
func (p *plan) busArgs(svc service) []string {
	if p.tls() {
		return nil
	}
	switch svc.name {
	case "nats":
		return []string{"--nkeys-dir", p.nkeysDir()}
	case eventbus.RoleStorage, eventbus.RoleWatchhub, eventbus.RoleLeasekeeper:
		return []string{"--nats-nkey-seed-file", eventbus.SeedFile(p.nkeysDir(), svc.name)}
	}
	return nil
}
