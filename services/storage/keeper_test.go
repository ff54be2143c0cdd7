package storage

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/keeperclaim"
)

// TestKeeperClaimAndFencing drives the leasekeeper election through storage's gRPC API, step by step, on two
// storages applying one log: claims are compare-and-swap, the state is the same on both members and survives a
// restart, and a fenced revoke or checkpoint of a stale epoch is refused and changes nothing.
func TestKeeperClaimAndFencing(t *testing.T) {
	log := newMemlog(t, 1)
	m1 := startMember(t, testConfig(t, 1), log, nil)
	m2cfg := testConfig(t, 2)
	m2 := startMember(t, m2cfg, log, nil)
	ctx := ctxT(t)
	lease, err := m1.client.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m1.client.Put(ctx, &pb.PutRequest{Key: []byte("k"), Lease: lease.ID}); err != nil {
		t.Fatal(err)
	}
	claims := []struct {
		name      string
		claim     *storagepb.KeeperClaim
		wantEpoch uint64 // 0: refused
		wantHold  string
	}{
		{"a claims the free role", &storagepb.KeeperClaim{KeeperId: "a"}, 1, "a"},
		{"a renews", &storagepb.KeeperClaim{KeeperId: "a", ExpectedEpoch: 1}, 1, "a"},
		{"b is refused: it missed the renewal", &storagepb.KeeperClaim{KeeperId: "b", ExpectedEpoch: 1}, 0, ""},
		{"b takes over having seen it", &storagepb.KeeperClaim{KeeperId: "b", ExpectedEpoch: 1, ExpectedRenewals: 1}, 2, "b"},
		{"a can no longer renew", &storagepb.KeeperClaim{KeeperId: "a", ExpectedEpoch: 1}, 0, ""},
	}
	for _, step := range claims {
		state, err := m1.client.ClaimKeeper(ctx, step.claim)
		if step.wantEpoch == 0 {
			if !keeperclaim.IsClaimConflict(err) {
				t.Fatalf("%s: got %v, %v; want a claim conflict", step.name, state, err)
			}
			continue
		}
		if err != nil || state.Epoch != step.wantEpoch || state.Holder != step.wantHold || state.Index == 0 {
			t.Fatalf("%s: got %v, %v; want holder %s epoch %d", step.name, state, err, step.wantHold, step.wantEpoch)
		}
	}
	fenced := []struct {
		name  string
		req   *pb.InternalRaftRequest
		epoch uint64
		stale bool
	}{
		{"checkpoint of the old epoch", &pb.InternalRaftRequest{LeaseCheckpoint: &pb.LeaseCheckpointRequest{
			Checkpoints: []*pb.LeaseCheckpoint{{ID: lease.ID, Remaining_TTL: 3}}}}, 1, true},
		{"revoke of the old epoch", &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: lease.ID}}, 1, true},
		{"revoke of a future epoch", &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: lease.ID}}, 3, true},
		{"checkpoint of the current epoch", &pb.InternalRaftRequest{LeaseCheckpoint: &pb.LeaseCheckpointRequest{
			Checkpoints: []*pb.LeaseCheckpoint{{ID: lease.ID, Remaining_TTL: 12}}}}, 2, false},
	}
	var checkpointIndex uint64
	for _, f := range fenced {
		resp, err := m2.client.SubmitFenced(ctx, f.req, f.epoch)
		if f.stale != keeperclaim.IsStaleEpoch(err) || (!f.stale && err != nil) {
			t.Fatalf("%s: %v, stale want %v", f.name, err, f.stale)
		}
		if !f.stale {
			checkpointIndex = resp.Index
		}
	}
	for _, m := range []*testMember{m1, m2} {
		keys, err := m.client.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
		if err != nil || len(keys.Kvs) != 1 {
			t.Fatalf("member %d: the stale revoke deleted the lease's key: %v %v", m.cfg.MemberID, keys, err)
		}
		records, applied, err := m.client.LeaseRecords(ctx)
		if err != nil || len(records) != 1 || records[0].RemainingTtl != 12 || records[0].CheckpointIndex != checkpointIndex || applied < checkpointIndex {
			t.Fatalf("member %d: records %v at %d, %v; want remaining 12 from the checkpoint at index %d", m.cfg.MemberID, records, applied, err, checkpointIndex)
		}
		state, err := m.client.KeeperStatus(ctx)
		if err != nil || state.Holder != "b" || state.Epoch != 2 || state.AppliedIndex < checkpointIndex {
			t.Fatalf("member %d: keeper status %v, %v", m.cfg.MemberID, state, err)
		}
	}
	if _, err := m2.client.SubmitFenced(ctx, &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: lease.ID}}, 2); err != nil {
		t.Fatalf("revoke of the current epoch: %v", err)
	}
	if keys, _ := m1.client.Range(ctx, &pb.RangeRequest{Key: []byte("k")}); len(keys.Kvs) != 0 {
		t.Fatalf("revoke of the current epoch left the key: %v", keys)
	}
	if _, err := m1.client.ClaimKeeper(ctx, &storagepb.KeeperClaim{KeeperId: "b", ExpectedEpoch: 2, Release: true}); err != nil {
		t.Fatalf("release: %v", err)
	}
	state, err := m1.client.ClaimKeeper(ctx, &storagepb.KeeperClaim{KeeperId: "c", ExpectedEpoch: 2, ExpectedRenewals: 99})
	if err != nil || state.Holder != "c" || state.Epoch != 3 {
		t.Fatalf("claim of the released role: %v, %v", state, err)
	}

	// The state is in bbolt: a restarted storage reports it.
	stopCtx := ctxT(t)
	if err := m2.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	m2cfg.ListenURL = "http://127.0.0.1:0"
	restarted := startMember(t, m2cfg, log, nil)
	if err := restarted.waitApplied(ctx, state.Index); err != nil {
		t.Fatal(err)
	}
	if got, err := restarted.client.KeeperStatus(ctx); err != nil || got.Holder != "c" || got.Epoch != 3 || got.Index != state.Index {
		t.Fatalf("after restart: %v, %v; want %v", got, err, state)
	}
}

// TestLeaseRecordsPages: LeaseRecords sends every record once, by ID, in pages of the asked size, all stamped
// with the one applied index they were read at; an empty store sends one empty page.
func TestLeaseRecordsPages(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	ctx := ctxT(t)
	collect := func(pageSize int64) []*storagepb.LeaseRecordsResponse {
		var pages []*storagepb.LeaseRecordsResponse
		if err := m.LeaseRecords(ctx, &storagepb.LeaseRecordsRequest{PageSize: pageSize}, func(p *storagepb.LeaseRecordsResponse) error {
			pages = append(pages, p)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return pages
	}
	if pages := collect(2); len(pages) != 1 || len(pages[0].Records) != 0 {
		t.Fatalf("empty store: %v", pages)
	}
	for id := int64(5); id >= 1; id-- {
		if _, err := m.client.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: 60}); err != nil {
			t.Fatal(err)
		}
	}
	pages := collect(2)
	var ids []int64
	for _, p := range pages {
		if p.AppliedIndex != pages[0].AppliedIndex || p.AppliedIndex == 0 {
			t.Fatalf("pages read at different indexes: %v", pages)
		}
		for _, r := range p.Records {
			ids = append(ids, r.Id)
		}
	}
	if len(pages) != 3 || len(ids) != 5 || ids[0] != 1 || ids[4] != 5 {
		t.Fatalf("%d pages with leases %v, want 3 pages of 1..5 in order", len(pages), ids)
	}
}
