package authstate

import (
	"encoding/base64"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

var hash = base64.StdEncoding.EncodeToString([]byte("$2a$04$not-a-real-hash"))

func userAdd(name string) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{AuthUserAdd: &pb.AuthUserAddRequest{Name: name, HashedPassword: hash}}
}

func grantRole(user, role string) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: user, Role: role}}
}

func roleAdd(name string) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: name}}
}

func grantPerm(role, key, end string, t authpb.Permission_Type) *pb.InternalRaftRequest {
	return &pb.InternalRaftRequest{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: role,
		Perm: &authpb.Permission{Key: []byte(key), RangeEnd: []byte(end), PermType: t}}}
}

var enable = &pb.InternalRaftRequest{AuthEnable: &pb.AuthEnableRequest{}}

// TestApply runs sequences of auth requests and checks each answer and the revision against etcd's rules.
func TestApply(t *testing.T) {
	tests := []struct {
		name    string
		reqs    []*pb.InternalRaftRequest
		wantErr error // of the last request; the ones before must succeed
		wantRev uint64
	}{
		{"enable without root", []*pb.InternalRaftRequest{enable}, rpctypes.ErrGRPCRootUserNotExist, 1},
		{"enable without root role", []*pb.InternalRaftRequest{userAdd("root"), enable},
			rpctypes.ErrGRPCRootRoleNotExist, 2},
		{"enable keeps the revision", []*pb.InternalRaftRequest{userAdd("root"), grantRole("root", "root"), enable}, nil, 3},
		{"empty user", []*pb.InternalRaftRequest{userAdd("")}, rpctypes.ErrGRPCUserEmpty, 1},
		{"user exists", []*pb.InternalRaftRequest{userAdd("a"), userAdd("a")}, rpctypes.ErrGRPCUserAlreadyExist, 2},
		{"empty role", []*pb.InternalRaftRequest{roleAdd("")}, rpctypes.ErrGRPCRoleEmpty, 1},
		{"role exists", []*pb.InternalRaftRequest{roleAdd("r"), roleAdd("r")}, rpctypes.ErrGRPCRoleAlreadyExist, 2},
		{"grant unknown role", []*pb.InternalRaftRequest{userAdd("a"), grantRole("a", "r")}, rpctypes.ErrGRPCRoleNotFound, 2},
		{"grant to unknown user", []*pb.InternalRaftRequest{roleAdd("r"), grantRole("a", "r")}, rpctypes.ErrGRPCUserNotFound, 2},
		{"repeated grant is ignored", []*pb.InternalRaftRequest{userAdd("a"), roleAdd("r"), grantRole("a", "r"),
			grantRole("a", "r")}, nil, 4},
		{"root keeps root role while enabled", []*pb.InternalRaftRequest{userAdd("root"), grantRole("root", "root"),
			enable, {AuthUserRevokeRole: &pb.AuthUserRevokeRoleRequest{Name: "root", Role: "root"}}},
			rpctypes.ErrGRPCInvalidAuthMgmt, 3},
		{"revoke role not granted", []*pb.InternalRaftRequest{userAdd("a"),
			{AuthUserRevokeRole: &pb.AuthUserRevokeRoleRequest{Name: "a", Role: "r"}}}, rpctypes.ErrGRPCRoleNotGranted, 2},
		{"invalid permission range", []*pb.InternalRaftRequest{roleAdd("r"), grantPerm("r", "b", "a", authpb.Permission_READ)},
			rpctypes.ErrGRPCInvalidAuthMgmt, 2},
		{"revoke permission not granted", []*pb.InternalRaftRequest{roleAdd("r"),
			{AuthRoleRevokePermission: &pb.AuthRoleRevokePermissionRequest{Role: "r", Key: []byte("k")}}},
			rpctypes.ErrGRPCPermissionNotGranted, 2},
		{"disable bumps the revision", []*pb.InternalRaftRequest{userAdd("root"), grantRole("root", "root"), enable,
			{AuthDisable: &pb.AuthDisableRequest{}}}, nil, 4},
		{"delete root while enabled", []*pb.InternalRaftRequest{userAdd("root"), grantRole("root", "root"), enable,
			{AuthUserDelete: &pb.AuthUserDeleteRequest{Name: "root"}}}, rpctypes.ErrGRPCInvalidAuthMgmt, 3},
		{"authenticate before enable", []*pb.InternalRaftRequest{userAdd("a"),
			{Authenticate: &pb.InternalAuthenticateRequest{Name: "a", SimpleToken: "t"}}}, rpctypes.ErrGRPCAuthNotEnabled, 2},
		{"authenticate with an old revision", []*pb.InternalRaftRequest{userAdd("root"), grantRole("root", "root"), enable,
			{Header: &pb.RequestHeader{AuthRevision: 2}, Authenticate: &pb.InternalAuthenticateRequest{Name: "root"}}},
			rpctypes.ErrGRPCAuthOldRevision, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			for i, req := range tt.reqs {
				_, _, err := s.Apply(req)
				if i < len(tt.reqs)-1 && err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if i == len(tt.reqs)-1 && !errors.Is(err, tt.wantErr) {
					t.Fatalf("last request: err %v, want %v", err, tt.wantErr)
				}
			}
			if s.Revision != tt.wantRev {
				t.Fatalf("revision %d, want %d", s.Revision, tt.wantRev)
			}
		})
	}
}

