package storage

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestBackendHashOverGRPC runs three storages on one log, one of which commits to bbolt only once an hour, and
// checks their whole-backend hashes through the Storage API: equal after the same writes, moved by a put, still
// by reads and by a defragmentation.
func TestBackendHashOverGRPC(t *testing.T) {
	log := newMemlog(t, 1)
	lazy := testConfig(t, 3)
	lazy.BatchInterval = time.Hour
	members := []*testMember{
		startMember(t, testConfig(t, 1), log, nil),
		startMember(t, testConfig(t, 2), log, nil),
		startMember(t, lazy, log, nil),
	}
	writer := members[0]
	ctx := ctxT(t)
	put := func(key, value string) int64 {
		t.Helper()
		resp, err := writer.client.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte(value)})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	// hashes waits until every member applied the log and returns their hashes, checking each header.
	hashes := func(wantRev int64) []uint32 {
		t.Helper()
		last, err := log.ReadIndex(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []uint32
		for i, m := range members {
			if err := m.waitApplied(ctx, last); err != nil {
				t.Fatal(err)
			}
			resp, err := m.client.BackendHash(ctx)
			if err != nil {
				t.Fatalf("member %d: %v", i+1, err)
			}
			if resp.Header.GetRevision() != wantRev {
				t.Fatalf("member %d hashed revision %d, want %d", i+1, resp.Header.GetRevision(), wantRev)
			}
			out = append(out, resp.Hash)
		}
		return out
	}
	allEqual := func(what string, hs []uint32) uint32 {
		t.Helper()
		for _, h := range hs[1:] {
			if h != hs[0] {
				t.Fatalf("%s: members' hashes differ: %v", what, hs)
			}
		}
		return hs[0]
	}

	var rev int64
	for i := range 30 {
		rev = put(fmt.Sprintf("k%02d", i%12), fmt.Sprint(i))
	}
	if _, err := writer.client.Compact(ctx, &pb.CompactionRequest{Revision: rev - 5}); err != nil {
		t.Fatal(err)
	}
	base := allEqual("after the same writes", hashes(rev))

	for _, m := range members {
		for _, serializable := range []bool{true, false} {
			r := &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), Serializable: serializable}
			if got, err := m.client.Range(ctx, r); err != nil || got.Count != 12 {
				t.Fatalf("range: %v %v", got, err)
			}
		}
	}
	if h := allEqual("after reads", hashes(rev)); h != base {
		t.Fatalf("reads moved the hash from %d to %d", base, h)
	}

	if _, err := members[1].client.Defragment(ctx); err != nil {
		t.Fatal(err)
	}
	if h := allEqual("after defragmenting member 2", hashes(rev)); h != base {
		t.Fatalf("defragmentation moved the hash from %d to %d", base, h)
	}

	rev = put("k00", "changed")
	if h := allEqual("after a put", hashes(rev)); h == base {
		t.Fatalf("a put left the hash at %d", base)
	}
}

// TestBackendHashOfStoppedStorage: a storage that is stopped answers Unavailable, not a hash of nothing.
func TestBackendHashOfStoppedStorage(t *testing.T) {
	m := startMember(t, testConfig(t, 1), newMemlog(t, 1), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := m.BackendHash(ctx, &pb.HashRequest{}); err == nil {
		t.Fatalf("stopped storage answered %v", resp)
	}
}
