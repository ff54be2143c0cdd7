package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// storeState is what a restore must carry over: every key with its revisions, version and lease, the
// revision, the compact revision and the leases with their granted TTLs.
type storeState struct {
	kvs        []*mvccpb.KeyValue
	revision   int64
	compactRev int64
	leases     map[int64]int64 // ID → granted TTL
}

// writeHistory writes puts, overwrites, deletes, a transaction, two leases with keys and a compaction, so a
// snapshot has history, tombstones, leases and a compact revision to carry.
func writeHistory(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mustDo := func(what string, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for i := range 20 {
		_, err := cli.Put(ctx, fmt.Sprintf("/registry/pods/ns%d/p%d", i%3, i), strings.Repeat("v", 100+i))
		mustDo("put", err)
	}
	for i := range 5 {
		_, err := cli.Put(ctx, fmt.Sprintf("/registry/pods/ns%d/p%d", i%3, i), "updated")
		mustDo("overwrite", err)
	}
	_, err := cli.Delete(ctx, "/registry/pods/ns1/p1")
	mustDo("delete", err)
	_, err = cli.Txn(ctx).Then(clientv3.OpPut("/registry/a", "1"), clientv3.OpPut("/registry/b", "2")).Commit()
	mustDo("txn", err)
	for _, ttl := range []int64{600, 900} {
		lease, err := cli.Grant(ctx, ttl)
		mustDo("grant", err)
		_, err = cli.Put(ctx, fmt.Sprintf("/registry/leases/%d", ttl), "held", clientv3.WithLease(lease.ID))
		mustDo("put with lease", err)
	}
	_, err = cli.Compact(ctx, 10)
	mustDo("compact", err)
	_, err = cli.Put(ctx, "/registry/last", "after the compaction")
	mustDo("put", err)
}

// readState reads a server's whole state through client/v3.
func readState(t *testing.T, cli *clientv3.Client) storeState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	st := storeState{kvs: resp.Kvs, revision: resp.Header.Revision, leases: map[int64]int64{}}
	// The compact revision is the lowest revision still readable.
	for rev := int64(1); rev <= st.revision; rev++ {
		_, err := cli.Get(ctx, "/registry/a", clientv3.WithRev(rev))
		if err == nil {
			st.compactRev = rev
			break
		}
		if !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("get at revision %d: %v", rev, err)
		}
	}
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Leases {
		ttl, err := cli.TimeToLive(ctx, l.ID)
		if err != nil {
			t.Fatal(err)
		}
		st.leases[int64(l.ID)] = ttl.GrantedTTL
	}
	return st
}

func compareStates(t *testing.T, got, want storeState) {
	t.Helper()
	if got.revision != want.revision || got.compactRev != want.compactRev {
		t.Errorf("restored revision %d, compact revision %d; want %d, %d", got.revision, got.compactRev,
			want.revision, want.compactRev)
	}
	if len(got.kvs) != len(want.kvs) {
		t.Fatalf("restored %d keys, want %d", len(got.kvs), len(want.kvs))
	}
	for i := range want.kvs {
		if !proto.Equal(got.kvs[i], want.kvs[i]) {
			t.Errorf("key %q: restored %v, want %v", want.kvs[i].Key, got.kvs[i], want.kvs[i])
		}
	}
	if fmt.Sprint(got.leases) != fmt.Sprint(want.leases) {
		t.Errorf("restored leases %v, want %v", got.leases, want.leases)
	}
}

// runCairn runs the cairn binary to completion and returns its combined output.
func runCairn(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, cairnBinary, args...).CombinedOutput()
	return string(out), err
}

// restoreIntoDev restores snapshot into a new `cairn dev` data dir, starts it, checks it holds want, and
// that it takes writes after it.
func restoreIntoDev(t *testing.T, etcdctl, snapshot string, want storeState) {
	t.Helper()
	ports, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	out, err := runCairn(t, "snapshot", "restore", snapshot, "--data-dir", dir, "--name", "default",
		"--initial-cluster", "default="+peer, "--initial-advertise-peer-urls", peer, "--initial-cluster-token", "restored")
	if err != nil {
		t.Fatalf("cairn snapshot restore: %v\n%s", err, out)
	}
	endpoint, stop := startDev(t, etcdctl, dir, ports)
	defer stop()
	cli := newClient(t, []string{endpoint})
	compareStates(t, readState(t, cli), want)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	put, err := cli.Put(ctx, "/registry/after-restore", "x")
	if err != nil || put.Header.Revision != want.revision+1 {
		t.Fatalf("put after restore: %v %v, want revision %d", put, err, want.revision+1)
	}
}

