package e2e

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// TestDevLogsACleanStopCleanly: a start, a write and a clean stop of `cairn dev` log no WARN and no ERROR (an
// ERROR only for an error), and no line carries a key twice (one key per field).
func TestDevLogsACleanStopCleanly(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	ports, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	endpoint, stop, logs := startDevLogged(t, etcdctl, t.TempDir(), ports, devTLS{})
	if res := runEtcdctl(t, etcdctl, []string{endpoint}, "", "put", "k", "v"); res.ExitCode != 0 {
		t.Fatalf("put: %+v", res)
	}
	stop()
	lines := 0
	for line := range strings.Lines(logs.String()) {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		lines++
		if keys := duplicateKeys(t, line); len(keys) > 0 {
			t.Errorf("keys %v twice in %s", keys, line)
		}
		var entry struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("not JSON: %v: %s", err, line)
		}
		if slowMachineWarnings[entry.Msg] {
			t.Logf("a warning about this machine's speed, not the run: %s", line)
			continue
		}
		if entry.Level == "WARN" || entry.Level == "ERROR" {
			t.Errorf("a clean run logged %s: %s", entry.Level, line)
		}
	}
	if lines == 0 {
		t.Fatalf("cairn dev logged no JSON line:\n%s", logs.String())
	}
}

// slowMachineWarnings are the WARN lines that report a slow disk or an overloaded machine (as etcd's "slow
// fdatasync" does): right for an operator, and no sign that the run went wrong on a loaded CI machine.
var slowMachineWarnings = map[string]bool{
	"slow bbolt commit": true,
	"leader failed to send out heartbeat on time; took too long, leader is overloaded likely from slow disk": true,
}

// duplicateKeys lists the top-level keys a JSON object line repeats (encoding/json keeps the last silently).
func duplicateKeys(t *testing.T, line string) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(line)))
	if _, err := dec.Token(); err != nil { // {
		t.Fatalf("not a JSON object: %s", line)
	}
	seen := map[string]bool{}
	var dups []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		key := tok.(string)
		if seen[key] {
			dups = append(dups, key)
		}
		seen[key] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
	}
	return dups
}
