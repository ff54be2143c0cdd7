package keeperclaim

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
)

// NotActiveMessage is the message of ErrNotActive; the frontend matches it with codes.FailedPrecondition.
const NotActiveMessage = "not the active leasekeeper"

// ErrNotActive is a standby keeper's answer to a client call.
var ErrNotActive = status.Error(codes.FailedPrecondition, "cairn: "+NotActiveMessage)

// IsNotActive reports whether err is a keeper's ErrNotActive (as a gRPC status, through any number of hops).
func IsNotActive(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.FailedPrecondition && strings.Contains(s.Message(), NotActiveMessage)
}

// staleEpochPrefix and conflictPrefix start the messages of the two refusals, so callers recognise them.
const (
	staleEpochPrefix = "cairn: stale leasekeeper epoch"
	conflictPrefix   = "cairn: leasekeeper claim conflict"
)

// ErrStaleEpoch is storage's refusal of a fenced request whose epoch is not the current one.
func ErrStaleEpoch(requestEpoch, currentEpoch uint64) error {
	return status.Errorf(codes.FailedPrecondition, "%s %d (current epoch %d)", staleEpochPrefix, requestEpoch, currentEpoch)
}

// IsStaleEpoch reports whether err is ErrStaleEpoch.
func IsStaleEpoch(err error) bool { return hasPrefix(err, staleEpochPrefix) }

// ErrClaimConflict is storage's refusal of a claim that does not match the stored state.
func ErrClaimConflict(claim *storagepb.KeeperClaim, state *storagepb.KeeperState) error {
	return status.Errorf(codes.FailedPrecondition, "%s: %q expected epoch %d renewals %d, stored holder %q epoch %d renewals %d",
		conflictPrefix, claim.GetKeeperId(), claim.GetExpectedEpoch(), claim.GetExpectedRenewals(),
		state.GetHolder(), state.GetEpoch(), state.GetRenewals())
}

// IsClaimConflict reports whether err is ErrClaimConflict.
func IsClaimConflict(err error) bool { return hasPrefix(err, conflictPrefix) }

func hasPrefix(err error, prefix string) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.FailedPrecondition && strings.HasPrefix(s.Message(), prefix)
}

// Apply returns the state after claim, applied at log index, or ErrClaimConflict (state unchanged). state may be
// nil (never claimed); it is not modified.
func Apply(state *storagepb.KeeperState, claim *storagepb.KeeperClaim, index uint64) (*storagepb.KeeperState, error) {
	if state == nil {
		state = &storagepb.KeeperState{}
	}
	if claim == nil || claim.KeeperId == "" {
		return nil, ErrClaimConflict(claim, state)
	}
	next := proto.Clone(state).(*storagepb.KeeperState)
	next.AppliedIndex = 0
	next.Index = index
	holds := state.Holder == claim.KeeperId && claim.ExpectedEpoch == state.Epoch
	switch {
	case claim.Release && holds:
		next.Holder = ""
		next.Renewals++
	case claim.Release:
		return nil, ErrClaimConflict(claim, state)
	case holds:
		next.Renewals++
	case claim.ExpectedEpoch == state.Epoch && (state.Holder == "" || claim.ExpectedRenewals == state.Renewals):
		next.Holder, next.Epoch, next.Renewals = claim.KeeperId, state.Epoch+1, 0
	default:
		return nil, ErrClaimConflict(claim, state)
	}
	return next, nil
}

// Fence checks a fenced request's epoch against the state: nil when the request may apply (epoch 0 is unfenced).
func Fence(state *storagepb.KeeperState, requestEpoch uint64) error {
	if requestEpoch == 0 || requestEpoch == state.GetEpoch() {
		return nil
	}
	return ErrStaleEpoch(requestEpoch, state.GetEpoch())
}

// Describe is a short form of the state for logs.
func Describe(state *storagepb.KeeperState) string {
	return fmt.Sprintf("holder=%q epoch=%d renewals=%d", state.GetHolder(), state.GetEpoch(), state.GetRenewals())
}