func saveSnapshot(t *testing.T, etcdctl, endpoint string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snapshot.db")
	if res := runEtcdctl(t, etcdctl, []string{endpoint}, "", "snapshot", "save", path); res.ExitCode != 0 {
		t.Fatalf("etcdctl snapshot save: %+v", res)
	}
	return path
}

func TestRestoreEtcdSnapshotIntoCairn(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	etcd := etcdreftest.StartCluster(t, 1)
	cli := newClient(t, etcd.Endpoints())
	writeHistory(t, cli)
	want := readState(t, cli)
	snapshot := saveSnapshot(t, etcdctl, etcd.Endpoints()[0])

	out, err := runCairn(t, "snapshot", "status", snapshot, "-w", "json")
	if err != nil || !strings.Contains(out, fmt.Sprintf(`"revision":%d`, want.revision)) ||
		!strings.Contains(out, `"version":"3.7.0"`) {
		t.Errorf("cairn snapshot status of etcd's snapshot: %v\n%s", err, out)
	}
	restoreIntoDev(t, etcdctl, snapshot, want)
}

func TestRestoreCairnSnapshotIntoCairn(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	ports, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	endpoint, stop := startDev(t, etcdctl, t.TempDir(), ports)
	cli := newClient(t, []string{endpoint})
	writeHistory(t, cli)
	want := readState(t, cli)
	snapshot := saveSnapshot(t, etcdctl, endpoint)
	stop()
	restoreIntoDev(t, etcdctl, snapshot, want)

	// etcd's --bump-revision and --mark-compacted: revisions jump, and everything before is compacted.
	ports, err = supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bumped")
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	out, err := runCairn(t, "snapshot", "restore", snapshot, "--data-dir", dir, "--initial-cluster", "default="+peer,
		"--initial-advertise-peer-urls", peer, "--bump-revision", "1000", "--mark-compacted")
	if err != nil {
		t.Fatalf("restore with --bump-revision: %v\n%s", err, out)
	}
	bumpedEndpoint, stopBumped := startDev(t, etcdctl, dir, ports)
	defer stopBumped()
	bumped := readState(t, newClient(t, []string{bumpedEndpoint}))
	if bumped.revision != want.revision+1000 || bumped.compactRev != bumped.revision ||
		!slices.EqualFunc(bumped.kvs, want.kvs, func(a, b *mvccpb.KeyValue) bool { return proto.Equal(a, b) }) {
		t.Errorf("bumped restore: revision %d, compact %d, %d keys; want revision %d compacted, keys unchanged",
			bumped.revision, bumped.compactRev, len(bumped.kvs), want.revision+1000)
	}
}

// TestRestoreCairnSnapshotIntoEtcd keeps the way out: etcdutl restores a Cairn snapshot into an etcd data dir
// that real etcd serves with the same keys, and etcdutl snapshot status reads Cairn's storage version.
func TestRestoreCairnSnapshotIntoEtcd(t *testing.T) {
	etcdctl, etcdutl := etcdreftest.Etcdctl(t), etcdreftest.Etcdutl(t)
	ports, err := supervisor.FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	endpoint, stop := startDev(t, etcdctl, t.TempDir(), ports[:3])
	cli := newClient(t, []string{endpoint})
	writeHistory(t, cli)
	want := readState(t, cli)
	snapshot := saveSnapshot(t, etcdctl, endpoint)
	stop()

	status, err := exec.Command(etcdutl, "snapshot", "status", snapshot, "-w", "json").CombinedOutput()
	if err != nil || !strings.Contains(string(status), `"version":"3.6.0"`) {
		t.Errorf("etcdutl snapshot status of Cairn's snapshot: %v\n%s", err, status)
	}
	dir := filepath.Join(t.TempDir(), "etcd")
	peer, client := fmt.Sprintf("http://127.0.0.1:%d", ports[3]), fmt.Sprintf("http://127.0.0.1:%d", ports[4])
	out, err := exec.Command(etcdutl, "snapshot", "restore", snapshot, "--data-dir", dir, "--name", "e1",
		"--initial-cluster", "e1="+peer, "--initial-advertise-peer-urls", peer).CombinedOutput()
	if err != nil {
		t.Fatalf("etcdutl snapshot restore: %v\n%s", err, out)
	}
	etcd := exec.Command(etcdreftest.EtcdBinary(t), "--name", "e1", "--data-dir", dir, "--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer, "--initial-cluster", "e1="+peer, "--listen-client-urls", client,
		"--advertise-client-urls", client)
	var logs syncBuffer
	etcd.Stdout, etcd.Stderr = &logs, &logs
	if err := etcd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = etcd.Process.Kill(); _ = etcd.Wait() }()
	waittest.Until(t, time.Minute, 100*time.Millisecond, "restored etcd to answer", func() bool {
		return runEtcdctl(t, etcdctl, []string{client}, "", "endpoint", "health").ExitCode == 0
	})
	got := readState(t, newClient(t, []string{client}))
	// etcd does not read Cairn's compact revision (kept under Cairn's meta key); keys, revisions and leases
	// carry over.
	got.compactRev = want.compactRev
	compareStates(t, got, want)
	if t.Failed() {
		t.Log(tail(logs.String()))
	}
}

