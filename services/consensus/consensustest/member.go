package consensustest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/services/consensus"
)

// Node returns the member's current node (possibly stopped), or nil before its first start.
func (m *Member) Node() *consensus.Node {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.node
}

// Registry returns the metrics of the member's current node, a registry of its own per start.
func (m *Member) Registry() *prometheus.Registry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.registry
}

// Machine returns the member's state machine (nil unless Options.StateMachines).
func (m *Member) Machine() *StateMachine {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.machine
}

// Start starts (or restarts, from its data directory) the member's node, and its state machine.
func (m *Member) Start() error {
	cfg := m.cluster.config(m)
	deps, err := m.cluster.deps(m)
	if err != nil {
		return err
	}
	registry := prometheus.NewRegistry()
	deps.Registry = registry
	n, err := consensus.New(cfg, deps)
	if err != nil {
		closeListeners(deps)
		return fmt.Errorf("member %s: %w", m.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		closeListeners(deps)
		return fmt.Errorf("member %s: %w", m.Name, err)
	}
	m.mu.Lock()
	m.node = n
	m.registry = registry
	m.mu.Unlock()
	if m.cluster.opts.StateMachines {
		m.startMachine(n)
	}
	return nil
}

func (m *Member) startMachine(n *consensus.Node) {
	sm := NewStateMachine(n.ID(), n, m.cluster.Machines)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = sm.Run(ctx) }()
	m.mu.Lock()
	m.machine, m.cancelSM, m.smDone = sm, cancel, done
	m.mu.Unlock()
}

func (m *Member) stopMachine() {
	m.mu.Lock()
	cancel, done := m.cancelSM, m.smDone
	m.cancelSM, m.smDone = nil, nil
	m.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Stop stops the member gracefully (syncing its WAL).
func (m *Member) Stop() {
	m.stopMachine()
	if n := m.Node(); n != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = n.Stop(ctx)
	}
}

// Kill stops the member as a crash would: unsynced WAL writes are lost.
func (m *Member) Kill() {
	m.stopMachine()
	if n := m.Node(); n != nil {
		n.Kill()
		<-n.Done()
	}
}

// Restart starts a stopped member again from its data directory.
func (m *Member) Restart() error {
	m.state = consensus.ClusterStateExisting
	return m.Start()
}

// AddMember adds a new member through MemberAdd on the leader and starts it with
// --initial-cluster-state existing.
func (c *Cluster) AddMember(learner bool) (*Member, error) {
	c.WaitHealthy(10 * time.Second)
	leader := c.WaitLeader(10 * time.Second)
	c.mu.Lock()
	m := c.newMember(fmt.Sprintf("m%d", len(c.members)+1))
	c.members = append(c.members, m)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := leader.Node().MemberAdd(ctx, &etcdserverpb.MemberAddRequest{PeerURLs: []string{m.PeerURL}, IsLearner: learner})
	if err != nil {
		return nil, fmt.Errorf("MemberAdd %s: %w", m.PeerURL, err)
	}
	var parts []string
	for _, member := range resp.GetMembers() {
		name := member.GetName()
		switch {
		case member.GetID() == resp.GetMember().GetID():
			name = m.Name
		case name == "":
			name = fmt.Sprintf("member-%x", member.GetID())
		}
		for _, u := range member.GetPeerURLs() {
			parts = append(parts, name+"="+u)
		}
	}
	m.initial, m.state = strings.Join(parts, ","), consensus.ClusterStateExisting
	return m, m.Start()
}

// closeListeners closes the listeners a start that failed was given (closing one twice is harmless).
func closeListeners(deps consensus.Deps) {
	for _, lis := range deps.PeerListeners {
		_ = lis.Close()
	}
	if deps.ConsensusListener != nil {
		_ = deps.ConsensusListener.Close()
	}
}
