package restore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/tools/etcdref"
)

// writeKubernetesSnapshot writes an etcd-layout snapshot of about size bytes at path: keys under /registry/
// as the Kubernetes apiserver names them, values of 1 to 10 KiB, one revision each, and the SHA-256 trailer.
// It returns the number of key revisions.
func writeKubernetesSnapshot(b testing.TB, path string, size int64) int64 {
	b.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, InitialMmapSize: int(size) * 2})
	if err != nil {
		b.Fatal(err)
	}
	kinds := []string{"pods", "configmaps", "secrets", "events", "leases", "deployments", "services", "endpointslices"}
	value := make([]byte, 10<<10)
	var rev, written int64
	for written < size {
		err := db.Update(func(tx *bolt.Tx) error {
			keys, err := tx.CreateBucketIfNotExists([]byte("key"))
			if err != nil {
				return err
			}
			keys.FillPercent = 1 // appended in revision order
			for range 5000 {
				rev++
				_, _ = rand.Read(value[:64])
				n := 1<<10 + int(binary.BigEndian.Uint16(value[:2]))%(9<<10)
				key := fmt.Sprintf("/registry/%s/namespace-%d/object-%d", kinds[rev%int64(len(kinds))], rev%97, rev)
				kv, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte(key), CreateRevision: rev, ModRevision: rev,
					Version: 1, Value: value[:n]})
				if err != nil {
					return err
				}
				revKey := make([]byte, 17)
				binary.BigEndian.PutUint64(revKey, uint64(rev))
				revKey[8] = '_'
				if err := keys.Put(revKey, kv); err != nil {
					return err
				}
				written += int64(len(kv) + len(revKey))
			}
			meta, err := tx.CreateBucketIfNotExists([]byte("meta"))
			if err != nil {
				return err
			}
			if _, err := tx.CreateBucketIfNotExists([]byte("lease")); err != nil {
				return err
			}
			for _, kv := range [][2][]byte{{[]byte("consistent_index"), be(uint64(rev))}, {[]byte("term"), be(2)},
				{[]byte("storageVersion"), []byte("3.7.0")}} {
				if err := meta.Put(kv[0], kv[1]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		b.Fatal(err)
	}
	if _, err := f.Write(sum.Sum(nil)); err != nil {
		b.Fatal(err)
	}
	return rev
}

func be(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// BenchmarkRestore restores a Kubernetes-like etcd snapshot (CAIRN_RESTORE_BENCH_MIB MiB of keys and values,
// default 64; 860 gives a 1.09 GB file, bbolt's pages adding about a quarter) with cairn's restore and, when etcdutl v3.7.3 is in etcdref's cache, with `etcdutl
// snapshot restore` on the same file in the same run. It reports MB/s and key revisions/s of each.
func BenchmarkRestore(b *testing.B) {
	mib := int64(64)
	if v := os.Getenv("CAIRN_RESTORE_BENCH_MIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		mib = n
	}
	dir := b.TempDir()
	snapshot := filepath.Join(dir, "kubernetes.db")
	keys := writeKubernetesSnapshot(b, snapshot, mib<<20)
	info, err := os.Stat(snapshot)
	if err != nil {
		b.Fatal(err)
	}
	mb := float64(info.Size()) / 1e6
	etcdutl := ""
	if bin, err := etcdref.BinDir(); err == nil {
		if _, err := os.Stat(filepath.Join(bin, "etcdutl")); err == nil {
			etcdutl = filepath.Join(bin, "etcdutl")
		}
	}
	b.Logf("snapshot: %.0f MB, %d key revisions; etcdutl: %q", mb, keys, etcdutl)
	var cairnTime, etcdTime time.Duration
	for i := 0; i < b.N; i++ {
		out := filepath.Join(dir, fmt.Sprintf("cairn-%d", i))
		began := time.Now()
		cfg := Config{SnapshotPath: snapshot, DataDir: out, Name: "m1", InitialCluster: "m1=http://127.0.0.1:2380",
			PeerURLs: []string{"http://127.0.0.1:2380"}, Logger: slog.New(slog.DiscardHandler)}
		if _, err := Restore(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
		cairnTime += time.Since(began)
		_ = os.RemoveAll(out)
		if etcdutl == "" {
			continue
		}
		out = filepath.Join(dir, fmt.Sprintf("etcd-%d", i))
		began = time.Now()
		if msg, err := exec.Command(etcdutl, "snapshot", "restore", snapshot, "--data-dir", out).CombinedOutput(); err != nil {
			b.Fatalf("etcdutl: %v\n%s", err, msg)
		}
		etcdTime += time.Since(began)
		_ = os.RemoveAll(out)
	}
	n := float64(b.N)
	b.ReportMetric(mb*n/cairnTime.Seconds(), "cairn-MB/s")
	b.ReportMetric(float64(keys)*n/cairnTime.Seconds(), "cairn-keys/s")
	if etcdutl != "" {
		b.ReportMetric(mb*n/etcdTime.Seconds(), "etcdutl-MB/s")
		b.ReportMetric(float64(keys)*n/etcdTime.Seconds(), "etcdutl-keys/s")
	}
}
