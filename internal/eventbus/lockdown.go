package eventbus

import (
	"github.com/nats-io/nats-server/v2/server"
)

// Roles of the processes on the bus. A locked-down bus knows a process by its role, and each role's publish
// and subscribe permissions are nats-server's own: only storages publish applied records, lease changes and
// turns; watchhubs and leasekeepers only subscribe to what they read; interest announcements come only from
// watchhubs. A process proves its role with a certificate whose URI SAN is RoleURI(role) (TLS,
// nats-server's verify_and_map), or with the role's nkey (RoleKeys, nats-server's nkey users). A client that
// proves no role is refused.
const (
	RoleStorage     = "storage"
	RoleWatchhub    = "watchhub"
	RoleLeasekeeper = "leasekeeper"
)

// Roles are the roles on the bus.
func Roles() []string { return []string{RoleStorage, RoleWatchhub, RoleLeasekeeper} }

// RoleURI is the URI SAN that gives a certificate role on the bus.
func RoleURI(role string) string { return "spiffe://cairn/" + role }

// rolePermissions are each role's permissions, for any subject prefix.
func rolePermissions() map[string]*server.Permissions {
	allow := func(subjects ...string) *server.SubjectPermission {
		return &server.SubjectPermission{Allow: subjects}
	}
	nothing := &server.SubjectPermission{Deny: []string{">"}}
	return map[string]*server.Permissions{
		RoleStorage: {
			Publish:   allow("*.applied.*", "*.leases.*", "*.publisher"),
			Subscribe: allow("*.publisher", "*.interest"),
		},
		RoleWatchhub: {
			Publish:   allow("*.interest"),
			Subscribe: allow("*.applied.*"),
		},
		RoleLeasekeeper: {
			Publish:   nothing,
			Subscribe: allow("*.leases.*"),
		},
	}
}

// certificateUsers are the bus's users when certificates prove roles: one per role, named by RoleURI.
func certificateUsers() []*server.User {
	var users []*server.User
	for role, perms := range rolePermissions() {
		users = append(users, &server.User{Username: RoleURI(role), Permissions: perms})
	}
	return users
}

// nkeyUsers are the bus's users when nkeys prove roles: each role's public key, with the role's permissions.
func nkeyUsers(keys RoleKeys) []*server.NkeyUser {
	perms := rolePermissions()
	var users []*server.NkeyUser
	for role, key := range keys {
		users = append(users, &server.NkeyUser{Nkey: key, Permissions: perms[role]})
	}
	return users
}
