package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// Corruption checks are etcd v3.7's (etcdserver/corrupt.go), between storages instead of etcd servers:
//   - the initial check (InitialCorruptCheck) runs in Start, before anything is served, on a member that has
//     data: this storage's HashKV at its revision against each peer's HashKV at that revision; a hash that
//     differs at the same compact revision makes Start fail (ErrCorrupt), changing nothing;
//   - the compact hash check (CompactHashCheckEnabled) runs every CompactHashCheckTime on the storage co-located
//     with the raft leader: for each hash its compactions recorded (newest first, not checked yet) it asks every
//     peer's HashKV at that revision; peers that recorded the same compaction answer its hash. When the hashes at
//     the same compact revision differ, the members outside the majority (member 0 when there is none) get the
//     CORRUPT alarm, proposed through the log so every member applies it and then refuses writes with
//     rpctypes.ErrGRPCCorrupt (see mvcc's alarm refusal).
// Peers are the members consensus knows, reached at their storage URLs.

// ErrCorrupt is returned by Start when the initial corruption check finds this member's data differs from a
// peer's at the same revision.
var ErrCorrupt = errors.New("storage: found data inconsistency with peers")

// peerHash is one peer's answer to HashKV at a revision.
type peerHash struct {
	id   uint64
	url  string
	resp *pb.HashKVResponse
	err  error
}

// peerHashes asks every other member's storage for its HashKV at rev.
func (s *Storage) peerHashes(ctx context.Context, rev int64) []peerHash {
	sctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	st, err := s.log.Status(sctx)
	if err != nil {
		s.logger.Warn("cannot list members for a hash check", "err", err)
		return nil
	}
	var out []peerHash
	for _, m := range st.Members {
		if m.ID == s.cfg.MemberID || m.StorageURL == "" { // learners too, as etcd asks every member
			continue
		}
		p := peerHash{id: m.ID, url: m.StorageURL}
		p.resp, p.err = s.peerHash(ctx, m.StorageURL, rev)
		out = append(out, p)
	}
	return out
}

func (s *Storage) peerHash(ctx context.Context, url string, rev int64) (*pb.HashKVResponse, error) {
	client, err := storageclient.Dial(url, append(s.tel.DialOptions(), s.deps.Internal.DialOption())...)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	hctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	return client.Hash(hctx, rev)
}

// initialCorruptCheck is etcd's InitialCheck; a member without data (a new one) is not checked.
func (s *Storage) initialCorruptCheck(ctx context.Context) error {
	if s.currentStore().Position().AppliedIndex == 0 {
		return nil
	}
	s.logger.Info("starting initial corruption check", "timeout", s.cfg.RequestTimeout)
	local, err := s.currentStore().Hash(0)
	if err != nil {
		return fmt.Errorf("member %x failed to fetch hash: %w", s.cfg.MemberID, err)
	}
	mismatch := 0
	for _, p := range s.peerHashes(ctx, local.HashRevision) {
		attrs := []any{"revision", local.HashRevision, "compact_revision", local.CompactRevision, "hash", local.Hash,
			"peer", fmt.Sprintf("%x", p.id), "peer_url", p.url}
		switch {
		case p.err != nil:
			s.logger.Warn("cannot fetch hash from remote peer", append(attrs, "err", p.err)...)
		case p.resp.Hash == local.Hash:
		case p.resp.CompactRevision == local.CompactRevision:
			s.logger.Warn("found different hash values from remote peer", append(attrs, "peer_hash", p.resp.Hash)...)
			mismatch++
		default:
			s.logger.Warn("found different compact revision values from remote peer",
				append(attrs, "peer_compact_revision", p.resp.CompactRevision)...)
		}
	}
	if mismatch > 0 {
		return fmt.Errorf("member %x: %w (%d peers differ)", s.cfg.MemberID, ErrCorrupt, mismatch)
	}
	s.logger.Info("initial corruption checking passed; no corruption")
	return nil
}

// compactHashChecker is etcd's corruptionChecker.CompactHashCheck state: the newest revision checked on the
// whole cluster. Only the compact hash check goroutine uses it.
type compactHashChecker struct {
	latestRevisionChecked int64
}

func (s *Storage) runCompactHashCheck(ctx context.Context) {
	var checker compactHashChecker
	for {
		pause(ctx, s.cfg.CompactHashCheckTime)
		if ctx.Err() != nil {
			return
		}
		if s.isLeader(ctx) {
			s.compactHashCheck(ctx, &checker)
		}
	}
}

func (s *Storage) compactHashCheck(ctx context.Context, c *compactHashChecker) {
	hashes := s.currentStore().CompactHashes() // newest first
	unchecked := hashes
	for i, h := range hashes {
		if h.Revision <= c.latestRevisionChecked {
			unchecked = hashes[:i]
			break
		}
	}
	for i, h := range unchecked {
		peers := s.peerHashes(ctx, h.Revision)
		if len(peers) == 0 {
			continue
		}
		if s.checkPeerHashes(ctx, c, h, peers) {
			s.logger.Info("finished compaction hash check", "hashes_checked", i+1)
			return
		}
	}
	if len(unchecked) > 0 {
		s.logger.Info("finished compaction hash check", "hashes_checked", len(unchecked))
	}
}

