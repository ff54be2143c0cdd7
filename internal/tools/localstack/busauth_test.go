package localstack

import (
	"slices"
	"strings"
	"testing"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/relayauth"
)

// TestStackKeyArgs: a plain stack hands its processes the bus nkeys and the relay secret as files that
// CreateStackKeys makes (no secret on any command line); a TLS stack, whose certificates prove the same, none.
func TestStackKeyArgs(t *testing.T) {
	for _, tls := range []bool{false, true} {
		s, children := testStack(t, Config{TLS: tls})
		if !tls {
			if err := CreateStackKeys(s.cfg.DataDir); err != nil {
				t.Fatal(err)
			}
		}
		for _, spec := range children {
			kind, _, _ := strings.Cut(spec.Name, "-")
			if slices.Contains(spec.Argv, "--relay-secret") {
				t.Errorf("%s: the relay secret on the command line: %v", spec.Name, spec.Argv)
			}
			want := map[string]bool{}
			switch {
			case tls:
			case kind == "nats":
				want["--nkeys-dir"] = true
				if _, err := eventbus.LoadRoleKeys(flagValue(spec.Argv, "--nkeys-dir")); err != nil {
					t.Errorf("nats --nkeys-dir: %v", err)
				}
			case kind == "storage" || kind == "watchhub" || kind == "leasekeeper":
				want["--nats-nkey-seed-file"] = true
				if seed := flagValue(spec.Argv, "--nats-nkey-seed-file"); seed != eventbus.SeedFile(NkeysDir(s.cfg.DataDir), kind) {
					t.Errorf("%s: --nats-nkey-seed-file %q, not its role's", spec.Name, seed)
				}
			}
			if !tls && (kind == "frontend" || kind == "watchhub" || kind == "leasekeeper") {
				want["--relay-secret-file"] = true
				if _, err := relayauth.ReadSecretFile(flagValue(spec.Argv, "--relay-secret-file")); err != nil {
					t.Errorf("%s: --relay-secret-file: %v", spec.Name, err)
				}
			}
			for _, flag := range []string{"--nkeys-dir", "--nats-nkey-seed-file", "--relay-secret-file"} {
				if got := slices.Contains(spec.Argv, flag); got != want[flag] {
					t.Errorf("TLS %v, %s: %s given: %v, want %v", tls, spec.Name, flag, got, want[flag])
				}
			}
		}
	}
}
