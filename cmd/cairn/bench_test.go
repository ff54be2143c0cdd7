package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
	"github.com/cairn-kv/cairn/internal/tools/bench"
)

// runCairn runs the command tree in-process with args and returns stdout.
func runCairn(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := newRootCommand()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		t.Logf("cairn %v: %v\nstderr:\n%s", args, err, stderr.String())
	}
	return stdout.String(), err
}

func TestVersionCommand(t *testing.T) {
	out, err := runCairn(t, "version")
	if err != nil || !strings.Contains(out, "cairn Version: "+cairnVersion) || !strings.Contains(out, "Go Version: go") {
		t.Fatalf("version: %q %v", out, err)
	}
}

func TestBenchCommandsAgainstEtcd(t *testing.T) {
	cluster := etcdreftest.StartCluster(t, 1)
	endpoints := strings.Join(cluster.Endpoints(), ",")
	tests := []struct {
		name       string
		args       []string
		wantName   string
		wantTotal  int // -1: bounded by --duration, any positive count
		wantParams map[string]string
	}{
		{"put, space-separated flags", []string{"bench", "--endpoints", endpoints, "--clients", "4", "--conns", "2",
			"put", "--total", "200", "--val-size", "64", "--sequential-keys", "--key-space-size", "50", "--output", "json"},
			"put", 200, map[string]string{"clients": "4", "conns": "2", "val_size": "64", "key_space_size": "50"}},
		{"range serializable, = flags", []string{"bench", "--endpoints=" + endpoints, "--total=100", "--output=json",
			"range", "a", "z", "--consistency=s"}, "range", 100, map[string]string{"consistency": "s", "end": "z"}},
		{"txn-put", []string{"bench", "--endpoints", endpoints, "--output", "json", "txn-put", "--total", "30",
			"--txn-ops", "3", "--key-space-size", "90"}, "txn-put", 30, map[string]string{"txn_ops": "3"}},
		{"watch: 10 watchers on 2 keys, 20 puts", []string{"bench", "--endpoints", endpoints, "--output", "json",
			"--total", "20", "watch", "--streams", "2", "--watch-per-stream", "5", "--watched-key-total", "2"},
			"watch", 100, map[string]string{"watchers": "10", "streams": "2", "received_events": "100", "watched_keys": "2"}},
		{"watch-latency, etcd's flags", []string{"bench", "--endpoints", endpoints, "--output", "json",
			"watch-latency", "--streams", "2", "--watchers-per-stream", "3", "--put-total", "10", "--put-rate", "50", "--prevkv"},
			"watch-latency", 60, map[string]string{"watchers": "6", "puts": "10", "prevkv": "true", "rate": "50"}},
		{"duration alone bounds the run", []string{"bench", "--endpoints", endpoints, "--output", "json",
			"--duration", "300ms", "put"}, "put", -1, map[string]string{"total": "0", "duration": "300ms"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := runCairn(t, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			var summary bench.Summary
			if err := json.Unmarshal([]byte(out), &summary); err != nil {
				t.Fatalf("output is not one JSON summary: %v\n%s", err, out)
			}
			if summary.Name != tt.wantName || summary.Errors != 0 || summary.Requests == 0 ||
				tt.wantTotal >= 0 && summary.Requests != tt.wantTotal {
				t.Fatalf("summary %s: requests %d errors %v, want %d", summary.Name, summary.Requests, summary.ErrorCounts, tt.wantTotal)
			}
			for key, want := range tt.wantParams {
				if summary.Params[key] != want {
					t.Errorf("param %s = %q, want %q", key, summary.Params[key], want)
				}
			}
		})
	}

	out, err := runCairn(t, "bench", "--endpoints", endpoints, "--total", "10", "put")
	if err != nil || !strings.Contains(out, "Requests/sec:") || !strings.Contains(out, "99.9% in") {
		t.Errorf("text summary: %v\n%s", err, out)
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad output", []string{"bench", "--output", "yaml", "put"}, "--output must be"},
		{"bad consistency", []string{"bench", "range", "k", "--consistency", "x"}, "l or s"},
		{"range needs a key", []string{"bench", "range"}, "accepts between 1 and 2 arg"},
		{"key too small", []string{"bench", "put", "--key-size", "1", "--key-space-size", "100000"}, "cannot hold"},
		{"no bound", []string{"bench", "--total", "0", "put"}, "so the run ends"},
		{"watch value too small for its stamp", []string{"bench", "watch", "--val-size", "8"}, "carries the put's time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runCairn(t, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestBenchOverTLS: etcd's --cacert, --cert and --key reach a Cairn whose frontends serve https and want a client
// certificate, --target-leader included; without a certificate the connection is refused, and the run fails
// at once (non-zero exit) rather than after every request.
func TestBenchOverTLS(t *testing.T) {
	certs := certtest.Write(t)
	c := clustertest.Start(t, clustertest.Options{Members: 1, ConfigureFrontend: clustertest.ServeHTTPS(certs),
		ClientTLS: certs.ClientTLS(t, certs.ClientCert, certs.ClientKey)})
	endpoint := strings.Replace(c.Frontends()[0].URL, "http://", "https://", 1)
	tests := []struct {
		name       string
		tlsFlags   []string
		wantErrors int
	}{
		{"with a client certificate", []string{"--cacert", certs.CA, "--cert", certs.ClientCert, "--key", certs.ClientKey}, 0},
		{"without one", []string{"--cacert", certs.CA}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"bench", "--endpoints", endpoint, "--request-timeout", "500ms", "--output", "json"}, tt.tlsFlags...)
			if tt.wantErrors == 0 {
				args = append(args, "--target-leader")
			}
			out, err := runCairn(t, append(args, "--total", "5", "put")...)
			if tt.wantErrors != 0 {
				if err == nil || !strings.Contains(err.Error(), "endpoint unreachable") {
					t.Fatalf("bench without a client certificate = %v, want it to fail fast as unreachable\n%s", err, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var summary bench.Summary
			if err := json.Unmarshal([]byte(out), &summary); err != nil {
				t.Fatalf("output is not one JSON summary: %v\n%s", err, out)
			}
			if summary.Errors != tt.wantErrors || summary.Requests+summary.Errors != 5 {
				t.Fatalf("%d requests answered, %d failed (%v), want %d failed of 5", summary.Requests, summary.Errors,
					summary.ErrorCounts, tt.wantErrors)
			}
			if want := strconv.FormatBool(tt.wantErrors == 0); summary.Params["target_leader"] != want {
				t.Errorf("param target_leader = %q, want %q", summary.Params["target_leader"], want)
			}
		})
	}
	if _, err := runCairn(t, "bench", "--endpoints", endpoint, "--cert", "/no/such.pem", "--key", "/no/such.key", "put"); err == nil ||
		!strings.Contains(err.Error(), "--cacert, --cert, --key") {
		t.Fatalf("missing certificate files: %v, want a --cert error", err)
	}
}

// TestBenchCPUProfile: --cpu-profile writes a CPU profile of the run (gzipped, as runtime/pprof writes it); a
// file that cannot be created fails the command before any request is sent.
func TestBenchCPUProfile(t *testing.T) {
	cluster := etcdreftest.StartCluster(t, 1)
	endpoints := strings.Join(cluster.Endpoints(), ",")
	check, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	keys := func() int64 {
		t.Helper()
		resp, err := check.Get(t.Context(), "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}

	_, err = runCairn(t, "bench", "--endpoints", endpoints, "--cpu-profile",
		filepath.Join(t.TempDir(), "missing", "cpu.pb.gz"), "put", "--total", "10")
	if err == nil || !strings.Contains(err.Error(), "--cpu-profile") {
		t.Fatalf("bench with an uncreatable --cpu-profile = %v, want an error naming the flag", err)
	}
	if n := keys(); n != 0 {
		t.Fatalf("the refused run wrote %d keys", n)
	}

	path := filepath.Join(t.TempDir(), "bench-cpu.pb.gz")
	if _, err := runCairn(t, "bench", "--endpoints", endpoints, "--cpu-profile", path, "--output", "json",
		"put", "--total", "200"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("profile is not gzipped: %v", err)
	}
	if data, err := io.ReadAll(gz); err != nil || len(data) == 0 {
		t.Fatalf("profile: %d bytes, %v", len(data), err)
	}
}
