package consensus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/consensus"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
)

func memberInfo(t *testing.T, n *consensus.Node, id uint64) *etcdserverpb.Member {
	t.Helper()
	resp, err := n.MemberList(context.Background(), &etcdserverpb.MemberListRequest{Linearizable: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.GetMembers() {
		if m.GetID() == id {
			return m
		}
	}
	return nil
}

func TestAddLearnerPromoteItRemoveAnother(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	leader := c.WaitLeader(5 * time.Second)
	_, highest := proposeAll(t, []*consensustest.Member{leader}, 200, 4, "before-add")

	learner, err := c.AddMember(true)
	if err != nil {
		t.Fatal(err)
	}
	learnerID := learner.Node().ID()
	if m := memberInfo(t, leader.Node(), learnerID); m == nil || !m.GetIsLearner() {
		t.Fatalf("after MemberAdd as learner the member list has %+v", m)
	}
	waitCaughtUp(t, c, learner, highest)
	if st, _ := learner.Node().Status(context.Background()); !st.IsLearner {
		t.Fatal("the new member does not know it is a learner")
	}

	// Promote through a follower: it forwards to the leader, which alone knows the learner's progress.
	follower := others(c, leader)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the learner to be promoted", func() bool {
		_, err := follower.Node().MemberPromote(ctx, &etcdserverpb.MemberPromoteRequest{ID: learnerID})
		if err != nil && !errors.Is(err, rpctypes.ErrGRPCLearnerNotReady) {
			t.Fatalf("MemberPromote: %v", err)
		}
		return err == nil
	})
	if m := memberInfo(t, leader.Node(), learnerID); m.GetIsLearner() {
		t.Fatalf("after promotion the member list has %+v", m)
	}
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the new member to publish its name", func() bool {
		return memberInfo(t, leader.Node(), learnerID).GetName() == learner.Name
	})
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the promoted member to know", func() bool {
		st, _ := learner.Node().Status(context.Background())
		return !st.IsLearner
	})

	// Remove a follower; it learns and stops itself.
	victim := follower
	if _, err := leader.Node().MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: victim.Node().ID()}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-victim.Node().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the removed member did not stop")
	}
	if !errors.Is(victim.Node().Err(), consensus.ErrRemoved) {
		t.Fatalf("removed member stopped with %v, want ErrRemoved", victim.Node().Err())
	}
	resp, err := leader.Node().MemberList(ctx, &etcdserverpb.MemberListRequest{})
	if err != nil || len(resp.GetMembers()) != 3 {
		t.Fatalf("member list after removal: %v %v", resp, err)
	}

	// The new configuration (old leader, other old follower, promoted member) commits and survives restarts.
	remaining := c.Running()
	_, highest = proposeAll(t, remaining, 200, 4, "after-remove")
	learner.Kill()
	if err := learner.Restart(); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, c, learner, highest)
	if st, _ := learner.Node().Status(context.Background()); st.IsLearner || len(st.Members) != 3 {
		t.Fatalf("after restart the promoted member has status %+v", st)
	}
}

