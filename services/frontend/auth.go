package frontend

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/authstate"
)

// authServer is etcd's Auth service. Changes are proposed through a storage like any write (applied by every
// storage into its auth store, package authstate); reads answer from a linearizable read of the auth store.
// Who may call what is checked by the gate's interceptor before these handlers run (authcheck.go), except
// UserGet and RoleGet, which a user may ask about itself.
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

// change proposes an auth change and, once applied, reads the auth store again so that this frontend checks
// the next request against it.
func (s *authServer) change(ctx context.Context, req *pb.InternalRaftRequest) (*storagepb.SubmitResponse, error) {
	resp, err := s.f.submit(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	if _, err := s.f.auth.refresh(ctx); err != nil { // the prober's view catches up later
		s.f.logger.Warn("auth store not re-read after a change", "auth_revision", resp.AuthRevision, "err", err)
	}
	return resp, nil
}

// read returns a linearizable read of the auth store.
func (s *authServer) read(ctx context.Context) (*gateState, error) {
	return s.f.auth.refresh(ctx)
}

// hashPassword is etcd's: bcrypt at --bcrypt-cost, base64 as etcd proposes it.
func (s *authServer) hashPassword(password string) (string, error) {
	hash, err := bcrypt.GenerateFromPassword([]byte(password), s.f.cfg.BcryptCost)
	if err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	return base64.StdEncoding.EncodeToString(hash), nil
}

func (s *authServer) AuthEnable(ctx context.Context, r *pb.AuthEnableRequest) (*pb.AuthEnableResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthEnable: r})
	return resp.GetAuthEnable(), err
}

func (s *authServer) AuthDisable(ctx context.Context, r *pb.AuthDisableRequest) (*pb.AuthDisableResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthDisable: r})
	return resp.GetAuthDisable(), err
}

func (s *authServer) AuthStatus(ctx context.Context, _ *pb.AuthStatusRequest) (*pb.AuthStatusResponse, error) {
	st, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.AuthStatusResponse{Header: s.f.header(), Enabled: st.Enabled, AuthRevision: st.Revision}, nil
}

// Authenticate is etcd's: the password is checked against the auth store read now, then an Authenticate
// entry goes through the log carrying the revision it was checked at; if the store changed meanwhile the
// entry is refused (ErrAuthOldRevision) and the check is made again. The token is issued at the revision the
// entry was applied at.
func (s *authServer) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	for {
		st, err := s.read(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.checkPassword(st, r.Name, r.Password); err != nil {
			return nil, err
		}
		prefix, err := s.f.auth.tokens.Prefix()
		if err != nil {
			return nil, err
		}
		resp, err := s.f.submit(ctx, &pb.InternalRaftRequest{Header: &pb.RequestHeader{AuthRevision: st.Revision},
			Authenticate: &pb.InternalAuthenticateRequest{Name: r.Name, SimpleToken: prefix}}, nil)
		if errors.Is(err, rpctypes.ErrGRPCAuthOldRevision) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return nil, err
		}
		token, err := s.f.auth.tokens.Assign(prefix, resp.Index, r.Name, resp.AuthRevision)
		if err != nil {
			return nil, err
		}
		return &pb.AuthenticateResponse{Header: resp.GetAuthenticate().GetHeader(), Token: token}, nil
	}
}

// checkPassword is etcd's CheckPassword. It compares with bcrypt, whose cost (--bcrypt-cost) is what slows
// guessing down, as in etcd; at most as many comparisons as there are CPUs run at once (passwordChecks), so
// a burst of guesses cannot starve the frontend's other work.
func (s *authServer) checkPassword(st *gateState, name, password string) error {
	if !st.Enabled {
		return rpctypes.ErrGRPCAuthNotEnabled
	}
	u := st.Users[name]
	if u == nil {
		return rpctypes.ErrGRPCAuthFailed
	}
	if u.Options != nil && u.Options.NoPassword {
		return authstate.ErrNoPasswordUser
	}
	s.f.auth.passwordChecks <- struct{}{}
	defer func() { <-s.f.auth.passwordChecks }()
	if bcrypt.CompareHashAndPassword(u.Password, []byte(password)) != nil {
		return rpctypes.ErrGRPCAuthFailed
	}
	return nil
}

