package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// etcdctlStep is one etcdctl invocation of a script run against both Cairn and etcd.
type etcdctlStep struct {
	name  string
	args  []string
	stdin string
}

// kvScript exercises the KV API through etcdctl the way an operator would: every flag of put, get and del,
// time travel with --rev, txn from stdin (-i), compaction and its errors, request limits. Revisions are part
// of the output, so Cairn must number them exactly as etcd does.
func kvScript() []etcdctlStep {
	big := strings.Repeat("x", 1600000) // over --max-request-bytes (1.5 MiB)
	return []etcdctlStep{
		{"put", []string{"put", "foo", "bar"}, ""},
		{"put --prev-kv", []string{"put", "foo", "bar2", "--prev-kv"}, ""},
		{"put --ignore-value", []string{"put", "foo", "--ignore-value"}, ""},
		{"put --ignore-value of a missing key", []string{"put", "nokey", "--ignore-value"}, ""},
		{"put value from stdin", []string{"put", "stdin-key"}, "from stdin"},
		{"put a", []string{"put", "a", "1"}, ""},
		{"put b", []string{"put", "b", "2"}, ""},
		{"put c", []string{"put", "c", "3"}, ""},
		{"put dir/x", []string{"put", "dir/x", "30"}, ""},
		{"put dir/y", []string{"put", "dir/y", "10"}, ""},
		{"put dir/z", []string{"put", "dir/z", "20"}, ""},
		{"put dir/y again", []string{"put", "dir/y", "11"}, ""},
		{"put too large", []string{"put", "big"}, big},
		{"get", []string{"get", "foo"}, ""},
		{"get --print-value-only", []string{"get", "foo", "--print-value-only"}, ""},
		{"get -w json", []string{"get", "foo", "-w", "json"}, ""},
		{"get -w fields", []string{"get", "foo", "-w", "fields"}, ""},
		{"get -w protobuf", []string{"get", "dir/x", "-w", "protobuf"}, ""},
		{"get a missing key", []string{"get", "nope"}, ""},
		{"get range [a, c)", []string{"get", "a", "c"}, ""},
		{"get --prefix", []string{"get", "--prefix", "dir/"}, ""},
		{"get --from-key --keys-only", []string{"get", "--from-key", "b", "--keys-only"}, ""},
		{"get --limit", []string{"get", "--prefix", "", "--limit", "2"}, ""},
		{"get --limit -w json (more)", []string{"get", "--prefix", "", "--limit", "2", "-w", "json"}, ""},
		{"get --sort-by VALUE DESCEND", []string{"get", "--prefix", "dir/", "--sort-by", "VALUE", "--order", "DESCEND"}, ""},
		{"get --sort-by MODIFY ASCEND", []string{"get", "--prefix", "dir/", "--sort-by=MODIFY", "--order=ASCEND"}, ""},
		{"get --sort-by CREATE DESCEND --keys-only", []string{"get", "--from-key", "", "--sort-by=CREATE", "--order=DESCEND", "--keys-only"}, ""},
		{"get --sort-by VERSION", []string{"get", "--prefix", "dir/", "--sort-by=VERSION", "--order=DESCEND"}, ""},
		{"get --count-only -w json", []string{"get", "--prefix", "dir/", "--count-only", "-w", "json"}, ""},
		{"get --consistency s", []string{"get", "foo", "--consistency", "s"}, ""},
		{"get --rev time travel", []string{"get", "foo", "--rev", "2"}, ""},
		{"get --rev before the key existed", []string{"get", "dir/x", "--rev", "3"}, ""},
		{"get --prefix --rev -w json", []string{"get", "--prefix", "dir/", "--rev", "10", "-w", "json"}, ""},
		{"get --rev in the future", []string{"get", "foo", "--rev", "1000"}, ""},
		{"del", []string{"del", "a"}, ""},
		{"del --prev-kv", []string{"del", "b", "--prev-kv"}, ""},
		{"del a missing key", []string{"del", "nope"}, ""},
		{"del --prefix", []string{"del", "--prefix", "dir/", "--prev-kv"}, ""},
		{"get a deleted key at an old --rev", []string{"get", "dir/z", "--rev", "11", "-w", "json"}, ""},
		{"txn -i success", []string{"txn", "-i"},
			"value(\"foo\") = \"bar2\"\n\nput foo txn-ok\nget c\n\nput foo txn-failed\n\n"},
		{"txn failure", []string{"txn"},
			"value(\"foo\") = \"nope\"\nmod(\"c\") > \"0\"\n\nput foo txn-ok\n\nput foo txn-failed\nget foo\ndel c\n\n"},
		{"txn -w json", []string{"txn", "-w", "json"},
			"create(\"stdin-key\") > \"0\"\n\nget stdin-key\n\n\n"},
		{"txn with version and range compare", []string{"txn"},
			"version(\"foo\") = \"5\"\n\ndel --prefix \"\"\n\nput missed x\n\n"},
		{"compact", []string{"compact", "5"}, ""},
		{"get a compacted revision", []string{"get", "foo", "--rev", "3"}, ""},
		{"compact below the compaction", []string{"compact", "4"}, ""},
		{"compact in the future", []string{"compact", "1000"}, ""},
		{"get at the compact revision", []string{"get", "foo", "--rev", "5"}, ""},
		{"put after everything", []string{"put", "last", "value", "--prev-kv"}, ""},
		{"get everything -w json", []string{"get", "--prefix", "", "-w", "json"}, ""},
		{"endpoint health", []string{"endpoint", "health"}, ""},
		{"endpoint health -w json", []string{"endpoint", "health", "-w", "json"}, ""},
		{"endpoint health -w table", []string{"endpoint", "health", "-w", "table"}, ""},
	}
}

