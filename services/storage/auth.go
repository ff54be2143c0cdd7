package storage

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// AuthState returns the whole auth store as of the applied index, after a ReadIndex unless r.Serializable.
func (s *Storage) AuthState(ctx context.Context, r *storagepb.AuthStateRequest) (*storagepb.AuthStateResponse, error) {
	if !r.GetSerializable() {
		if err := s.linearizeWithTimeout(ctx); err != nil {
			return nil, err
		}
	}
	var resp *storagepb.AuthStateResponse
	err := s.withStore(func(st *mvcc.Store) error {
		// Read the position first: the state is at least as new as applied_index.
		applied := st.Position().AppliedIndex
		auth := st.Auth()
		resp = &storagepb.AuthStateResponse{Enabled: auth.Enabled, Revision: auth.Revision, AppliedIndex: applied}
		for _, name := range auth.UserList().Users {
			resp.Users = append(resp.Users, auth.Users[name])
		}
		for _, name := range auth.RoleList().Roles {
			resp.Roles = append(resp.Roles, auth.Roles[name])
		}
		return nil
	})
	return resp, err
}

// wrapAuthResponse sets out's response when resp is an auth request's, reporting whether it was.
func wrapAuthResponse(out *storagepb.SubmitResponse, resp proto.Message) bool {
	switch r := resp.(type) {
	case *pb.AuthEnableResponse:
		out.Response = &storagepb.SubmitResponse_AuthEnable{AuthEnable: r}
	case *pb.AuthDisableResponse:
		out.Response = &storagepb.SubmitResponse_AuthDisable{AuthDisable: r}
	case *pb.AuthenticateResponse:
		out.Response = &storagepb.SubmitResponse_Authenticate{Authenticate: r}
	case *pb.AuthUserAddResponse:
		out.Response = &storagepb.SubmitResponse_UserAdd{UserAdd: r}
	case *pb.AuthUserDeleteResponse:
		out.Response = &storagepb.SubmitResponse_UserDelete{UserDelete: r}
	case *pb.AuthUserChangePasswordResponse:
		out.Response = &storagepb.SubmitResponse_UserChangePassword{UserChangePassword: r}
	case *pb.AuthUserGrantRoleResponse:
		out.Response = &storagepb.SubmitResponse_UserGrantRole{UserGrantRole: r}
	case *pb.AuthUserRevokeRoleResponse:
		out.Response = &storagepb.SubmitResponse_UserRevokeRole{UserRevokeRole: r}
	case *pb.AuthRoleAddResponse:
		out.Response = &storagepb.SubmitResponse_RoleAdd{RoleAdd: r}
	case *pb.AuthRoleDeleteResponse:
		out.Response = &storagepb.SubmitResponse_RoleDelete{RoleDelete: r}
	case *pb.AuthRoleGrantPermissionResponse:
		out.Response = &storagepb.SubmitResponse_RoleGrantPermission{RoleGrantPermission: r}
	case *pb.AuthRoleRevokePermissionResponse:
		out.Response = &storagepb.SubmitResponse_RoleRevokePermission{RoleRevokePermission: r}
	default:
		return false
	}
	return true
}
