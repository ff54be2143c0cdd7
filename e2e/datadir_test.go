package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// devArgs is a `cairn dev` command line on dir and ports (client, peer, metrics).
func devArgs(dir string, ports []int) []string {
	return []string{"dev", "--data-dir", dir, "--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		"--listen-metrics-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[2])}
}

// TestDataDirIsNeverWedgedOrMisused: a live data dir is locked, a foreign one refused with advice, a failed
// first start does not wedge the next, and cairn up names a taken client port at once.
func TestDataDirIsNeverWedgedOrMisused(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	ports, err := supervisor.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	live := t.TempDir()
	endpoint, stop := startDev(t, etcdctl, live, ports[:3])
	defer stop()

	etcdDir := t.TempDir()
	for _, d := range []string{"member/wal", "member/snap"} {
		if err := os.MkdirAll(filepath.Join(etcdDir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	upDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(upDir, "layout.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"second cairn dev on a live data dir", devArgs(live, ports[3:]), []string{"data dir in use", `"cairn dev" (pid`}},
		{"cairn up on a live cairn dev data dir", []string{"up", "--data-dir", live}, []string{"cairn member data dir", "cairn dev --data-dir"}},
		{"cairn dev on an etcd data dir", devArgs(etcdDir, ports[3:]), []string{"etcd data dir", "cairn snapshot restore"}},
		{"cairn dev on a cairn up data dir", devArgs(upDir, ports[3:]), []string{"cairn up data dir", "cairn up --data-dir"}},
		{"cairn up with its client port taken", []string{"up", "--data-dir", t.TempDir(), "--client-port",
			strings.TrimPrefix(endpoint, "http://127.0.0.1:")}, []string{fmt.Sprintf("client port %s is not free", strings.TrimPrefix(endpoint, "http://127.0.0.1:"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCairn(t, tc.args...)
			if err == nil {
				t.Fatalf("cairn %v succeeded:\n%s", tc.args, tail(out))
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, tail(out))
				}
			}
		})
	}

	t.Run("a first start that failed does not wedge the next", func(t *testing.T) {
		dir := t.TempDir()
		// The peer port is the live dev's: the first start fails after creating its WAL.
		busyPeer := []int{ports[3], ports[1], ports[5]}
		out, err := runCairn(t, devArgs(dir, busyPeer)...)
		if err == nil || !strings.Contains(out, "address already in use") {
			t.Fatalf("cairn dev on a taken peer port: %v\n%s", err, tail(out))
		}
		free, err := supervisor.FreePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		_, stopSecond := startDev(t, etcdctl, dir, free)
		stopSecond()
	})
}