func TestMembershipErrorsAreEtcds(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	c.WaitHealthy(10 * time.Second)
	leader := c.WaitLeader(5 * time.Second)
	follower := others(c, leader)[0]
	l, f := leader.Node(), follower.Node()
	unusedURL := "http://127.0.0.1:1"
	var learnerID uint64
	steps := []struct {
		name string
		call func(ctx context.Context) error
		want error
	}{
		{"add with a bad URL", func(ctx context.Context) error {
			_, err := l.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: []string{"not a url"}})
			return err
		}, rpctypes.ErrGRPCMemberBadURLs},
		{"add with a peer URL in use", func(ctx context.Context) error {
			_, err := l.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: []string{follower.PeerURL}})
			return err
		}, rpctypes.ErrGRPCPeerURLExist},
		{"remove an unknown member", func(ctx context.Context) error {
			_, err := l.MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: 42})
			return err
		}, rpctypes.ErrGRPCMemberNotFound},
		{"update an unknown member", func(ctx context.Context) error {
			_, err := l.MemberUpdate(ctx, &etcdserverpb.MemberUpdateRequest{ID: 42, PeerURLs: []string{unusedURL}})
			return err
		}, rpctypes.ErrGRPCMemberNotFound},
		{"promote a voter", func(ctx context.Context) error {
			_, err := f.MemberPromote(ctx, &etcdserverpb.MemberPromoteRequest{ID: f.ID()})
			return err
		}, rpctypes.ErrGRPCMemberNotLearner},
		{"promote an unknown member", func(ctx context.Context) error {
			_, err := l.MemberPromote(ctx, &etcdserverpb.MemberPromoteRequest{ID: 42})
			return err
		}, rpctypes.ErrGRPCMemberNotFound},
		{"add a learner that never starts", func(ctx context.Context) error {
			resp, err := l.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: []string{unusedURL}, IsLearner: true})
			learnerID = resp.GetMember().GetID()
			return err
		}, nil},
		{"add a second learner", func(ctx context.Context) error {
			_, err := l.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:2"}, IsLearner: true})
			return err
		}, rpctypes.ErrGRPCTooManyLearners},
		{"promote a learner that has not caught up", func(ctx context.Context) error {
			_, err := f.MemberPromote(ctx, &etcdserverpb.MemberPromoteRequest{ID: learnerID})
			return err
		}, rpctypes.ErrGRPCLearnerNotReady},
		{"move leadership from a follower", func(ctx context.Context) error {
			_, err := f.MoveLeader(ctx, &etcdserverpb.MoveLeaderRequest{TargetID: l.ID()})
			return err
		}, rpctypes.ErrGRPCNotLeader},
		{"move leadership to a learner", func(ctx context.Context) error {
			_, err := l.MoveLeader(ctx, &etcdserverpb.MoveLeaderRequest{TargetID: learnerID})
			return err
		}, rpctypes.ErrGRPCBadLeaderTransferee},
		{"move leadership to an unknown member", func(ctx context.Context) error {
			_, err := l.MoveLeader(ctx, &etcdserverpb.MoveLeaderRequest{TargetID: 42})
			return err
		}, rpctypes.ErrGRPCBadLeaderTransferee},
		{"remove the learner", func(ctx context.Context) error {
			_, err := l.MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: learnerID})
			return err
		}, nil},
		{"remove a member already removed", func(ctx context.Context) error {
			_, err := l.MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: learnerID})
			return err
		}, rpctypes.ErrGRPCMemberNotFound},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := step.call(ctx); !errors.Is(err, step.want) && !(err == nil && step.want == nil) {
				t.Fatalf("got %v, want %v", err, step.want)
			}
		})
	}
}

func TestRemovingAnActiveMemberWithoutQuorumIsRefused(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	c.WaitHealthy(10 * time.Second)
	leader := c.WaitLeader(5 * time.Second)
	down, up := others(c, leader)[0], others(c, leader)[1]
	down.Kill()
	waittest.Until(t, 5*time.Second, 5*time.Millisecond, "the leader to see the killed member down", func() bool {
		return leader.Node().PeerActiveSince(down.Node().ID()).IsZero()
	})
	// Removing the live follower would leave the leader alone with a dead member.
	_, err := leader.Node().MemberRemove(context.Background(), &etcdserverpb.MemberRemoveRequest{ID: up.Node().ID()})
	if !errors.Is(err, rpctypes.ErrGRPCUnhealthy) {
		t.Fatalf("removing an active member without a quorum left = %v, want %v", err, rpctypes.ErrGRPCUnhealthy)
	}
	// Removing the dead one is safe.
	if _, err := leader.Node().MemberRemove(context.Background(), &etcdserverpb.MemberRemoveRequest{ID: down.Node().ID()}); err != nil {
		t.Fatalf("removing the dead member: %v", err)
	}
}

