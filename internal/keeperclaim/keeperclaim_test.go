package keeperclaim

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
)

func TestApply(t *testing.T) {
	t.Parallel()
	held := &storagepb.KeeperState{Holder: "a", Epoch: 3, Renewals: 7, Index: 40}
	free := &storagepb.KeeperState{Epoch: 3, Renewals: 8, Index: 41}
	tests := []struct {
		name  string
		state *storagepb.KeeperState
		claim *storagepb.KeeperClaim
		want  *storagepb.KeeperState // nil: refused
	}{
		{"first claim ever", nil, &storagepb.KeeperClaim{KeeperId: "a"}, &storagepb.KeeperState{Holder: "a", Epoch: 1, Index: 50}},
		{"holder renews", held, &storagepb.KeeperClaim{KeeperId: "a", ExpectedEpoch: 3}, &storagepb.KeeperState{Holder: "a", Epoch: 3, Renewals: 8, Index: 50}},
		{"holder renews whatever renewals it names", held, &storagepb.KeeperClaim{KeeperId: "a", ExpectedEpoch: 3, ExpectedRenewals: 1}, &storagepb.KeeperState{Holder: "a", Epoch: 3, Renewals: 8, Index: 50}},
		{"holder of an old epoch cannot renew", held, &storagepb.KeeperClaim{KeeperId: "a", ExpectedEpoch: 2}, nil},
		{"takeover after seeing the latest renewal", held, &storagepb.KeeperClaim{KeeperId: "b", ExpectedEpoch: 3, ExpectedRenewals: 7}, &storagepb.KeeperState{Holder: "b", Epoch: 4, Index: 50}},
		{"takeover refused after a renewal the claimant missed", held, &storagepb.KeeperClaim{KeeperId: "b", ExpectedEpoch: 3, ExpectedRenewals: 6}, nil},
		{"takeover refused on an old epoch", held, &storagepb.KeeperClaim{KeeperId: "b", ExpectedEpoch: 2, ExpectedRenewals: 7}, nil},
		{"takeover of a free role ignores renewals", free, &storagepb.KeeperClaim{KeeperId: "b", ExpectedEpoch: 3}, &storagepb.KeeperState{Holder: "b", Epoch: 4, Index: 50}},
		{"holder releases", held, &storagepb.KeeperClaim{KeeperId: "a", ExpectedEpoch: 3, Release: true}, &storagepb.KeeperState{Epoch: 3, Renewals: 8, Index: 50}},
		{"non-holder cannot release", held, &storagepb.KeeperClaim{KeeperId: "b", ExpectedEpoch: 3, Release: true}, nil},
		{"claim without id", held, &storagepb.KeeperClaim{ExpectedEpoch: 3, ExpectedRenewals: 7}, nil},
		{"nil claim", held, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var before *storagepb.KeeperState
			if tt.state != nil {
				before = &storagepb.KeeperState{Holder: tt.state.Holder, Epoch: tt.state.Epoch, Renewals: tt.state.Renewals, Index: tt.state.Index}
			}
			got, err := Apply(tt.state, tt.claim, 50)
			if tt.want == nil {
				if err == nil || !IsClaimConflict(err) || got != nil {
					t.Fatalf("Apply = %v, %v; want ErrClaimConflict", got, err)
				}
			} else if err != nil || got.Holder != tt.want.Holder || got.Epoch != tt.want.Epoch ||
				got.Renewals != tt.want.Renewals || got.Index != tt.want.Index {
				t.Fatalf("Apply = %v, %v; want %v", got, err, tt.want)
			}
			if tt.state != nil && (tt.state.Holder != before.Holder || tt.state.Epoch != before.Epoch ||
				tt.state.Renewals != before.Renewals || tt.state.Index != before.Index) {
				t.Fatalf("Apply modified its input: %v, was %v", tt.state, before)
			}
		})
	}
}

func TestFenceAndErrors(t *testing.T) {
	t.Parallel()
	state := &storagepb.KeeperState{Holder: "a", Epoch: 5}
	tests := []struct {
		epoch uint64
		stale bool
	}{{0, false}, {5, false}, {4, true}, {6, true}}
	for _, tt := range tests {
		err := Fence(state, tt.epoch)
		if (err != nil) != tt.stale || (err != nil && !IsStaleEpoch(err)) {
			t.Fatalf("Fence(epoch %d) = %v, stale want %v", tt.epoch, err, tt.stale)
		}
	}
	if s, _ := status.FromError(Fence(state, 4)); s.Code() != codes.FailedPrecondition {
		t.Fatalf("stale epoch code %v, want FailedPrecondition", s.Code())
	}
	if !IsNotActive(ErrNotActive) || IsNotActive(ErrStaleEpoch(1, 2)) || IsNotActive(errors.New(NotActiveMessage)) {
		t.Fatal("IsNotActive must match exactly ErrNotActive's code and message")
	}
	if IsStaleEpoch(ErrClaimConflict(nil, state)) || IsClaimConflict(ErrStaleEpoch(1, 2)) {
		t.Fatal("the two refusals must be told apart")
	}
}
