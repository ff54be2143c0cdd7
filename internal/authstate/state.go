package authstate

import (
	"bytes"
	"encoding/base64"
	"slices"
	"sort"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// RootUser and RootRole are etcd's: AuthEnable needs the root user with the root role, which grants everything.
const (
	RootUser = "root"
	RootRole = "root"
)

// State is one auth store: what etcd keeps in its authUsers, authRoles and auth buckets.
type State struct {
	Enabled  bool
	Revision uint64
	Users    map[string]*authpb.User
	Roles    map[string]*authpb.Role

	perms map[string]*userPerms // merged permissions per user, rebuilt after every change
}

// InitialRevision is the auth revision of a store that was never changed: etcd commits revision 1 when it
// creates its auth store.
const InitialRevision = 1

// ReadFence is what must not have grown once a read checked against s has passed its read barrier: the auth
// revision (bumped by every change of users, roles or permissions) and whether authentication is enabled
// (AuthEnable changes it without a bump, as in etcd), as one number, revision<<1 | enabled, that grows with
// every change that can make a check stricter. A store's fence higher than the one a read was checked at
// means the check may be stale. Never 0.
func (s *State) ReadFence() uint64 {
	fence := s.Revision << 1
	if s.Enabled {
		fence |= 1
	}
	return fence
}

// New returns an empty, disabled auth store at InitialRevision.
func New() *State {
	return &State{Revision: InitialRevision, Users: map[string]*authpb.User{}, Roles: map[string]*authpb.Role{}}
}

// Clone is a deep copy (the frontend's copy must not share messages with storage's).
func (s *State) Clone() *State {
	c := &State{Enabled: s.Enabled, Revision: s.Revision, Users: make(map[string]*authpb.User, len(s.Users)),
		Roles: make(map[string]*authpb.Role, len(s.Roles))}
	for n, u := range s.Users {
		c.Users[n] = proto.Clone(u).(*authpb.User)
	}
	for n, r := range s.Roles {
		c.Roles[n] = proto.Clone(r).(*authpb.Role)
	}
	return c
}

// Change is what an applied auth request changed, for the caller to persist.
type Change struct {
	// Users and Roles are the names whose records changed: the new record, or nil when deleted.
	Users map[string]*authpb.User
	Roles map[string]*authpb.Role
	// Meta is set when Enabled or Revision changed.
	Meta bool
}

// IsAuthRequest reports whether req is one of the auth requests Apply handles.
func IsAuthRequest(req *pb.InternalRaftRequest) bool {
	return req.AuthEnable != nil || req.AuthDisable != nil || req.Authenticate != nil ||
		req.AuthUserAdd != nil || req.AuthUserDelete != nil || req.AuthUserChangePassword != nil ||
		req.AuthUserGrantRole != nil || req.AuthUserRevokeRole != nil || req.AuthRoleAdd != nil ||
		req.AuthRoleDelete != nil || req.AuthRoleGrantPermission != nil || req.AuthRoleRevokePermission != nil
}

// Apply applies one auth request with etcd's semantics. A refused request (err, etcd's gRPC error) changes
// nothing. Authenticate changes nothing and answers the token the proposer chose, refused with ErrAuthFailed
// when the user is gone or has no password, or ErrAuthOldRevision when the auth store changed since the
// proposer checked the password (its header's auth revision).
func (s *State) Apply(req *pb.InternalRaftRequest) (resp proto.Message, change Change, err error) {
	change = Change{Users: map[string]*authpb.User{}, Roles: map[string]*authpb.Role{}}
	switch {
	case req.AuthEnable != nil:
		root := s.Users[RootUser]
		switch {
		case s.Enabled:
		case root == nil:
			return nil, change, rpctypes.ErrGRPCRootUserNotExist
		case !slices.Contains(root.Roles, RootRole):
			return nil, change, rpctypes.ErrGRPCRootRoleNotExist
		default:
			s.Enabled, change.Meta = true, true // etcd keeps the revision on enable
		}
		return &pb.AuthEnableResponse{}, change, nil
	case req.AuthDisable != nil:
		if s.Enabled {
			s.Enabled = false
			s.bump(&change)
		}
		return &pb.AuthDisableResponse{}, change, nil
	case req.Authenticate != nil:
		return s.authenticate(req)
	case req.AuthUserAdd != nil:
		return s.userAdd(req.AuthUserAdd, change)
	case req.AuthUserDelete != nil:
		r := req.AuthUserDelete
		if s.Enabled && r.Name == RootUser {
			return nil, change, rpctypes.ErrGRPCInvalidAuthMgmt
		}
		if s.Users[r.Name] == nil {
			return nil, change, rpctypes.ErrGRPCUserNotFound
		}
		s.putUser(r.Name, nil, &change)
		return &pb.AuthUserDeleteResponse{}, change, nil
	case req.AuthUserChangePassword != nil:
		r := req.AuthUserChangePassword
		u := s.Users[r.Name]
		if u == nil {
			return nil, change, rpctypes.ErrGRPCUserNotFound
		}
		next := &authpb.User{Name: u.Name, Roles: u.Roles, Options: u.Options}
		if u.Options == nil || !u.Options.NoPassword {
			hash, err := base64.StdEncoding.DecodeString(r.HashedPassword)
			if err != nil {
				return nil, change, ErrNoPasswordUser
			}
			next.Password = hash
		}
		s.putUser(r.Name, next, &change)
		return &pb.AuthUserChangePasswordResponse{}, change, nil
	case req.AuthUserGrantRole != nil:
		return s.userGrantRole(req.AuthUserGrantRole, change)
	case req.AuthUserRevokeRole != nil:
		return s.userRevokeRole(req.AuthUserRevokeRole, change)
	case req.AuthRoleAdd != nil:
		r := req.AuthRoleAdd
		if r.Name == "" {
			return nil, change, rpctypes.ErrGRPCRoleEmpty
		}
		if s.Roles[r.Name] != nil {
			return nil, change, rpctypes.ErrGRPCRoleAlreadyExist
		}
		s.putRole(r.Name, &authpb.Role{Name: []byte(r.Name)}, &change)
		return &pb.AuthRoleAddResponse{}, change, nil
	case req.AuthRoleDelete != nil:
		return s.roleDelete(req.AuthRoleDelete, change)
	case req.AuthRoleGrantPermission != nil:
		return s.roleGrantPermission(req.AuthRoleGrantPermission, change)
	case req.AuthRoleRevokePermission != nil:
		return s.roleRevokePermission(req.AuthRoleRevokePermission, change)
	}
	return nil, change, rpctypes.ErrGRPCNotCapable
}

func (s *State) authenticate(req *pb.InternalRaftRequest) (proto.Message, Change, error) {
	r := req.Authenticate
	if !s.Enabled {
		return nil, Change{}, rpctypes.ErrGRPCAuthNotEnabled
	}
	u := s.Users[r.Name]
	if u == nil || (u.Options != nil && u.Options.NoPassword) {
		return nil, Change{}, rpctypes.ErrGRPCAuthFailed
	}
	if req.Header != nil && req.Header.AuthRevision < s.Revision {
		return nil, Change{}, rpctypes.ErrGRPCAuthOldRevision
	}
	return &pb.AuthenticateResponse{Token: r.SimpleToken}, Change{}, nil
}

func (s *State) userAdd(r *pb.AuthUserAddRequest, change Change) (proto.Message, Change, error) {
	if r.Name == "" {
		return nil, change, rpctypes.ErrGRPCUserEmpty
	}
	if s.Users[r.Name] != nil {
		return nil, change, rpctypes.ErrGRPCUserAlreadyExist
	}
	options := r.Options
	if options == nil {
		options = &authpb.UserAddOptions{}
	}
	u := &authpb.User{Name: []byte(r.Name), Options: options}
	if !options.NoPassword {
		hash, err := base64.StdEncoding.DecodeString(r.HashedPassword)
		if err != nil {
			return nil, change, ErrNoPasswordUser
		}
		u.Password = hash
	}
	s.putUser(r.Name, u, &change)
	return &pb.AuthUserAddResponse{}, change, nil
}

func (s *State) userGrantRole(r *pb.AuthUserGrantRoleRequest, change Change) (proto.Message, Change, error) {
	u := s.Users[r.User]
	if u == nil {
		return nil, change, rpctypes.ErrGRPCUserNotFound
	}
	if r.Role != RootRole && s.Roles[r.Role] == nil {
		return nil, change, rpctypes.ErrGRPCRoleNotFound
	}
	if i := sort.SearchStrings(u.Roles, r.Role); i < len(u.Roles) && u.Roles[i] == r.Role {
		return &pb.AuthUserGrantRoleResponse{}, change, nil // etcd ignores a repeated grant
	}
	next := proto.Clone(u).(*authpb.User)
	next.Roles = append(next.Roles, r.Role)
	sort.Strings(next.Roles)
	s.putUser(r.User, next, &change)
	return &pb.AuthUserGrantRoleResponse{}, change, nil
}

func (s *State) userRevokeRole(r *pb.AuthUserRevokeRoleRequest, change Change) (proto.Message, Change, error) {
	if s.Enabled && r.Name == RootUser && r.Role == RootRole {
		return nil, change, rpctypes.ErrGRPCInvalidAuthMgmt
	}
	u := s.Users[r.Name]
	if u == nil {
		return nil, change, rpctypes.ErrGRPCUserNotFound
	}
	if !slices.Contains(u.Roles, r.Role) {
		return nil, change, rpctypes.ErrGRPCRoleNotGranted
	}
	next := proto.Clone(u).(*authpb.User)
	next.Roles = slices.DeleteFunc(next.Roles, func(role string) bool { return role == r.Role })
	s.putUser(r.Name, next, &change)
	return &pb.AuthUserRevokeRoleResponse{}, change, nil
}

func (s *State) roleDelete(r *pb.AuthRoleDeleteRequest, change Change) (proto.Message, Change, error) {
	if s.Enabled && r.Role == RootRole {
		return nil, change, rpctypes.ErrGRPCInvalidAuthMgmt
	}
	if s.Roles[r.Role] == nil {
		return nil, change, rpctypes.ErrGRPCRoleNotFound
	}
	s.putRole(r.Role, nil, &change)
	for name, u := range s.Users {
		if slices.Contains(u.Roles, r.Role) {
			next := proto.Clone(u).(*authpb.User)
			next.Roles = slices.DeleteFunc(next.Roles, func(role string) bool { return role == r.Role })
			s.putUser(name, next, &change)
		}
	}
	return &pb.AuthRoleDeleteResponse{}, change, nil
}

func (s *State) roleGrantPermission(r *pb.AuthRoleGrantPermissionRequest, change Change) (proto.Message, Change, error) {
	if r.Perm == nil {
		return nil, change, rpctypes.ErrGRPCPermissionNotGiven
	}
	if !validPermissionRange(r.Perm.Key, r.Perm.RangeEnd) {
		return nil, change, rpctypes.ErrGRPCInvalidAuthMgmt
	}
	role := s.Roles[r.Name]
	if role == nil {
		return nil, change, rpctypes.ErrGRPCRoleNotFound
	}
	next := proto.Clone(role).(*authpb.Role)
	i := sort.Search(len(next.KeyPermission), func(i int) bool {
		return bytes.Compare(next.KeyPermission[i].Key, r.Perm.Key) >= 0
	})
	if i < len(next.KeyPermission) && bytes.Equal(next.KeyPermission[i].Key, r.Perm.Key) &&
		bytes.Equal(next.KeyPermission[i].RangeEnd, r.Perm.RangeEnd) {
		next.KeyPermission[i].PermType = r.Perm.PermType
	} else {
		next.KeyPermission = append(next.KeyPermission, &authpb.Permission{Key: r.Perm.Key,
			RangeEnd: r.Perm.RangeEnd, PermType: r.Perm.PermType})
		sort.SliceStable(next.KeyPermission, func(a, b int) bool {
			return bytes.Compare(next.KeyPermission[a].Key, next.KeyPermission[b].Key) < 0
		})
	}
	s.putRole(r.Name, next, &change)
	return &pb.AuthRoleGrantPermissionResponse{}, change, nil
}

func (s *State) roleRevokePermission(r *pb.AuthRoleRevokePermissionRequest, change Change) (proto.Message, Change, error) {
	role := s.Roles[r.Role]
	if role == nil {
		return nil, change, rpctypes.ErrGRPCRoleNotFound
	}
	next := &authpb.Role{Name: role.Name}
	for _, p := range role.KeyPermission {
		if !bytes.Equal(p.Key, r.Key) || !bytes.Equal(p.RangeEnd, r.RangeEnd) {
			next.KeyPermission = append(next.KeyPermission, p)
		}
	}
	if len(next.KeyPermission) == len(role.KeyPermission) {
		return nil, change, rpctypes.ErrGRPCPermissionNotGranted
	}
	s.putRole(r.Role, next, &change)
	return &pb.AuthRoleRevokePermissionResponse{}, change, nil
}

// putUser stores (or, nil, deletes) a user, recording the change and bumping the revision.
func (s *State) putUser(name string, u *authpb.User, change *Change) {
	if u == nil {
		delete(s.Users, name)
	} else {
		s.Users[name] = u
	}
	change.Users[name] = u
	s.bump(change)
}

func (s *State) putRole(name string, r *authpb.Role, change *Change) {
	if r == nil {
		delete(s.Roles, name)
	} else {
		s.Roles[name] = r
	}
	change.Roles[name] = r
	s.bump(change)
}

func (s *State) bump(change *Change) {
	if !change.Meta {
		s.Revision++ // once per request, as etcd's commitRevision
	}
	change.Meta = true
	s.perms = nil
}

// UserGet answers etcd's UserGet: the user's roles.
func (s *State) UserGet(name string) (*pb.AuthUserGetResponse, error) {
	u := s.Users[name]
	if u == nil {
		return nil, rpctypes.ErrGRPCUserNotFound
	}
	return &pb.AuthUserGetResponse{Roles: slices.Clone(u.Roles)}, nil
}

// UserList answers the user names, sorted (bbolt's key order, as etcd lists them).
func (s *State) UserList() *pb.AuthUserListResponse {
	return &pb.AuthUserListResponse{Users: sortedKeys(s.Users)}
}

// RoleGet answers a role's permissions (the root role: everything, as etcd shows it).
func (s *State) RoleGet(name string) (*pb.AuthRoleGetResponse, error) {
	r := s.Roles[name]
	if r == nil {
		return nil, rpctypes.ErrGRPCRoleNotFound
	}
	if name == RootRole {
		return &pb.AuthRoleGetResponse{Perm: []*authpb.Permission{{PermType: authpb.Permission_READWRITE,
			Key: []byte{}, RangeEnd: []byte{0}}}}, nil
	}
	resp := &pb.AuthRoleGetResponse{}
	for _, p := range r.KeyPermission {
		resp.Perm = append(resp.Perm, proto.Clone(p).(*authpb.Permission))
	}
	return resp, nil
}

// RoleList answers the role names, sorted.
func (s *State) RoleList() *pb.AuthRoleListResponse {
	return &pb.AuthRoleListResponse{Roles: sortedKeys(s.Roles)}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
