package localstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/consensusclient"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// Membership changes of a running stack: `cairn up member add` and `member remove` (through the control
// socket, see control.go), and a member removed behind the stack's back with etcdctl, whose consensus process
// exits with consensus.ExitCodeRemoved.

// memberProcesses are the children that belong to member i: its consensus, its storage and, when the
// frontends go one per member, its frontend; dependents first.
func (s *Stack) memberProcesses(i int) []string {
	names := []string{s.plan.child("storage", i), s.plan.child("consensus", i)}
	if s.plan.frontendPerMember() {
		names = append([]string{s.plan.child("frontend", i)}, names...)
	}
	return names
}

// parseMember reads "member-<i>" (the names a stack gives its members).
func parseMember(name string) (int, error) {
	number, ok := strings.CutPrefix(name, "member-")
	i, err := strconv.Atoi(number)
	if !ok || err != nil || i < 1 {
		return 0, fmt.Errorf("localstack: %q is not a member name of this stack (member-<n>)", name)
	}
	return i, nil
}

// AddMember adds a member to the running stack, as an etcd operator does: etcd's MemberAdd (as a learner if
// asked), then its consensus process with --initial-cluster-state existing, its storage and its frontend.
// name "" is the next number; a removed member's name is added again on a wiped data dir (the replacement of
// a failed member). It returns the new member's name and ID once its processes are ready.
func (s *Stack) AddMember(ctx context.Context, name string, learner bool) (string, uint64, error) {
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	if s.sup == nil {
		return "", 0, errors.New("localstack: the stack is not running")
	}
	l := s.plan.layout
	i := l.Members + 1
	if name != "" {
		var err error
		if i, err = parseMember(name); err != nil {
			return "", 0, err
		}
		if l.isActive(i) {
			return "", 0, fmt.Errorf("localstack: %s is already a member", name)
		}
		if i > l.Members+1 {
			return "", 0, fmt.Errorf("localstack: the next new member is %s (or a removed one)", memberName(l.Members+1))
		}
	}
	name = memberName(i)
	before := *l
	before.Removed, before.Joined = slices.Clone(l.Removed), slices.Clone(l.Joined)
	l.Members = max(l.Members, i)
	l.Removed = slices.DeleteFunc(l.Removed, func(r int) bool { return r == i })
	if !slices.Contains(l.Joined, i) {
		l.Joined = append(l.Joined, i)
	}
	id, err := s.addToCluster(ctx, i, learner)
	if err != nil {
		// Nothing changed in the cluster: forget the plan (ports assigned meanwhile are harmless).
		l.Members, l.Removed, l.Joined = before.Members, before.Removed, before.Joined
		return "", 0, err
	}
	if err := os.RemoveAll(s.plan.memberDir(i, "")); err != nil {
		return name, id, fmt.Errorf("localstack: wipe %s's data: %w", name, err)
	}
	if err := l.save(s.cfg.DataDir); err != nil {
		return name, id, err
	}
	if err := s.sup.Add(ctx, s.specsOf(s.memberProcesses(i))...); err != nil {
		return name, id, fmt.Errorf("localstack: %s is in the cluster but its processes did not start (see %s): %w", name, s.logDir(), err)
	}
	s.sup.Respec(s.children()...) // the others list the new member when they next start
	s.sup.SetMeta(s.meta())
	s.cfg.Logger.Info("member added", "member", name, "member-id", fmt.Sprintf("%x", id), "learner", learner)
	return name, id, nil
}

// addToCluster lays out member i's ports (and certificates) and proposes it to the cluster.
func (s *Stack) addToCluster(ctx context.Context, i int, learner bool) (uint64, error) {
	if err := s.plan.layout.assignPorts(s.wantedPorts(), nil); err != nil {
		return 0, err
	}
	if s.plan.tls() {
		if err := s.issueCertificates(); err != nil {
			return 0, err
		}
	}
	return withMembership(ctx, s, i, func(ctx context.Context, m consensusclient.Membership) (uint64, error) {
		resp, err := m.MemberAdd(ctx, &etcdserverpb.MemberAddRequest{
			PeerURLs: []string{s.plan.peerURL(s.plan.child("consensus", i))}, IsLearner: learner})
		if err != nil {
			return 0, fmt.Errorf("localstack: member add %s: %w", memberName(i), err)
		}
		return resp.GetMember().GetID(), nil
	})
}

