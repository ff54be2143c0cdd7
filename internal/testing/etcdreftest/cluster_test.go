package etcdreftest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/tools/etcdref"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func newClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func etcdctl(t *testing.T, cluster *etcdref.Cluster, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := append([]string{"--endpoints", strings.Join(cluster.Endpoints(), ",")}, args...)
	out, err := exec.CommandContext(ctx, cluster.Binaries().Etcdctl, full...).CombinedOutput()
	if err != nil {
		t.Fatalf("etcdctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestClusterServesClientV3AndEtcdctl(t *testing.T) {
	cluster := StartCluster(t, 3)
	endpoints := cluster.Endpoints()
	if len(endpoints) != 3 {
		t.Fatalf("endpoints = %v", endpoints)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Written through member 0, read linearizably through member 2.
	if _, err := newClient(t, endpoints[0]).Put(ctx, "/ref/client", "v1"); err != nil {
		t.Fatal(err)
	}
	resp, err := newClient(t, endpoints[2]).Get(ctx, "/ref/client")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("get through another member: %v %v", resp, err)
	}

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"put", []string{"put", "/ref/ctl", "v2"}, "OK"},
		{"get own write", []string{"get", "/ref/ctl", "--print-value-only"}, "v2"},
		{"get client/v3 write", []string{"get", "/ref/client", "--print-value-only"}, "v1"},
		{"prefix count", []string{"get", "/ref/", "--prefix", "--count-only", "--write-out=fields"}, `"Count" : 2`},
		{"member list", []string{"member", "list"}, "etcd-2"},
		{"endpoint health", []string{"endpoint", "health"}, "is healthy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if out := etcdctl(t, cluster, tt.args...); !strings.Contains(out, tt.want) {
				t.Fatalf("etcdctl %v = %q, want it to contain %q", tt.args, out, tt.want)
			}
		})
	}
	if out := etcdctl(t, cluster, "member", "list"); strings.Count(strings.TrimSpace(out), "\n") != 2 {
		t.Errorf("member list has not 3 lines:\n%s", out)
	}
}

func TestKilledMemberRecoversWithItsData(t *testing.T) {
	cluster := StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := newClient(t, cluster.Endpoints()[0])
	if _, err := client.Put(ctx, "/ref/durable", "before-crash"); err != nil {
		t.Fatal(err)
	}

	victim := cluster.Members()[1]
	before, _ := cluster.Supervisor().Child(victim.Name)
	if err := syscall.Kill(before.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		now, _ := cluster.Supervisor().Child(victim.Name)
		if now.PID != 0 && now.PID != before.PID && now.Restarts == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %s not relaunched: %+v", victim.Name, now)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The relaunched member answers a serializable read from its own data once it has caught up.
	restarted := newClient(t, victim.ClientURL)
	for {
		resp, err := restarted.Get(ctx, "/ref/durable", clientv3.WithSerializable())
		if err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == "before-crash" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("restarted member never served the write: %v %v", resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStartRefusesDirWithMemberData(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etcd-0"), 0o755); err != nil {
		t.Fatal(err)
	}
	cluster, err := etcdref.New(etcdref.Config{Members: 1, Dir: dir, Binaries: etcdref.Binaries{Etcd: "/nonexistent/etcd", Etcdctl: "/nonexistent/etcdctl"}})
	if err != nil {
		t.Fatal(err)
	}
	err = cluster.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "already holds member data") {
		t.Fatalf("Start = %v, want refusal", err)
	}
}