func TestMoveLeader(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	leader := c.WaitLeader(5 * time.Second)
	target := others(c, leader)[1]
	if _, err := leader.Node().MoveLeader(context.Background(), &etcdserverpb.MoveLeaderRequest{TargetID: target.Node().ID()}); err != nil {
		t.Fatal(err)
	}
	if got := c.WaitLeader(5 * time.Second); got != target {
		t.Fatalf("leader after MoveLeader is %s, want %s", got.Name, target.Name)
	}
}

func TestMemberUpdateMovesAPeer(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{})
	leader := c.WaitLeader(5 * time.Second)
	moved := others(c, leader)[0]
	id := moved.Node().ID()
	moved.Stop()
	newURL := "http://" + loopbacktest.Addr(t)
	if _, err := leader.Node().MemberUpdate(context.Background(), &etcdserverpb.MemberUpdateRequest{ID: id, PeerURLs: []string{newURL}}); err != nil {
		t.Fatal(err)
	}
	if m := memberInfo(t, leader.Node(), id); m == nil || len(m.GetPeerURLs()) != 1 || m.GetPeerURLs()[0] != newURL {
		t.Fatalf("member after MemberUpdate: %+v", m)
	}
	moved.PeerURL = newURL
	if err := moved.Restart(); err != nil {
		t.Fatal(err)
	}
	_, highest := proposeAll(t, []*consensustest.Member{leader}, 100, 4, "after-move")
	waitCaughtUp(t, c, moved, highest)
}

func TestMemberJoiningAfterCompactionStartsFromASnapshot(t *testing.T) {
	c := consensustest.Start(t, consensustest.Options{StateMachines: true, SnapshotCount: 100, SnapshotCatchUpEntries: 10})
	leader := c.WaitLeader(5 * time.Second)
	// Every attribute must be in the log before the entries the joiner waits for, or it could
	// catch up before a slow member's publish reaches it.
	c.WaitPublished(10 * time.Second)
	_, highest := proposeAll(t, []*consensustest.Member{leader}, 500, 4, "before-join")
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "the leader to compact", func() bool {
		return readLog(t, leader.Node(), 1)[0].Index > 1
	})
	joiner, err := c.AddMember(true)
	if err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 20*time.Second, 5*time.Millisecond, "the joiner's state machine to catch up", func() bool {
		return joiner.Machine().Applied() >= highest
	})
	if joiner.Machine().SnapshotsInstalled() == 0 {
		t.Fatal("the joiner caught up without a snapshot, so the log was not compacted past its start")
	}
	// The membership came with the snapshot: the joiner knows every member and their attributes.
	st, _ := joiner.Node().Status(context.Background())
	if len(st.Members) != 4 || !st.IsLearner {
		t.Fatalf("joiner status %+v, want 4 members and itself a learner", st)
	}
	for _, m := range st.Members {
		if m.ID != st.MemberID && (m.Name == "" || m.StorageURL == "") {
			t.Fatalf("joiner knows member %+v without its attributes", m)
		}
	}
	_, applied := leader.Machine().State()
	_, got := joiner.Machine().State()
	if len(got) != len(applied) {
		t.Fatalf("joiner applied %d entries, leader %d", len(got), len(applied))
	}
}

// A single member may grow, as etcd 3.7 allows (isConnectedToQuorumAfterAddingNewMemberSince): it has no peer
// to be connected to, so the strict reconfiguration check must not call it unhealthy.
func TestASingleMemberAcceptsANewMember(t *testing.T) {
	for _, tc := range []struct {
		name    string
		learner bool
	}{
		{"learner", true},
		{"voter", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := consensustest.Start(t, consensustest.Options{Members: 1})
			leader := c.WaitLeader(5 * time.Second)
			joiner, err := c.AddMember(tc.learner)
			if err != nil {
				t.Fatalf("adding a member to a 1-member cluster: %v", err)
			}
			if m := memberInfo(t, leader.Node(), joiner.Node().ID()); m == nil || m.GetIsLearner() != tc.learner {
				t.Fatalf("after MemberAdd the member list has %+v, want learner=%v", m, tc.learner)
			}
			_, highest := proposeAll(t, []*consensustest.Member{leader}, 50, 2, "after-add")
			waitCaughtUp(t, c, joiner, highest)
		})
	}
}