// RemoveMember removes a member from the running stack: etcd's MemberRemove, then its processes stop. Its data
// stays until the name is added again.
func (s *Stack) RemoveMember(ctx context.Context, name string) (uint64, error) {
	i, err := parseMember(name)
	if err != nil {
		return 0, err
	}
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	if s.sup == nil {
		return 0, errors.New("localstack: the stack is not running")
	}
	if !s.plan.layout.isActive(i) {
		return 0, fmt.Errorf("localstack: %s is not a member", name)
	}
	id, err := withMembership(ctx, s, i, func(ctx context.Context, m consensusclient.Membership) (uint64, error) {
		id, err := s.memberID(ctx, m, i)
		if err != nil {
			return 0, err
		}
		if _, err := m.MemberRemove(ctx, &etcdserverpb.MemberRemoveRequest{ID: id}); err != nil {
			return 0, fmt.Errorf("localstack: member remove %s (%x): %w", name, id, err)
		}
		return id, nil
	})
	if err != nil {
		return 0, err
	}
	return id, s.forgetMemberLocked(ctx, i)
}

// memberGone is Config.OnFinished for a consensus process that exited as removed from the cluster (etcdctl
// member remove): the member's other processes stop and the layout forgets it.
func (s *Stack) memberGone(child string, _ int) {
	number, ok := strings.CutPrefix(child, "consensus-")
	i, err := strconv.Atoi(number)
	if !ok || err != nil {
		return
	}
	s.changeMu.Lock()
	defer s.changeMu.Unlock()
	s.cfg.Logger.Warn("member removed from the cluster; stopping its processes", "member", memberName(i))
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.cfg.StopTimeout)
	defer cancel()
	if err := s.forgetMemberLocked(ctx, i); err != nil {
		s.cfg.Logger.Error("forget removed member", "member", memberName(i), "err", err)
	}
}

// forgetMemberLocked stops member i's processes and records it as removed; idempotent.
func (s *Stack) forgetMemberLocked(ctx context.Context, i int) error {
	l := s.plan.layout
	if !slices.Contains(l.Removed, i) {
		l.Removed = append(l.Removed, i)
		slices.Sort(l.Removed)
	}
	if err := l.save(s.cfg.DataDir); err != nil {
		return err
	}
	if s.sup == nil {
		return nil // Start is still bringing the stack up; the next start leaves the member out
	}
	var running []string
	for _, name := range s.memberProcesses(i) {
		if _, ok := s.sup.Child(name); ok {
			running = append(running, name)
		}
	}
	if err := s.sup.Remove(ctx, running...); err != nil {
		return err
	}
	s.sup.Respec(s.children()...) // the others stop listing the member when they next start
	s.sup.SetMeta(s.meta())
	s.cfg.Logger.Info("member removed", "member", memberName(i))
	return nil
}

// memberID finds member i's ID in the cluster's member list, by name or peer URL.
func (s *Stack) memberID(ctx context.Context, m consensusclient.Membership, i int) (uint64, error) {
	resp, err := m.MemberList(ctx, &etcdserverpb.MemberListRequest{Linearizable: true})
	if err != nil {
		return 0, fmt.Errorf("localstack: member list: %w", err)
	}
	peerURL := s.plan.peerURL(s.plan.child("consensus", i))
	for _, member := range resp.GetMembers() {
		if member.GetName() == memberName(i) || slices.Contains(member.GetPeerURLs(), peerURL) {
			return member.GetID(), nil
		}
	}
	return 0, fmt.Errorf("localstack: %s is not in the cluster's member list", memberName(i))
}

// withMembership calls f with etcd's membership API of a member other than except, trying each in turn.
func withMembership(ctx context.Context, s *Stack, except int, f func(context.Context, consensusclient.Membership) (uint64, error)) (uint64, error) {
	var link *tlsconfig.Link
	if s.plan.tls() {
		var err error
		if link, err = tlsconfig.NewLink(tlsconfig.KindInternal, s.plan.files(ClientCertName), tlsconfig.Policy{}, tlsconfig.Deps{}); err != nil {
			return 0, fmt.Errorf("localstack: %w", err)
		}
	}
	var errs []error
	for _, i := range s.plan.layout.active() {
		if i == except {
			continue
		}
		client, err := consensusclient.New(consensusclient.Config{Target: s.plan.url(s.plan.child("consensus", i), "api"), TLS: link})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		id, err := f(callCtx, client)
		cancel()
		_ = client.Close()
		if err == nil {
			return id, nil
		}
		errs = append(errs, err)
		if !isUnavailable(err) {
			break // the cluster answered: another member would answer the same
		}
	}
	if len(errs) == 0 {
		return 0, errors.New("localstack: no other member to ask")
	}
	return 0, errors.Join(errs...)
}

// specsOf are the supervisor specs of the named children, as Start would run them.
func (s *Stack) specsOf(names []string) []supervisor.ChildSpec {
	var specs []supervisor.ChildSpec
	for _, spec := range s.children() {
		if slices.Contains(names, spec.Name) {
			specs = append(specs, spec)
		}
	}
	return specs
}

func isUnavailable(err error) bool { return status.Code(err) == codes.Unavailable }