var (
	headerIDs   = regexp.MustCompile(`"(cluster_id|member_id|raft_term)":\d+`)
	fieldsIDs   = regexp.MustCompile(`"(ClusterID|MemberID|RaftTerm)" : \d+`)
	clientLog   = regexp.MustCompile(`(?m)^\{"level":.*\n`)
	duration    = regexp.MustCompile(`\b[0-9]+(\.[0-9]+)?(µs|ns|ms|s)\b`)
	endpointURL = regexp.MustCompile(`https?://127\.0\.0\.1:\d+`)
	tablePad    = regexp.MustCompile(`[ ─]+`)
)

// normalize removes what legitimately differs between two clusters: IDs, terms, timings, ports, table
// padding, and the client library's own log lines.
func normalize(step etcdctlStep, text string) string {
	if slices.Contains(step.args, "protobuf") {
		return normalizeProtobuf(text)
	}
	text = clientLog.ReplaceAllString(text, "")
	text = headerIDs.ReplaceAllString(text, `"$1":N`)
	text = fieldsIDs.ReplaceAllString(text, `"$1" : N`)
	text = duration.ReplaceAllString(text, "T")
	text = endpointURL.ReplaceAllString(text, "ENDPOINT")
	if strings.Contains(text, "┌") {
		text = tablePad.ReplaceAllString(text, " ")
	}
	return text
}

// normalizeProtobuf decodes etcdctl get -w protobuf and drops the header, whose IDs differ.
func normalizeProtobuf(text string) string {
	var resp pb.RangeResponse
	if err := proto.Unmarshal([]byte(text), &resp); err != nil {
		return "undecodable: " + err.Error()
	}
	resp.Header = nil
	return prototext.Format(&resp)
}

