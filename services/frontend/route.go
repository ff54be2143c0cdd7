package frontend

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/link"
)

// errNoStorage is returned when no storage replica is known at all.
var errNoStorage = status.Error(codes.Unavailable, "cairn frontend: no storage replica is known yet")

// failure classifies an error from a call to a replica.
type failure int

const (
	// failedFinal is an answer (etcd's error or success) to pass to the client as it is.
	failedFinal failure = iota
	// failedNotSent means the request never reached a proposal: the connection could not be made, or the
	// storage refused it before proposing. Any request may be tried on another replica.
	failedNotSent
	// failedInFlight means the connection broke while the request was in flight: a read may be tried on
	// another replica, a write may have been proposed and must not be.
	failedInFlight
)

// classify decides what a replica's error means for retrying, from types only: the link's not-sent mark
// (set where a call certainly did not leave, on the pipeline and on gRPC alike, see internal/link) and etcd's
// own errors (rpctypes). Any other unavailability may have been in flight.
func classify(err error) failure {
	if errors.Is(err, link.ErrNotSent) {
		return failedNotSent
	}
	if status.Code(err) != codes.Unavailable {
		return failedFinal
	}
	if _, etcdError := rpctypes.Error(err).(rpctypes.EtcdError); etcdError {
		return failedFinal // etcd's own error (no leader, timeout, ...), already the right answer
	}
	return failedInFlight
}

// isConnectionFailure reports whether err says the replica (not the cluster) is unreachable.
func isConnectionFailure(err error) bool { return classify(err) != failedFinal }

// retryRead reports whether a read that failed with err may be tried on another replica: any
// unavailability, including etcd's "no leader" and timeouts, since another member may be better placed.
func retryRead(ctx context.Context, err error) bool {
	return ctx.Err() == nil && status.Code(err) == codes.Unavailable
}

// writeError turns a write's replica error into what the client gets: a broken connection while the write
// was in flight is etcd's "request timed out, possibly due to connection lost", since the write may or may
// not have been proposed.
func writeError(ctx context.Context, err error) error {
	if classify(err) == failedInFlight {
		return rpctypes.ErrGRPCTimeoutDueToConnectionLost
	}
	return replyError(ctx, err)
}

// contextError maps an ended context to etcd's error, or nil while ctx runs.
func contextError(ctx context.Context) error {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return rpctypes.ErrGRPCCanceled
	case ctx.Err() != nil:
		return rpctypes.ErrGRPCTimeout
	}
	return nil
}

// replyError passes etcd's errors through (without Cairn's not-sent mark) and maps the frontend's own context
// ends to etcd's.
func replyError(ctx context.Context, err error) error {
	err = link.Plain(err)
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled:
		if ctxErr := contextError(ctx); ctxErr != nil {
			return ctxErr
		}
	}
	return err
}

// fillHeader completes a response header as etcd does: the serving member, its raft term and the cluster.
// The revision is the storage's, and so is the raft term when storage set it (the term of the last entry it
// applied); otherwise the term the replica's last probe reported.
func (v *view) fillHeader(h *pb.ResponseHeader, r *storageReplica) {
	if h == nil {
		return
	}
	h.ClusterId = v.clusterID
	if r != nil {
		h.MemberId = r.memberID.Load()
	}
	if h.RaftTerm > 0 {
		return
	}
	if r != nil {
		if term := r.term.Load(); term > 0 {
			h.RaftTerm = term
			return
		}
	}
	h.RaftTerm = v.term
}

// headerField is the header fillHeader gives, encoded as a response's field 1, for putting before storage's
// encoded response: protobuf merges the two headers field by field, a field set in the later one (storage's
// revision and raft term) overriding the earlier, so the client reads the header fillHeader would have made.
func (v *view) headerField(r *storageReplica) []byte {
	h := &pb.ResponseHeader{}
	v.fillHeader(h, r)
	encoded, err := proto.Marshal(h)
	if err != nil {
		return nil // a message of four integers always encodes
	}
	return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), encoded)
}

// readOn calls read on each replica of order until one answers, trying the next on unavailability; it
// returns the replica that answered.
func (f *Frontend) readOn(ctx context.Context, order []*storageReplica, read func(*storageReplica) error) (*storageReplica, error) {
	err := errNoStorage
	for _, r := range order {
		if err = read(r); err == nil {
			return r, nil
		}
		if isConnectionFailure(err) {
			f.pool.markDown(r, err)
		}
		if !retryRead(ctx, err) {
			break
		}
		f.metrics.retries.Inc()
	}
	return nil, replyError(ctx, err)
}

// writeOn calls write on the first replica of order that takes it, trying the next only when the request
// certainly was not proposed.
func (f *Frontend) writeOn(ctx context.Context, order []*storageReplica, write func(*storageReplica) error) (*storageReplica, error) {
	err := errNoStorage
	for _, r := range order {
		if !r.connected() && r != order[len(order)-1] {
			continue // dialling would fail: nothing is sent, try the next one
		}
		if err = write(r); err == nil {
			return r, nil
		}
		if isConnectionFailure(err) {
			f.pool.markDown(r, err)
		}
		if classify(err) != failedNotSent || ctx.Err() != nil {
			break
		}
		f.metrics.retries.Inc()
	}
	return nil, writeError(ctx, err)
}
