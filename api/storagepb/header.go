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
	return nil
}