func TestEtcdctlPrintsWhatEtcdPrints(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	etcd := etcdreftest.StartCluster(t, 3)
	cairn := startUp(t, t.TempDir())

	etcdEndpoint := etcd.Endpoints()[:1]
	checkKVScript(t, etcdctl, etcdEndpoint, cairn)
	t.Run("snapshot save", func(t *testing.T) { checkSnapshotSave(t, etcdctl, cairn.endpoints[:1]) })
	t.Run("data survives a restart of cairn up", func(t *testing.T) {
		dir := cairn.dir
		before := cairn.stack(t)
		cairn.stop(t)
		again := startUp(t, dir) // on another --client-port: only frontend-1's client port may change
		after := again.stack(t)
		for _, child := range before.Children {
			now, _ := after.Child(child.Name)
			for port, number := range child.Ports {
				if now.Ports[port] != number && (child.Name != "frontend-1" || port != "client") {
					t.Errorf("%s's %s port was %d, is %d after the restart", child.Name, port, number, now.Ports[port])
				}
			}
		}
		got := runEtcdctl(t, etcdctl, again.endpoints[:1], "", "get", "--prefix", "", "-w", "json")
		want := runEtcdctl(t, etcdctl, etcdEndpoint, "", "get", "--prefix", "", "-w", "json")
		step := etcdctlStep{args: []string{"get"}}
		if normalize(step, got.Stdout) != normalize(step, want.Stdout) {
			t.Errorf("after restart, cairn has\n%s\netcd has\n%s", got.Stdout, want.Stdout)
		}
	})
}

// checkKVScript runs kvScript with etcdctl against etcd and cairn's first endpoint, and checks that both print
// the same.
func checkKVScript(t *testing.T, etcdctl string, etcdEndpoint []string, cairn *upStack) {
	t.Helper()
	for _, step := range kvScript() {
		want := runEtcdctl(t, etcdctl, etcdEndpoint, step.stdin, step.args...)
		got := cairn.etcdctl(t, etcdctl, cairn.endpoints[:1], step.stdin, step.args...)
		if got.ExitCode != want.ExitCode || normalize(step, got.Stdout) != normalize(step, want.Stdout) ||
			normalize(step, got.Stderr) != normalize(step, want.Stderr) {
			t.Errorf("etcdctl %s (%s):\n  cairn: exit %d\n%s%s\n  etcd: exit %d\n%s%s", strings.Join(step.args, " "), step.name,
				got.ExitCode, indent(got.Stdout), indent(normalize(step, got.Stderr)),
				want.ExitCode, indent(want.Stdout), indent(normalize(step, want.Stderr)))
		}
	}
}

// checkSnapshotSave saves a snapshot with etcdctl and opens it as the bbolt database it must be.
func checkSnapshotSave(t *testing.T, etcdctl string, endpoints []string) {
	path := filepath.Join(t.TempDir(), "snap.db")
	res := runEtcdctl(t, etcdctl, endpoints, "", "snapshot", "save", path)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "Snapshot saved at "+path) {
		t.Fatalf("snapshot save: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	db, err := bbolt.Open(path, 0o400, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("the snapshot is not a bbolt database: %v", err)
	}
	defer db.Close()
	keys := 0
	if err := db.View(func(tx *bbolt.Tx) error {
		if b := tx.Bucket([]byte("key")); b != nil {
			keys = b.Stats().KeyN
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if keys == 0 {
		t.Errorf("the snapshot's key bucket is empty or missing")
	}
	if info, err := os.Stat(path); err != nil || info.Size() == 0 {
		t.Errorf("snapshot file: %v %v", info, err)
	}
}

func indent(text string) string {
	if text == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(text, "\n"), "\n", "\n    ") + "\n"
}

// memberListJSON is etcdctl member list -w json.
type memberListJSON struct {
	Members []struct {
		ID         uint64   `json:"ID"`
		Name       string   `json:"name"`
		PeerURLs   []string `json:"peerURLs"`
		ClientURLs []string `json:"clientURLs"`
		IsLearner  bool     `json:"isLearner"`
	} `json:"members"`
}

// endpointStatusJSON is one element of etcdctl endpoint status -w json.
type endpointStatusJSON struct {
	Endpoint string `json:"Endpoint"`
	Status   struct {
		Header struct {
			MemberID uint64 `json:"member_id"`
			Revision int64  `json:"revision"`
		} `json:"header"`
		Version        string `json:"version"`
		StorageVersion string `json:"storageVersion"`
		Leader         uint64 `json:"leader"`
		DbSize         int64  `json:"dbSize"`
	} `json:"Status"`
}

func decodeJSON[T any](t testing.TB, what, text string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, text)
	}
	return v
}
