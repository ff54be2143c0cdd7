package localstack

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTLSStack: with TLS every child gets its own certificate as --internal-*, consensus members etcd's peer
// flags and https peer URLs, frontends their certificate on https client URLs; the etcdctl flags name the
// client certificate.
func TestTLSStack(t *testing.T) {
	s, children := testStack(t, Config{TLS: true})
	pki := filepath.Join(s.cfg.DataDir, "pki")
	for _, spec := range children {
		if got := flagValue(spec.Argv, "--internal-cert-file"); got != filepath.Join(pki, spec.Name+".pem") {
			t.Errorf("%s: --internal-cert-file %q", spec.Name, got)
		}
		if got := flagValue(spec.Argv, "--internal-trusted-ca-file"); got != filepath.Join(pki, "ca.pem") {
			t.Errorf("%s: --internal-trusted-ca-file %q", spec.Name, got)
		}
		switch kind, _, _ := strings.Cut(spec.Name, "-"); kind {
		case "consensus":
			for _, flag := range []string{"--listen-peer-urls", "--initial-advertise-peer-urls", "--advertise-client-urls"} {
				if u := flagValue(spec.Argv, flag); !strings.HasPrefix(u, "https://") {
					t.Errorf("%s: %s %s, want https", spec.Name, flag, u)
				}
			}
			if strings.Contains(flagValue(spec.Argv, "--initial-cluster"), "http://") || !slices.Contains(spec.Argv, "--peer-client-cert-auth") {
				t.Errorf("%s: peer flags %v", spec.Name, spec.Argv)
			}
		case "frontend":
			if flagValue(spec.Argv, "--cert-file") != filepath.Join(pki, spec.Name+".pem") ||
				!strings.HasPrefix(flagValue(spec.Argv, "--listen-client-urls"), "https://") {
				t.Errorf("%s: client port flags %v", spec.Name, spec.Argv)
			}
		}
	}
	if flags := s.EtcdctlFlags(); !strings.Contains(flags, filepath.Join(pki, "client.pem")) {
		t.Errorf("etcdctl flags %q", flags)
	}
}

// TestTLSIsChosenOnTheFirstRun: a stack first laid out plain refuses TLS with what to do; one laid out with
// TLS keeps it when started without.
func TestTLSIsChosenOnTheFirstRun(t *testing.T) {
	for _, tc := range []struct {
		name             string
		first, then      bool
		wantErr, wantTLS bool
	}{
		{"plain, then --tls", false, true, true, false},
		{"--tls, then without", true, false, false, true},
		{"--tls twice", true, true, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			first, err := New(Config{Binary: "/bin/cairn", DataDir: dir, TLS: tc.first})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := first.Plan(); err != nil {
				t.Fatal(err)
			}
			if err := first.plan.layout.save(dir); err != nil {
				t.Fatal(err)
			}
			then, err := New(Config{Binary: "/bin/cairn", DataDir: dir, TLS: tc.then})
			if err != nil {
				t.Fatal(err)
			}
			_, err = then.Plan()
			if (err != nil) != tc.wantErr {
				t.Fatalf("second Plan: %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "new --data-dir") {
					t.Errorf("the refusal does not say what to do: %v", err)
				}
				return
			}
			if then.plan.tls() != tc.wantTLS {
				t.Errorf("TLS %v, want %v", then.plan.tls(), tc.wantTLS)
			}
		})
	}
}
