package authstate

import (
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/pkg/v3/adt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNoPasswordUser is etcd's answer to a password given for a user added with no_password (etcd has no
// gRPC mapping for it, so clients see codes.Unknown with the auth package's text).
var ErrNoPasswordUser = status.Error(codes.Unknown,
	"auth: authentication failed, password was given for no password user")

// userPerms are a user's permissions merged over its roles, as etcd's range permission cache.
type userPerms struct {
	root          bool
	read, written adt.IntervalTree
}

// Check is etcd's isOpPermitted: with authentication enabled, user (authenticated at auth revision rev) may
// perform an operation of type perm (READ or WRITE) on key, or on [key, rangeEnd) when rangeEnd is set
// ("\x00": every key from key). A user with the root role may do anything.
func (s *State) Check(user string, rev uint64, key, rangeEnd []byte, perm authpb.Permission_Type) error {
	if !s.Enabled {
		return nil
	}
	if user == "" || rev == 0 {
		return rpctypes.ErrGRPCUserEmpty
	}
	if rev < s.Revision {
		return rpctypes.ErrGRPCAuthOldRevision
	}
	p := s.userPerms(user)
	if p == nil {
		return rpctypes.ErrGRPCPermissionDenied
	}
	if p.root {
		return nil
	}
	tree := p.read
	if perm == authpb.Permission_WRITE {
		tree = p.written
	}
	if len(rangeEnd) == 0 {
		if tree.Intersects(adt.NewBytesAffinePoint(key)) {
			return nil
		}
		return rpctypes.ErrGRPCPermissionDenied
	}
	if len(rangeEnd) == 1 && rangeEnd[0] == 0 {
		rangeEnd = nil // open ended
	}
	if tree.Contains(adt.NewBytesAffineInterval(key, rangeEnd)) {
		return nil
	}
	return rpctypes.ErrGRPCPermissionDenied
}

// CheckAdmin is etcd's IsAdminPermitted: with authentication enabled, only a user with the root role.
func (s *State) CheckAdmin(user string) error {
	if !s.Enabled {
		return nil
	}
	if user == "" {
		return rpctypes.ErrGRPCUserEmpty
	}
	u := s.Users[user]
	if u == nil {
		return rpctypes.ErrGRPCUserNotFound
	}
	if !slices.Contains(u.Roles, RootRole) {
		return rpctypes.ErrGRPCPermissionDenied
	}
	return nil
}

// userPerms returns user's merged permissions (nil for an unknown user), built on first use after a change.
// The State is not safe for concurrent use; the frontend builds every user's before sharing it (Seal).
func (s *State) userPerms(user string) *userPerms {
	if s.perms == nil {
		s.perms = make(map[string]*userPerms, len(s.Users))
		for name, u := range s.Users {
			s.perms[name] = s.merge(u)
		}
	}
	return s.perms[user]
}

// Seal builds every user's merged permissions, so that a State nobody changes any more may be read by
// several goroutines at once.
func (s *State) Seal() { s.userPerms("") }

func (s *State) merge(u *authpb.User) *userPerms {
	p := &userPerms{root: slices.Contains(u.Roles, RootRole), read: adt.NewIntervalTree(), written: adt.NewIntervalTree()}
	for _, roleName := range u.Roles {
		role := s.Roles[roleName]
		if role == nil {
			continue
		}
		for _, perm := range role.KeyPermission {
			var ivl adt.Interval
			rangeEnd := perm.RangeEnd
			if len(rangeEnd) == 1 && rangeEnd[0] == 0 {
				rangeEnd = nil
			}
			if len(perm.RangeEnd) != 0 {
				ivl = adt.NewBytesAffineInterval(perm.Key, rangeEnd)
			} else {
				ivl = adt.NewBytesAffinePoint(perm.Key)
			}
			if perm.PermType == authpb.Permission_READ || perm.PermType == authpb.Permission_READWRITE {
				p.read.Insert(ivl, struct{}{})
			}
			if perm.PermType == authpb.Permission_WRITE || perm.PermType == authpb.Permission_READWRITE {
				p.written.Insert(ivl, struct{}{})
			}
		}
	}
	return p
}

// validPermissionRange is etcd's isValidPermissionRange: a non-empty key, and a range end that is empty (one
// key), "\x00" (from key) or after the key.
func validPermissionRange(key, rangeEnd []byte) bool {
	if len(key) == 0 {
		return false
	}
	if len(rangeEnd) == 0 || (len(rangeEnd) == 1 && rangeEnd[0] == 0) {
		return true
	}
	return adt.BytesAffineComparable(key).Compare(adt.BytesAffineComparable(rangeEnd)) == -1
}
