package storagepb

import pb "go.etcd.io/etcd/api/v3/etcdserverpb"

// ResponseHeader returns the header of whichever etcd response r holds, creating it when there is none; nil
// when r holds no etcd response (a keeper claim's state).
func (r *SubmitResponse) ResponseHeader() *pb.ResponseHeader {
	slot := func(h **pb.ResponseHeader) *pb.ResponseHeader {
		if *h == nil {
			*h = &pb.ResponseHeader{}
		}
		return *h
	}
	switch resp := r.GetResponse().(type) {
	case *SubmitResponse_Put:
		return slot(&resp.Put.Header)
	case *SubmitResponse_DeleteRange:
		return slot(&resp.DeleteRange.Header)
	case *SubmitResponse_Txn:
		return slot(&resp.Txn.Header)
	case *SubmitResponse_Compaction:
		return slot(&resp.Compaction.Header)
	case *SubmitResponse_LeaseGrant:
		return slot(&resp.LeaseGrant.Header)
	case *SubmitResponse_LeaseRevoke:
		return slot(&resp.LeaseRevoke.Header)
	case *SubmitResponse_LeaseCheckpoint:
		return slot(&resp.LeaseCheckpoint.Header)
	case *SubmitResponse_Alarm:
		return slot(&resp.Alarm.Header)
	}
	if h, ok := r.GetResponse().(interface{ authHeader() **pb.ResponseHeader }); ok {
		return slot(h.authHeader())
	}
	return nil
}

func (r *SubmitResponse_AuthEnable) authHeader() **pb.ResponseHeader { return &r.AuthEnable.Header }

func (r *SubmitResponse_AuthDisable) authHeader() **pb.ResponseHeader { return &r.AuthDisable.Header }

func (r *SubmitResponse_Authenticate) authHeader() **pb.ResponseHeader { return &r.Authenticate.Header }

func (r *SubmitResponse_UserAdd) authHeader() **pb.ResponseHeader { return &r.UserAdd.Header }

func (r *SubmitResponse_UserDelete) authHeader() **pb.ResponseHeader { return &r.UserDelete.Header }

func (r *SubmitResponse_UserChangePassword) authHeader() **pb.ResponseHeader {
	return &r.UserChangePassword.Header
}

func (r *SubmitResponse_UserGrantRole) authHeader() **pb.ResponseHeader {
	return &r.UserGrantRole.Header
}

func (r *SubmitResponse_UserRevokeRole) authHeader() **pb.ResponseHeader {
	return &r.UserRevokeRole.Header
}

func (r *SubmitResponse_RoleAdd) authHeader() **pb.ResponseHeader { return &r.RoleAdd.Header }

func (r *SubmitResponse_RoleDelete) authHeader() **pb.ResponseHeader { return &r.RoleDelete.Header }

func (r *SubmitResponse_RoleGrantPermission) authHeader() **pb.ResponseHeader {
	return &r.RoleGrantPermission.Header
}

func (r *SubmitResponse_RoleRevokePermission) authHeader() **pb.ResponseHeader {
	return &r.RoleRevokePermission.Header
}
