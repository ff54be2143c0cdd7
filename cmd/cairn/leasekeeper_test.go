package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-kv/cairn/internal/commitlog/commitlogtest"
	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/keeperclaim"
	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/storage"
)

// keeperChildArgs, when set, makes the test binary run `cairn leasekeeper` with these arguments (\x1f-separated).
const keeperChildArgs = "CAIRN_TEST_LEASEKEEPER_ARGS"

// keeperProcess is a `cairn leasekeeper` child process.
type keeperProcess struct {
	cmd   *exec.Cmd
	url   string
	admin string
}

func startKeeperProcess(t *testing.T, name, storageURL, natsURL string) *keeperProcess {
	t.Helper()
	kp := &keeperProcess{url: "http://" + loopbacktest.Addr(t), admin: loopbacktest.Addr(t)}
	args := []string{"leasekeeper", "--name", name, "--listen-url", kp.url, "--storage-endpoints", storageURL,
		"--nats-url", natsURL, "--subject-prefix", "cmdtest", "--listen-metrics-urls", "http://" + kp.admin, "--log-level", "warn"}
	kp.cmd = exec.Command(os.Args[0], "-test.run=^TestLeasekeeperProcessesKill9$", "-test.count=1")
	kp.cmd.Env = append(os.Environ(), keeperChildArgs+"="+strings.Join(args, "\x1f"))
	kp.cmd.Stderr = os.Stderr
	if err := kp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kp.cmd.Process.Kill()
		_ = kp.cmd.Wait()
	})
	return kp
}

// active reads the keeper's /metrics: whether it is the active keeper.
func (kp *keeperProcess) active() bool {
	resp, err := http.Get("http://" + kp.admin + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(body), "\ncairn_leasekeeper_active 1\n")
}

// TestLeasekeeperProcessesKill9 runs two `cairn leasekeeper` processes on one storage and NATS, kill -9s the
// active one and checks the bounds: the standby takes over within 3s, a lease kept alive through it stays, a
// lease abandoned at the kill expires no earlier than its TTL and within TTL + 3s, and the killed keeper's epoch
// is fenced at storage.
func TestLeasekeeperProcessesKill9(t *testing.T) {
	if args := os.Getenv(keeperChildArgs); args != "" {
		root := newRootCommand()
		root.SetArgs(strings.Split(args, "\x1f"))
		if err := root.ExecuteContext(context.Background()); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	logger := slog.New(slog.DiscardHandler)
	bus, err := eventbus.StartEmbedded(eventbus.EmbeddedConfig{Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Shutdown()
	log, err := commitlogtest.Open(commitlogtest.Config{MemberID: 1})
	if err != nil {
		t.Fatal(err)
	}
	st, err := storage.Assemble(context.Background(), storage.Config{MemberID: 1, DataDir: t.TempDir(), ListenURL: "http://127.0.0.1:0"},
		storage.Deps{Log: log, Logger: logger}, storage.Bus{NATSURL: bus.ClientURL(), SubjectPrefix: "cmdtest"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer st.Stop(context.Background())
	store, err := storageclient.Dial(st.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	a := startKeeperProcess(t, "lk1", st.URL(), bus.ClientURL())
	waittest.Until(t, 20*time.Second, 20*time.Millisecond, "the first keeper to be active", a.active)
	b := startKeeperProcess(t, "lk2", st.URL(), bus.ClientURL())
	waittest.Until(t, 20*time.Second, 20*time.Millisecond, "the second keeper to serve", func() bool {
		_, err := http.Get("http://" + b.admin + "/health")
		return err == nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients := map[*keeperProcess]pb.LeaseClient{}
	for _, kp := range []*keeperProcess{a, b} {
		conn, err := grpc.NewClient(strings.TrimPrefix(kp.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		clients[kp] = pb.NewLeaseClient(conn)
	}
	grant := func(key string, ttl int64) int64 {
		g, err := clients[a].LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Put(ctx, &pb.PutRequest{Key: []byte(key), Lease: g.ID}); err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	kept, abandoned := grant("kept", 3), grant("abandoned", 2)
	keepAlive := func(kp *keeperProcess, id int64) error {
		stream, err := clients[kp].LeaseKeepAlive(ctx)
		if err == nil {
			err = stream.Send(&pb.LeaseKeepAliveRequest{ID: id})
		}
		if err == nil {
			var r *pb.LeaseKeepAliveResponse
			if r, err = stream.Recv(); err == nil && r.TTL <= 0 {
				err = fmt.Errorf("lease %x: TTL %d", id, r.TTL)
			}
			_ = stream.CloseSend()
		}
		return err
	}
	for range 3 {
		for _, id := range []int64{kept, abandoned} {
			if err := keepAlive(a, id); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	before, err := store.KeeperStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	if err := keepAlive(a, abandoned); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The client keeps the kept lease alive through the failover, on whichever keeper answers.
	keepAliveDone := make(chan struct{})
	keepAliveErr := make(chan error, 1)
	go func() {
		defer close(keepAliveErr)
		for {
			select {
			case <-keepAliveDone:
				return
			case <-time.After(300 * time.Millisecond):
			}
			if err := keepAlive(b, kept); err != nil && !keeperclaim.IsNotActive(err) {
				keepAliveErr <- err
				return
			}
		}
	}()
	took := waittest.Until(t, 3*time.Second, 20*time.Millisecond, "the standby to take over", b.active)
	t.Logf("standby active %v after kill -9", took)
	waittest.Until(t, 10*time.Second, 20*time.Millisecond, "the abandoned lease's key to go", func() bool {
		r, err := store.Range(ctx, &pb.RangeRequest{Key: []byte("abandoned")})
		return err == nil && len(r.Kvs) == 0
	})
	age := time.Since(last)
	if age < 2*time.Second || age > 5*time.Second {
		t.Fatalf("the abandoned lease expired %v after its last keep-alive, want within [TTL, TTL + 3s] (TTL 2s)", age)
	}
	t.Logf("abandoned lease expired %v after its last keep-alive (TTL 2s)", age)
	time.Sleep(3 * time.Second) // past the kept lease's TTL
	close(keepAliveDone)
	if err := <-keepAliveErr; err != nil {
		t.Fatalf("keep-alive through the failover: %v", err)
	}
	if r, err := store.Range(ctx, &pb.RangeRequest{Key: []byte("kept")}); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the lease kept alive through the failover lost its key: %v, %v", r, err)
	}
	_, err = store.SubmitFenced(ctx, &pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: kept}}, before.Epoch)
	if !keeperclaim.IsStaleEpoch(err) {
		t.Fatalf("revoke with the killed keeper's epoch %d: %v, want refused", before.Epoch, err)
	}
}
