package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/leasetest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// leaseTranscript runs one etcdctl lease session against endpoints, normalized by leaseNormalizer.
func leaseTranscript(t *testing.T, etcdctl string, endpoints []string) []string {
	norm := leaseNormalizer()
	run := func(args ...string) string {
		res := runEtcdctl(t, etcdctl, endpoints, "", args...)
		return fmt.Sprintf("$ etcdctl %s\n%s%s\nexit %d", norm(strings.Join(args, " ")), norm(res.Stdout), norm(res.Stderr), res.ExitCode)
	}
	grant := runEtcdctl(t, etcdctl, endpoints, "", "lease", "grant", "30")
	id := strings.Fields(grant.Stdout)[1]
	transcript := []string{norm(grant.Stdout)}
	for _, args := range [][]string{
		{"put", "--lease=" + id, "lease/k1", "v"},
		{"put", "--lease=" + id, "lease/k0", "v"},
		{"lease", "timetolive", id, "--keys"},
		{"lease", "list"},
		{"lease", "keep-alive", "--once", id},
		{"get", "--prefix", "lease/", "-w", "json"},
		{"lease", "revoke", id},
		{"lease", "revoke", id},
		{"get", "--prefix", "lease/"},
		{"lease", "timetolive", id},
		{"lease", "keep-alive", "--once", id},
		{"lease", "grant", "9000000001"},
	} {
		transcript = append(transcript, run(args...))
	}
	return transcript
}

// leaseNormalizer masks what differs between two lease sessions: the cluster's own values, then the lease IDs
// and TTLs (leasetest.TranscriptNormalizer).
func leaseNormalizer() func(string) string {
	leases := leasetest.TranscriptNormalizer()
	return func(s string) string { return leases(normalize(etcdctlStep{}, s)) }
}

// TestEtcdctlLeasesOnCairnUp runs one etcdctl lease session (grant, put --lease, timetolive --keys, list,
// keep-alive, revoke, the error cases) against `cairn up` (2 leasekeeper processes) and a real 3-member etcd,
// and compares what etcdctl printed.
func TestEtcdctlLeasesOnCairnUp(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	etcd := etcdreftest.StartCluster(t, 3)
	cairn := startUp(t, t.TempDir())
	want := leaseTranscript(t, etcdctl, etcd.Endpoints()[:1])
	got := leaseTranscript(t, etcdctl, cairn.endpoints[:1])
	for i := range max(len(want), len(got)) {
		if i >= len(want) || i >= len(got) || want[i] != got[i] {
			t.Errorf("step %d:\n  cairn:\n%s\n  etcd:\n%s", i, indent(at(got, i)), indent(at(want, i)))
		}
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(nothing)"
}

// keeperActive reads a leasekeeper child's /metrics: whether it is the active keeper.
func (s *upStack) keeperActive(t *testing.T, name string) bool {
	active, ok := s.metric(t, name, "cairn_leasekeeper_active")
	return ok && active == 1
}

// TestLeasekeeperKill9OnCairnUp kill -9s the active leasekeeper process of `cairn up` under client/v3 traffic:
// the standby takes over within 3s; a session kept alive through it keeps its lease and key; a lease whose
// keep-alives stop at the kill expires no earlier than its TTL and within TTL + 3s of its last keep-alive; the
// supervisor restarts the killed keeper as a standby; and the killed keeper's epoch is fenced at storage.
func TestLeasekeeperKill9OnCairnUp(t *testing.T) {
	s := startUp(t, t.TempDir())
	var active, standby string
	waittest.Until(t, 10*time.Second, 100*time.Millisecond, "an active leasekeeper", func() bool {
		for _, name := range []string{"leasekeeper-1", "leasekeeper-2"} {
			if s.keeperActive(t, name) {
				active = name
				return true
			}
		}
		return false
	})
	standby = map[string]string{"leasekeeper-1": "leasekeeper-2", "leasekeeper-2": "leasekeeper-1"}[active]
	storage, err := storageclient.Dial(fmt.Sprintf("127.0.0.1:%d", s.child(t, "storage-1").Ports["api"]))
	if err != nil {
		t.Fatal(err)
	}
	defer storage.Close()
	victim := s.child(t, active)
	leasetest.Run(t, leasetest.Failover{
		Client:  s.client(t),
		Storage: storage,
		Crash: func() {
			if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		},
		StandbyActive: func() bool { return s.keeperActive(t, standby) },
		Restart: func() {
			waittest.Until(t, 30*time.Second, 100*time.Millisecond, "the supervisor to restart "+active, func() bool {
				c := s.child(t, active)
				return c.PID != 0 && c.PID != victim.PID && c.Ready
			})
		},
		CrashedActive: func() bool { return s.keeperActive(t, active) },
	})
}

// TestDevLeases: `cairn dev` runs a leasekeeper in-process: a lease granted through etcdctl is kept alive by
// keep-alive and, left alone, expires (with its key) within TTL + 1s of its last keep-alive.
func TestDevLeases(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	ports, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	endpoint, stop := startDev(t, etcdctl, t.TempDir(), ports)
	defer stop()
	ep := []string{endpoint}
	res := runEtcdctl(t, etcdctl, ep, "", "lease", "grant", "2")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "granted with TTL(2s)") {
		t.Fatalf("lease grant: %+v", res)
	}
	id := strings.Fields(res.Stdout)[1]
	if res := runEtcdctl(t, etcdctl, ep, "", "put", "--lease="+id, "dev/leased", "v"); res.Stdout != "OK\n" {
		t.Fatalf("put --lease: %+v", res)
	}
	// The keeper renewed the lease while etcdctl ran, between asked and renewed. An etcdctl run takes a while
	// under load, so each poll proves only this much: a key still there was alive when its poll was started, a
	// key gone had expired by the time its poll returned.
	asked := time.Now()
	if res := runEtcdctl(t, etcdctl, ep, "", "lease", "keep-alive", "--once", id); !strings.Contains(res.Stdout, "keepalived with TTL(2)") {
		t.Fatalf("keep-alive --once: %+v", res)
	}
	renewed := time.Now()
	for {
		sent := time.Now()
		if runEtcdctl(t, etcdctl, ep, "", "get", "dev/leased", "--print-value-only").Stdout == "" {
			if gone := time.Since(asked); gone < 2*time.Second {
				t.Fatalf("expired by %v after the keep-alive was asked for, before its TTL (2s)", gone)
			}
			t.Logf("expired %v to %v after the keep-alive", sent.Sub(renewed), time.Since(asked))
			return
		}
		if alive := sent.Sub(renewed); alive > 3*time.Second {
			t.Fatalf("alive %v after the keep-alive, want expired within TTL + 1s (TTL 2s)", alive)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