// checkPeerHashes is etcd's: it groups the members by hash (peers at another compact revision, or that did not
// answer, are skipped) and raises the CORRUPT alarm for the members outside a majority. It reports whether the
// check is done for this round: every peer checked, or alarms raised.
func (s *Storage) checkPeerHashes(ctx context.Context, c *compactHashChecker, leader mvcc.CompactHash, peers []peerHash) bool {
	members := map[uint32][]uint64{leader.Hash: {s.cfg.MemberID}}
	checked := 0
	for _, p := range peers {
		switch {
		case p.err != nil:
			s.logger.Warn("skipped peer's hash", "peer", fmt.Sprintf("%x", p.id), "reason", "no response", "err", p.err)
			continue
		case p.resp.CompactRevision != leader.CompactRevision:
			s.logger.Warn("skipped peer's hash", "peer", fmt.Sprintf("%x", p.id), "reason", "compact revision differs",
				"peer_compact_revision", p.resp.CompactRevision, "compact_revision", leader.CompactRevision)
			continue
		}
		checked++
		members[p.resp.Hash] = append(members[p.resp.Hash], p.id)
	}
	if len(members) == 1 {
		if checked < len(peers) {
			s.logger.Warn("skipped revision in compaction hash check; was not able to check all peers",
				"peers_checked", checked, "peers", len(peers), "revision", leader.Revision)
			return false
		}
		s.logger.Info("successfully checked hash on whole cluster", "peers_checked", checked,
			"revision", leader.Revision, "compact_revision", leader.CompactRevision)
		c.latestRevisionChecked = max(c.latestRevisionChecked, leader.Revision)
		return true
	}
	quorum := (len(peers)+1)/2 + 1
	quorumExists := false
	for hash, ids := range members {
		if len(ids) >= quorum {
			quorumExists = true
			delete(members, hash)
			break
		}
	}
	if !quorumExists {
		s.logger.Error("detected compaction hash mismatch but cannot identify the corrupted members; raising the alarm for member 0",
			"revision", leader.Revision, "compact_revision", leader.CompactRevision, "hash", leader.Hash)
		s.alarms.raise(0)
	}
	for hash, ids := range members {
		if quorumExists {
			for _, id := range ids {
				s.alarms.raise(id)
			}
		}
		s.logger.Error("detected compaction hash mismatch", "revision", leader.Revision,
			"compact_revision", leader.CompactRevision, "leader_hash", leader.Hash, "peer_hash", hash,
			"members", fmt.Sprintf("%x", ids), "quorum_exists", quorumExists)
	}
	return true
}

// corruptAlarms proposes CORRUPT alarms through the log, each member's once: raise may be called from any
// goroutine (a read that met a tampered value) and never blocks; the owner's run loop proposes.
type corruptAlarms struct {
	mu      sync.Mutex
	raised  []uint64 // proposed, or waiting to be
	pending chan uint64
}

func newCorruptAlarms() *corruptAlarms { return &corruptAlarms{pending: make(chan uint64, 16)} }

// raise asks for the CORRUPT alarm of member (0: the whole cluster) unless it was asked for already.
func (a *corruptAlarms) raise(member uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if slices.Contains(a.raised, member) {
		return
	}
	select {
	case a.pending <- member:
		a.raised = append(a.raised, member)
	default: // full: a later raise retries
	}
}

// active is told the CORRUPT alarms now active after an entry changed the alarms: a disarmed one may be raised
// again.
func (a *corruptAlarms) active(alarms []*pb.AlarmMember) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.raised = slices.DeleteFunc(a.raised, func(m uint64) bool {
		return !slices.ContainsFunc(alarms, func(am *pb.AlarmMember) bool {
			return am.Alarm == pb.AlarmType_CORRUPT && am.MemberID == m
		})
	})
}

// forget lets member's alarm be raised again (its proposal failed).
func (a *corruptAlarms) forget(member uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.raised = slices.DeleteFunc(a.raised, func(m uint64) bool { return m == member })
}

// runCorruptAlarms proposes the alarms raised until ctx ends.
func (s *Storage) runCorruptAlarms(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case member := <-s.alarms.pending:
			if err := s.proposeCorruptAlarm(ctx, member); err != nil {
				s.logger.Error("raising the CORRUPT alarm failed", "alarm_member", fmt.Sprintf("%x", member), "err", err)
				s.alarms.forget(member)
			}
		}
	}
}

func (s *Storage) proposeCorruptAlarm(ctx context.Context, member uint64) error {
	for _, a := range s.currentStore().Alarms(pb.AlarmType_CORRUPT) {
		if a.MemberID == member {
			return nil
		}
	}
	ctx, cancel := s.withRequestTimeout(ctx)
	defer cancel()
	id := s.ids.next()
	req := &pb.InternalRaftRequest{ID: id, Header: &pb.RequestHeader{ID: id}, Alarm: &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: member, Alarm: pb.AlarmType_CORRUPT}}
	res, err := s.propose(ctx, &storagepb.Entry{Request: req})
	if err != nil {
		return err
	}
	if res.Err != nil {
		return res.Err
	}
	s.logger.Error("ALARM: CORRUPT raised through the log; the cluster refuses writes until it is disarmed",
		"alarm_member", fmt.Sprintf("%x", member), "err", rpctypes.ErrGRPCCorrupt)
	return nil
}
