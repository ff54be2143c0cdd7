package frontend

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// authRevision is the revision of an auth store that was never changed, which etcd reports while
// authentication is disabled.
const authRevision = 1

var errAuthUnsupported = status.Error(codes.Unimplemented,
	"cairn: authentication, users and roles are not supported (the cluster runs with authentication disabled)")

// authServer answers etcd's Auth service as an etcd with authentication disabled does where that has a
// meaning (AuthStatus, Authenticate, AuthDisable); users and roles are not supported and say so.
type authServer struct {
	pb.UnimplementedAuthServer
	f *Frontend
}

// completeHeader fills cluster, member and raft term of a header another service answered with (a leasekeeper),
// as the home member; the revision stays the one that service saw.
func (f *Frontend) completeHeader(h *pb.ResponseHeader) {
	if h == nil {
		return
	}
	v := f.pool.view()
	v.fillHeader(h, v.home)
}

// header is a response header for an answer that needs no replica: the home member, its last known revision.
func (f *Frontend) header() *pb.ResponseHeader {
	v := f.pool.view()
	h := &pb.ResponseHeader{}
	v.fillHeader(h, v.home)
	if v.home != nil {
		if st := v.home.status.Load(); st != nil {
			h.Revision = st.Revision
		}
	}
	return h
}

func (s *authServer) AuthStatus(context.Context, *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	return &pb.AuthStatusResponse{Header: s.f.header(), Enabled: false, AuthRevision: authRevision}, nil
}

func (s *authServer) Authenticate(context.Context, *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	return nil, rpctypes.ErrGRPCAuthNotEnabled
}

// AuthDisable succeeds, as on an etcd whose authentication is already disabled.
func (s *authServer) AuthDisable(context.Context, *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	return &pb.AuthDisableResponse{Header: s.f.header()}, nil
}

func (s *authServer) AuthEnable(context.Context, *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) UserAdd(context.Context, *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) UserGet(context.Context, *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) UserList(context.Context, *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) UserDelete(context.Context, *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) UserChangePassword(context.Context, *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) UserGrantRole(context.Context, *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) UserRevokeRole(context.Context, *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) RoleAdd(context.Context, *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) RoleGet(context.Context, *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) RoleList(context.Context, *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) RoleDelete(context.Context, *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) RoleGrantPermission(context.Context, *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	return nil, errAuthUnsupported
}

func (s *authServer) RoleRevokePermission(context.Context, *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	return nil, errAuthUnsupported
}
