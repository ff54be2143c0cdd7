package consensus_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/memnet"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/consensus/consensustest"
)

// term is a member's current raft term.
func term(t *testing.T, m *consensustest.Member) uint64 {
	t.Helper()
	st, err := m.Node().Status(context.Background())
	if err != nil {
		t.Fatalf("%s status: %v", m.Name, err)
	}
	return st.Term
}

// TestPreVoteAndCheckQuorum: the promises pre-vote and check-quorum make (doc.go), on the bubble's fake clock so
// the bounds are in election timeouts, exact whatever the machine's load. A follower cut off for many election
// timeouts campaigns only in pre-vote, so its term stays and, back, it does not depose the leader. A leader cut
// off from a quorum steps down within two election timeouts, the others elect a leader in a higher term, and
// the old leader follows it once back.
func TestPreVoteAndCheckQuorum(t *testing.T) {
	tests := []struct {
		name          string
		cutOffLeader  bool
		wantNewLeader bool
	}{
		{"a partitioned follower does not disrupt the leader (pre-vote)", false, false},
		{"a partitioned leader steps down (check-quorum)", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { // time is the subject: election timeouts on the fake clock
				c := consensustest.Start(t, consensustest.Options{Network: memnet.New()})
				c.WaitHealthy(10 * time.Second)
				et, hb := c.Options().ElectionTimeout, c.Options().HeartbeatInterval
				leader := c.WaitLeader(5 * time.Second)
				startTerm := term(t, leader)
				cut := others(c, leader)[0]
				if tt.cutOffLeader {
					cut = leader
				}

				c.Partition(cut)
				partitioned := time.Now()
				if tt.cutOffLeader {
					// A leader checks every election timeout that a quorum was heard from since the last check.
					took := waittest.Until(t, 5*et, hb, "the cut-off leader to step down", func() bool {
						return leader.Node().Leader() == 0
					})
					if took < et-hb || took > 2*et+hb {
						t.Fatalf("the cut-off leader stepped down after %v, want within [1, 2] election timeouts (%v)",
							took, et)
					}
				}
				time.Sleep(10*et - time.Since(partitioned))
				if got := term(t, cut); got != startTerm {
					t.Fatalf("%s moved to term %d while cut off, from %d: it campaigned for real, not in pre-vote",
						cut.Name, got, startTerm)
				}

				c.Heal(cut)
				time.Sleep(5 * et)
				now := c.WaitLeader(5 * time.Second)
				nowTerm := term(t, now)
				if !tt.wantNewLeader {
					if now != leader || nowTerm != startTerm {
						t.Fatalf("after the follower came back: leader %s in term %d, want still %s in term %d",
							now.Name, nowTerm, leader.Name, startTerm)
					}
					return
				}
				if now == leader || nowTerm <= startTerm {
					t.Fatalf("after the cut-off leader came back: leader %s in term %d, want another member in a term above %d",
						now.Name, nowTerm, startTerm)
				}
				if got := term(t, leader); got != nowTerm {
					t.Fatalf("the old leader is in term %d, want the new leader's %d", got, nowTerm)
				}
			})
		})
	}
}
