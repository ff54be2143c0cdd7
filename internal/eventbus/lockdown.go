package eventbus

import (
	"fmt"
	"log/slog"

	"github.com/nats-io/nats-server/v2/server"
)

// Roles of the processes on the bus. With TLS, a process is known to NATS by its certificate's URI SAN
// RoleURI(role) (nats-server's verify_and_map), and each role's publish and subscribe permissions are
// nats-server's own: only storages publish applied records, lease changes and turns; watchhubs and
// leasekeepers only subscribe to what they read; interest announcements come only from watchhubs. A client
// without a certificate of the cluster's CA, or with one naming no role, is refused.
const (
	RoleStorage     = "storage"
	RoleWatchhub    = "watchhub"
	RoleLeasekeeper = "leasekeeper"
)

// RoleURI is the URI SAN that gives a certificate role on the bus.
func RoleURI(role string) string { return "spiffe://cairn/" + role }

// rolePermissions are the bus's users, one per role, named by RoleURI, for any subject prefix.
func rolePermissions() []*server.User {
	allow := func(subjects ...string) *server.SubjectPermission {
		return &server.SubjectPermission{Allow: subjects}
	}
	nothing := &server.SubjectPermission{Deny: []string{">"}}
	return []*server.User{
		{Username: RoleURI(RoleStorage), Permissions: &server.Permissions{
			Publish:   allow("*.applied.*", "*.leases.*", "*.publisher"),
			Subscribe: allow("*.publisher", "*.interest"),
		}},
		{Username: RoleURI(RoleWatchhub), Permissions: &server.Permissions{
			Publish:   allow("*.interest"),
			Subscribe: allow("*.applied.*"),
		}},
		{Username: RoleURI(RoleLeasekeeper), Permissions: &server.Permissions{
			Publish:   nothing,
			Subscribe: allow("*.leases.*"),
		}},
	}
}

// slogNATS writes nats-server's log lines (refused connections, authorization errors) to a slog.Logger.
type slogNATS struct{ logger *slog.Logger }

func (l slogNATS) Noticef(format string, v ...any) { l.logger.Info(fmt.Sprintf(format, v...)) }
func (l slogNATS) Warnf(format string, v ...any)   { l.logger.Warn(fmt.Sprintf(format, v...)) }
func (l slogNATS) Fatalf(format string, v ...any)  { l.logger.Error(fmt.Sprintf(format, v...)) }
func (l slogNATS) Errorf(format string, v ...any)  { l.logger.Error(fmt.Sprintf(format, v...)) }
func (l slogNATS) Debugf(format string, v ...any)  { l.logger.Debug(fmt.Sprintf(format, v...)) }
func (l slogNATS) Tracef(format string, v ...any)  { l.logger.Debug(fmt.Sprintf(format, v...)) }