// TestEtcdOperatorRestoreOnCairnUp is etcd's disaster-recovery procedure on `cairn up`: etcdctl snapshot save,
// more writes, stop, `cairn snapshot restore` once per member with etcd's flags, start; the restored cluster
// holds the keys as at the snapshot, its members' HashKV agree, and it takes writes.
func TestEtcdOperatorRestoreOnCairnUp(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	old := startUp(t, t.TempDir())
	cli := newClient(t, old.endpoints)
	writeHistory(t, cli)
	want := readState(t, cli)
	snapshot := saveSnapshot(t, etcdctl, old.endpoints[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/registry/after-snapshot", "lost by the restore"); err != nil {
		t.Fatal(err)
	}
	var cluster []string
	peers := map[string]string{}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("member-%d", i)
		peers[name] = fmt.Sprintf("http://127.0.0.1:%d", old.child(t, fmt.Sprintf("consensus-%d", i)).Ports["peer"])
		cluster = append(cluster, name+"="+peers[name])
	}
	old.stop(t)

	dir := t.TempDir()
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("member-%d", i)
		out, err := runCairn(t, "snapshot", "restore", snapshot, "--name", name, "--data-dir", filepath.Join(dir, name),
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-token", "restored-cluster",
			"--initial-advertise-peer-urls", peers[name])
		if err != nil {
			t.Fatalf("restore %s: %v\n%s", name, err, out)
		}
	}
	restored := startUp(t, dir)
	rcli := newClient(t, restored.endpoints)
	compareStates(t, readState(t, rcli), want)
	var hashes []uint32
	for _, endpoint := range restored.endpoints {
		resp, err := rcli.HashKV(ctx, endpoint, want.revision)
		if err != nil {
			t.Fatalf("hashkv %s: %v", endpoint, err)
		}
		hashes = append(hashes, resp.Hash)
	}
	if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Errorf("members' HashKV at revision %d differ: %v", want.revision, hashes)
	}
	put, err := rcli.Put(ctx, "/registry/after-restore", "x")
	if err != nil || put.Header.Revision != want.revision+1 {
		t.Fatalf("put after restore: %v %v, want revision %d", put, err, want.revision+1)
	}
}

// TestFromSnapshot: `cairn up --from-snapshot` and `cairn dev --from-snapshot` restore a new data dir and
// start on it; a second `cairn dev --from-snapshot` with the same file starts what the first restored.
func TestFromSnapshot(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	etcd := etcdreftest.StartCluster(t, 1)
	cli := newClient(t, etcd.Endpoints())
	writeHistory(t, cli)
	want := readState(t, cli)
	snapshot := saveSnapshot(t, etcdctl, etcd.Endpoints()[0])

	t.Run("cairn up", func(t *testing.T) {
		up := startUp(t, filepath.Join(t.TempDir(), "up"), "--from-snapshot", snapshot)
		compareStates(t, readState(t, newClient(t, up.endpoints)), want)
	})
	t.Run("cairn dev, twice", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "dev")
		ports, err := supervisor.FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			endpoint, stop := startDevFromSnapshot(t, etcdctl, dir, snapshot, ports)
			compareStates(t, readState(t, newClient(t, []string{endpoint})), want)
			stop()
		}
	})
}

// startDevFromSnapshot runs `cairn dev --from-snapshot snapshot` on dir and ports and waits until it answers.
func startDevFromSnapshot(t *testing.T, etcdctl, dir, snapshot string, ports []int) (endpoint string, stop func()) {
	t.Helper()
	endpoint = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	cmd := exec.Command(cairnBinary, append(devArgs(dir, ports), "--from-snapshot", snapshot)...)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("cairn dev did not stop within 30s of SIGTERM")
		}
	}
	waittest.Until(t, time.Minute, 100*time.Millisecond, "cairn dev --from-snapshot to answer", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("cairn dev --from-snapshot exited: %v\n%s", err, tail(logs.String()))
		default:
		}
		return runEtcdctl(t, etcdctl, []string{endpoint}, "", "endpoint", "health").ExitCode == 0
	})
	return endpoint, stop
}