// TestCheck checks permissions on keys, ranges, prefixes and from-key ranges as etcd does.
func TestCheck(t *testing.T) {
	s := New()
	for _, req := range []*pb.InternalRaftRequest{userAdd("root"), grantRole("root", "root"), userAdd("u"),
		roleAdd("r"), grantRole("u", "r"), grantPerm("r", "k", "", authpb.Permission_READ),
		grantPerm("r", "dir/", "dir0", authpb.Permission_READWRITE), grantPerm("r", "w", "x", authpb.Permission_WRITE),
		grantPerm("r", "z", "\x00", authpb.Permission_READ), enable} {
		if _, _, err := s.Apply(req); err != nil {
			t.Fatal(err)
		}
	}
	rev := s.Revision
	tests := []struct {
		user, key, end string
		perm           authpb.Permission_Type
		want           error
	}{
		{"u", "k", "", authpb.Permission_READ, nil},
		{"u", "k", "", authpb.Permission_WRITE, rpctypes.ErrGRPCPermissionDenied},
		{"u", "dir/a", "", authpb.Permission_WRITE, nil},
		{"u", "dir/", "dir0", authpb.Permission_READ, nil},
		{"u", "dir/", "dir1", authpb.Permission_READ, rpctypes.ErrGRPCPermissionDenied},
		{"u", "w", "", authpb.Permission_READ, rpctypes.ErrGRPCPermissionDenied},
		{"u", "wa", "wb", authpb.Permission_WRITE, nil},
		{"u", "zz", "\x00", authpb.Permission_READ, nil},
		{"u", "a", "\x00", authpb.Permission_READ, rpctypes.ErrGRPCPermissionDenied},
		{"root", "", "\x00", authpb.Permission_WRITE, nil},
		{"nobody", "k", "", authpb.Permission_READ, rpctypes.ErrGRPCPermissionDenied},
		{"", "k", "", authpb.Permission_READ, rpctypes.ErrGRPCUserEmpty},
	}
	for _, tt := range tests {
		if err := s.Check(tt.user, rev, []byte(tt.key), []byte(tt.end), tt.perm); !errors.Is(err, tt.want) {
			t.Errorf("Check(%q, %q, %q, %v) = %v, want %v", tt.user, tt.key, tt.end, tt.perm, err, tt.want)
		}
	}
	if err := s.Check("u", rev-1, []byte("k"), nil, authpb.Permission_READ); !errors.Is(err, rpctypes.ErrGRPCAuthOldRevision) {
		t.Errorf("Check with an old token revision = %v, want ErrAuthOldRevision", err)
	}
	if err := s.CheckAdmin("u"); !errors.Is(err, rpctypes.ErrGRPCPermissionDenied) {
		t.Errorf("CheckAdmin(u) = %v, want permission denied", err)
	}
	if err := s.CheckAdmin("root"); err != nil {
		t.Errorf("CheckAdmin(root) = %v", err)
	}
}

// TestReadFence: the fence grows with every change that can make a check stricter (a bump, an enable) and
// never mistakes one store for another.
func TestReadFence(t *testing.T) {
	for _, tt := range []struct {
		name          string
		before, after State
		wantRaised    bool
	}{
		{"enable", State{Revision: 3}, State{Revision: 3, Enabled: true}, true},
		{"change while enabled", State{Revision: 3, Enabled: true}, State{Revision: 4, Enabled: true}, true},
		{"change while disabled", State{Revision: 3}, State{Revision: 4}, true},
		{"disable", State{Revision: 3, Enabled: true}, State{Revision: 3}, false},
		{"nothing", State{Revision: 3, Enabled: true}, State{Revision: 3, Enabled: true}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.after.ReadFence() > tt.before.ReadFence(); got != tt.wantRaised {
				t.Fatalf("fence %d -> %d: raised %v, want %v", tt.before.ReadFence(), tt.after.ReadFence(), got, tt.wantRaised)
			}
			if tt.before.ReadFence() == 0 {
				t.Fatal("fence 0 means unchecked")
			}
		})
	}
}