func (s *authServer) UserAdd(ctx context.Context, r *pb.AuthUserAddRequest) (*pb.AuthUserAddResponse, error) {
	if r.Options == nil || !r.Options.NoPassword {
		hashed, err := s.hashPassword(r.Password)
		if err != nil {
			return nil, err
		}
		r.HashedPassword, r.Password = hashed, ""
	}
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthUserAdd: r})
	return resp.GetUserAdd(), err
}

func (s *authServer) UserDelete(ctx context.Context, r *pb.AuthUserDeleteRequest) (*pb.AuthUserDeleteResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthUserDelete: r})
	if err == nil {
		s.f.auth.tokens.InvalidateUser(r.Name)
	}
	return resp.GetUserDelete(), err
}

func (s *authServer) UserChangePassword(ctx context.Context, r *pb.AuthUserChangePasswordRequest) (*pb.AuthUserChangePasswordResponse, error) {
	if r.Password != "" {
		hashed, err := s.hashPassword(r.Password)
		if err != nil {
			return nil, err
		}
		r.HashedPassword, r.Password = hashed, ""
	}
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthUserChangePassword: r})
	if err == nil {
		s.f.auth.tokens.InvalidateUser(r.Name)
	}
	return resp.GetUserChangePassword(), err
}

func (s *authServer) UserGrantRole(ctx context.Context, r *pb.AuthUserGrantRoleRequest) (*pb.AuthUserGrantRoleResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthUserGrantRole: r})
	return resp.GetUserGrantRole(), err
}

func (s *authServer) UserRevokeRole(ctx context.Context, r *pb.AuthUserRevokeRoleRequest) (*pb.AuthUserRevokeRoleResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthUserRevokeRole: r})
	return resp.GetUserRevokeRole(), err
}

func (s *authServer) RoleAdd(ctx context.Context, r *pb.AuthRoleAddRequest) (*pb.AuthRoleAddResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthRoleAdd: r})
	return resp.GetRoleAdd(), err
}

func (s *authServer) RoleDelete(ctx context.Context, r *pb.AuthRoleDeleteRequest) (*pb.AuthRoleDeleteResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthRoleDelete: r})
	return resp.GetRoleDelete(), err
}

func (s *authServer) RoleGrantPermission(ctx context.Context, r *pb.AuthRoleGrantPermissionRequest) (*pb.AuthRoleGrantPermissionResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthRoleGrantPermission: r})
	return resp.GetRoleGrantPermission(), err
}

func (s *authServer) RoleRevokePermission(ctx context.Context, r *pb.AuthRoleRevokePermissionRequest) (*pb.AuthRoleRevokePermissionResponse, error) {
	resp, err := s.change(ctx, &pb.InternalRaftRequest{AuthRoleRevokePermission: r})
	return resp.GetRoleRevokePermission(), err
}

// UserGet answers root, or a user asking about itself (etcd's authApplierV3.UserGet).
func (s *authServer) UserGet(ctx context.Context, r *pb.AuthUserGetRequest) (*pb.AuthUserGetResponse, error) {
	st, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	if c := callerOf(ctx); st.Enabled && r.Name != c.user {
		if err := st.CheckAdmin(c.user); err != nil {
			return nil, err
		}
	}
	resp, err := st.UserGet(r.Name)
	if err != nil {
		return nil, err
	}
	resp.Header = s.f.header()
	return resp, nil
}

func (s *authServer) UserList(ctx context.Context, _ *pb.AuthUserListRequest) (*pb.AuthUserListResponse, error) {
	st, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	resp := st.UserList()
	resp.Header = s.f.header()
	return resp, nil
}

// RoleGet answers root, or a user asking about one of its roles (etcd's authApplierV3.RoleGet).
func (s *authServer) RoleGet(ctx context.Context, r *pb.AuthRoleGetRequest) (*pb.AuthRoleGetResponse, error) {
	st, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	if c := callerOf(ctx); st.Enabled {
		if err := st.CheckAdmin(c.user); err != nil {
			if u := st.Users[c.user]; u == nil || !slices.Contains(u.Roles, r.Role) {
				return nil, err
			}
		}
	}
	resp, err := st.RoleGet(r.Role)
	if err != nil {
		return nil, err
	}
	resp.Header = s.f.header()
	return resp, nil
}

func (s *authServer) RoleList(ctx context.Context, _ *pb.AuthRoleListRequest) (*pb.AuthRoleListResponse, error) {
	st, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	resp := st.RoleList()
	resp.Header = s.f.header()
	return resp, nil
}
