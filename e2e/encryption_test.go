package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
)

// writeEncryptionConfig writes an EncryptionConfiguration with providers (YAML list items) for every key.
func writeEncryptionConfig(t *testing.T, path, providers string) {
	t.Helper()
	text := "kind: EncryptionConfiguration\nresources:\n- prefixes: [\"/\"]\n  providers:\n" + providers
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func aesgcmProvider(name string) string {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	return fmt.Sprintf("  - aesgcm: {keys: [{name: %s, secret: %s}]}\n", name, base64.StdEncoding.EncodeToString(secret))
}

// TestEncryptionAtRestOnCairnUp writes a known secret with etcdctl on `cairn up` with encryption on, reads it
// back through every API, and finds no plaintext in any file under the data dir (WALs, databases, logs) nor in a
// `snapshot save` file, which `cairn snapshot decrypt` turns into a plain copy.
func TestEncryptionAtRestOnCairnUp(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	dir := t.TempDir()
	config := filepath.Join(t.TempDir(), "encryption.yaml")
	writeEncryptionConfig(t, config, aesgcmProvider("key1")+"  - identity: {}\n")
	s := startUp(t, filepath.Join(dir, "up"), "--encryption-config", config)
	marker := fmt.Sprintf("PLAINTEXT-SECRET-%d", time.Now().UnixNano())
	key := "/registry/secrets/default/db-password"

	// A watcher with prev_kv from before the writes.
	c := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	watch := c.Watch(ctx, key, clientv3.WithPrevKV(), clientv3.WithRev(s.currentRevision(t, ctx, c)+1))

	if res := runEtcdctl(t, etcdctl, s.endpoints[:1], "", "put", key, marker); res.ExitCode != 0 {
		t.Fatalf("etcdctl put: %s%s", res.Stdout, res.Stderr)
	}
	t.Run("etcdctl get", func(t *testing.T) {
		res := runEtcdctl(t, etcdctl, s.endpoints[1:2], "", "get", key, "--print-value-only")
		if strings.TrimSpace(res.Stdout) != marker {
			t.Fatalf("etcdctl get = %q %s", res.Stdout, res.Stderr)
		}
	})
	t.Run("etcdctl txn comparing the value", func(t *testing.T) {
		stdin := fmt.Sprintf("value(\"%s\") = \"%s\"\n\nput %s %s-2\n\nput /txn/failed x\n\n", key, marker, key, marker)
		res := runEtcdctl(t, etcdctl, s.endpoints[:1], stdin, "txn")
		if !strings.HasPrefix(res.Stdout, "SUCCESS") {
			t.Fatalf("etcdctl txn: %s%s", res.Stdout, res.Stderr)
		}
	})
	t.Run("watch with prev_kv", func(t *testing.T) {
		var events []string
		for len(events) < 2 {
			select {
			case resp := <-watch:
				for _, ev := range resp.Events {
					prev := ""
					if ev.PrevKv != nil {
						prev = string(ev.PrevKv.Value)
					}
					events = append(events, string(ev.Kv.Value)+" after "+prev)
				}
			case <-ctx.Done():
				t.Fatalf("watch: only %v", events)
			}
		}
		if events[0] != marker+" after " || events[1] != marker+"-2 after "+marker {
			t.Fatalf("watch events %q", events)
		}
	})
	t.Run("range stream", func(t *testing.T) {
		stream, err := c.GetStream(ctx, "/registry/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := clientv3.GetStreamToGetResponse(stream)
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != marker+"-2" {
			t.Fatalf("range stream = %v, %v", resp, err)
		}
	})
	t.Run("gateway", func(t *testing.T) {
		body := fmt.Sprintf(`{"key": %q}`, base64.StdEncoding.EncodeToString([]byte(key)))
		resp, err := http.Post(strings.TrimSuffix(s.endpoints[2], "/")+"/v3/kv/range", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out struct {
			Kvs []struct{ Value []byte } `json:"kvs"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || len(out.Kvs) != 1 || string(out.Kvs[0].Value) != marker+"-2" {
			t.Fatalf("gateway range: %s (%v)", raw, err)
		}
	})

	snapshot := filepath.Join(dir, "snapshot.db")
	if res := runEtcdctl(t, etcdctl, s.endpoints[:1], "", "snapshot", "save", snapshot); res.ExitCode != 0 {
		t.Fatalf("snapshot save: %s%s", res.Stdout, res.Stderr)
	}
	status := mustRunCairn(t, "encryption", "status", "--endpoints", strings.Join(s.endpoints, ","), "--encryption-config", config)
	if !strings.Contains(status, "aesgcm") || !strings.Contains(status, "key1") || strings.Contains(status, "MISSING") {
		t.Errorf("cairn encryption status:\n%s", status)
	}
	checkHashesAgree(t, ctx, s, c, etcdctl)
	s.stop(t)

	// Every file: the members' WALs and databases, the logs, stack.json, the snapshot.
	assertNoPlaintextUnder(t, dir, marker)
	plain := filepath.Join(t.TempDir(), "plain.db")
	mustRunCairn(t, "snapshot", "decrypt", "--encryption-config", config, snapshot, plain)
	if raw, err := os.ReadFile(plain); err != nil || !bytes.Contains(raw, []byte(marker+"-2")) {
		t.Fatalf("the decrypted snapshot does not hold the plaintext (%v)", err)
	}
	// etcd-compatible: etcdutl restores it (checking its integrity hash).
	restored := filepath.Join(t.TempDir(), "etcd")
	if out, err := exec.Command(etcdreftest.Etcdutl(t), "snapshot", "restore", plain, "--data-dir", restored).CombinedOutput(); err != nil {
		t.Fatalf("etcdutl snapshot restore of the decrypted copy: %v\n%s", err, out)
	}
}

// assertNoPlaintextUnder fails when any file under dir holds marker.
func assertNoPlaintextUnder(t *testing.T, dir, marker string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if i := bytes.Index(raw, []byte(marker)); i >= 0 {
			t.Errorf("%s holds the plaintext at offset %d", path, i)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("no plaintext in %d files under %s", files, dir)
}

// mustRunCairn runs the cairn binary and returns its output, failing the test when it fails.
func mustRunCairn(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCairn(t, args...)
	if err != nil {
		t.Fatalf("cairn %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
