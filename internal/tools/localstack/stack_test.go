package localstack

import (
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

func TestLayoutIsKeptAcrossRuns(t *testing.T) {
	dir := t.TempDir()
	want := map[string][]string{"consensus-1": {"peer", "api"}, "frontend-1": {"client", "metrics"}}
	first, err := loadLayout(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if first.Members != 3 || first.Token == "" {
		t.Fatalf("new layout: %+v", first)
	}
	if err := first.assignPorts(want, map[string]map[string]int{"frontend-1": {"client": 2379}}); err != nil {
		t.Fatal(err)
	}
	if err := first.save(dir); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for child, ports := range first.Ports {
		for name, port := range ports {
			if port <= 0 || seen[port] {
				t.Errorf("%s %s: port %d is zero or taken twice", child, name, port)
			}
			seen[port] = true
		}
	}

	again, err := loadLayout(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.assignPorts(want, map[string]map[string]int{"frontend-1": {"client": 12379}}); err != nil {
		t.Fatal(err)
	}
	if again.Token != first.Token || !maps.Equal(again.Ports["consensus-1"], first.Ports["consensus-1"]) {
		t.Errorf("second run changed the layout: %+v, first %+v", again, first)
	}
	if again.Ports["frontend-1"]["client"] != 12379 || again.Ports["frontend-1"]["metrics"] != first.Ports["frontend-1"]["metrics"] {
		t.Errorf("frontend ports on the second run: %v, first %v", again.Ports["frontend-1"], first.Ports["frontend-1"])
	}
}

func TestLayoutRefusesAnotherMemberCount(t *testing.T) {
	dir := t.TempDir()
	l, err := loadLayout(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.save(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := loadLayout(dir, 5); err == nil || !strings.Contains(err.Error(), "3-member") {
		t.Fatalf("loading a 3-member layout as 5 members: %v", err)
	}
}

// testStack lays out a stack without starting it.
func testStack(t *testing.T, cfg Config) (*Stack, []supervisor.ChildSpec) {
	t.Helper()
	cfg.Binary, cfg.DataDir = "/bin/cairn", t.TempDir()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	children, err := s.Plan()
	if err != nil {
		t.Fatal(err)
	}
	return s, children
}

// flagValue is the value after --name in argv.
func flagValue(argv []string, name string) string {
	i := slices.Index(argv, name)
	if i < 0 || i+1 >= len(argv) {
		return ""
	}
	return argv[i+1]
}

func TestChildrenOfAThreeMemberStack(t *testing.T) {
	s, children := testStack(t, Config{ClientPort: 2379, ExtraArgs: map[string][]string{"consensus": {"--heartbeat-interval", "50"}}})
	byName := map[string][]string{}
	deps := map[string][]string{}
	for _, spec := range children {
		byName[spec.Name] = spec.Argv
		deps[spec.Name] = spec.DependsOn
		if spec.Ready == nil || spec.LogFile == "" || spec.Ports["metrics"] == 0 {
			t.Errorf("%s: no readiness check, log file or metrics port: %+v", spec.Name, spec)
		}
		if flagValue(spec.Argv, "--listen-metrics-urls") == "" || flagValue(spec.Argv, "--log-level") != "info" {
			t.Errorf("%s: argv lacks the shared flags: %v", spec.Name, spec.Argv)
		}
	}
	wantNames := []string{"nats", "consensus-1", "consensus-2", "consensus-3", "storage-1", "storage-2", "storage-3",
		"leasekeeper-1", "leasekeeper-2", "watchhub-1", "watchhub-2", "frontend-1", "frontend-2", "frontend-3"}
	if got := slices.Sorted(maps.Keys(byName)); !slices.Equal(got, slices.Sorted(slices.Values(wantNames))) {
		t.Fatalf("children %v, want %v", got, wantNames)
	}
	c2 := byName["consensus-2"]
	if c2[1] != "consensus" || flagValue(c2, "--name") != "member-2" || strings.Count(flagValue(c2, "--initial-cluster"), "=") != 3 ||
		!strings.Contains(flagValue(c2, "--initial-cluster"), "member-2="+flagValue(c2, "--listen-peer-urls")) ||
		flagValue(c2, "--advertise-client-urls") != flagValue(byName["frontend-2"], "--listen-client-urls") ||
		flagValue(c2, "--advertise-storage-url") != flagValue(byName["storage-2"], "--listen-storage-url") ||
		flagValue(c2, "--heartbeat-interval") != "50" {
		t.Errorf("consensus-2 argv: %v", c2)
	}
	if s2 := byName["storage-2"]; flagValue(s2, "--consensus-endpoint") != flagValue(c2, "--listen-consensus-url") ||
		!strings.HasPrefix(flagValue(s2, "--nats-url"), "nats://127.0.0.1:") || !slices.Equal(deps["storage-2"], []string{"consensus-2", "nats"}) {
		t.Errorf("storage-2 argv %v, depends on %v", s2, deps["storage-2"])
	}
	f1 := byName["frontend-1"]
	if flagValue(f1, "--listen-client-urls") != "http://127.0.0.1:2379" || flagValue(f1, "--name") != "member-1" ||
		!strings.HasPrefix(flagValue(f1, "--storage-endpoints"), flagValue(byName["storage-1"], "--listen-storage-url")+",") ||
		len(deps["frontend-1"]) != 7 {
		t.Errorf("frontend-1 argv %v, depends on %v", f1, deps["frontend-1"])
	}
	lk2 := byName["leasekeeper-2"]
	if lk2[1] != "leasekeeper" || flagValue(lk2, "--name") != "leasekeeper-2" ||
		!strings.HasPrefix(flagValue(lk2, "--storage-endpoints"), flagValue(byName["storage-2"], "--listen-storage-url")+",") ||
		strings.Count(flagValue(lk2, "--storage-endpoints"), ",") != 2 || flagValue(lk2, "--nats-url") != flagValue(byName["storage-1"], "--nats-url") ||
		flagValue(f1, "--lease-endpoints") != flagValue(byName["leasekeeper-1"], "--listen-url")+","+flagValue(lk2, "--listen-url") ||
		len(deps["leasekeeper-2"]) != 4 {
		t.Errorf("leasekeeper-2 argv %v, depends on %v; frontend-1 --lease-endpoints %q", lk2, deps["leasekeeper-2"],
			flagValue(f1, "--lease-endpoints"))
	}
	wh2 := byName["watchhub-2"]
	if wh2[1] != "watchhub" || flagValue(wh2, "--name") != "watchhub-2" ||
		!strings.HasPrefix(flagValue(wh2, "--storage-endpoints"), flagValue(byName["storage-2"], "--listen-storage-url")+",") ||
		flagValue(wh2, "--nats-url") != flagValue(byName["storage-1"], "--nats-url") ||
		flagValue(f1, "--watch-endpoints") != flagValue(byName["watchhub-1"], "--listen-url")+","+flagValue(wh2, "--listen-url") ||
		len(deps["watchhub-2"]) != 4 {
		t.Errorf("watchhub-2 argv %v, depends on %v; frontend-1 --watch-endpoints %q", wh2, deps["watchhub-2"],
			flagValue(f1, "--watch-endpoints"))
	}
	if f3 := byName["frontend-3"]; !strings.HasPrefix(flagValue(f3, "--consensus-endpoints"), flagValue(byName["consensus-3"], "--listen-consensus-url")+",") {
		t.Errorf("frontend-3 does not list its own member first: %v", f3)
	}
	if got := s.ClientEndpoints(); len(got) != 3 || got[0] != "http://127.0.0.1:2379" {
		t.Errorf("client endpoints %v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"ok", Config{Binary: "cairn", DataDir: "d"}, ""},
		{"no binary", Config{DataDir: "d"}, "no cairn binary"},
		{"no data dir", Config{Binary: "cairn"}, "no data dir"},
		{"negative members", Config{Binary: "cairn", DataDir: "d", Members: -1}, "negative member"},
		{"negative child GOMAXPROCS", Config{Binary: "cairn", DataDir: "d", ChildGOMAXPROCS: -2}, "negative child GOMAXPROCS"},
		{"negative child memory limit", Config{Binary: "cairn", DataDir: "d", ChildMemoryLimitMiB: -1}, "negative child memory limit"},
		{"bad port", Config{Binary: "cairn", DataDir: "d", ClientPort: 70000}, "out of range"},
		{"unknown service", Config{Binary: "cairn", DataDir: "d", ExtraArgs: map[string][]string{"etcd": nil}}, "unknown service"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestChildGOMAXPROCS(t *testing.T) {
	auto := "GOMAXPROCS=" + strconv.Itoa(max(1, runtime.NumCPU()/4))
	tests := []struct {
		name     string
		procs    int
		environ  string // GOMAXPROCS of this process; "" for unset
		extraEnv []string
		want     []string
	}{
		{"auto", 0, "", nil, []string{auto}},
		{"auto keeps the extra env after it", 0, "", []string{"A=b"}, []string{auto, "A=b"}},
		{"inherited from the environment", 0, "3", nil, nil},
		{"explicit wins over the environment", 2, "3", nil, []string{"GOMAXPROCS=2"}},
		{"an extra env entry wins (it comes later)", 2, "", []string{"GOMAXPROCS=5"}, []string{"GOMAXPROCS=2", "GOMAXPROCS=5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.environ != "" {
				t.Setenv("GOMAXPROCS", tt.environ)
			} else if old, set := os.LookupEnv("GOMAXPROCS"); set {
				t.Setenv("GOMAXPROCS", old) // restored after the test
				_ = os.Unsetenv("GOMAXPROCS")
			}
			// EnablePprof: no GODEBUG entry (TestChildGODEBUG)
			_, children := testStack(t, Config{ChildGOMAXPROCS: tt.procs, Env: tt.extraEnv, EnablePprof: true})
			for _, spec := range children {
				if !slices.Equal(spec.Env, tt.want) {
					t.Fatalf("%s env %v, want %v", spec.Name, spec.Env, tt.want)
				}
			}
		})
	}
}

// TestChildGODEBUG: children sample no heap profile unless they serve one (--enable-pprof) or GODEBUG already
// sets the rate; the rest of the inherited GODEBUG is kept.
func TestChildGODEBUG(t *testing.T) {
	for _, tt := range []struct {
		name        string
		inherited   string
		enablePprof bool
		want        string
		wantSet     bool
	}{
		{"off by default", "", false, "memprofilerate=0", true},
		{"appended to the inherited settings", "gctrace=1", false, "gctrace=1,memprofilerate=0", true},
		{"on with --enable-pprof", "gctrace=1", true, "gctrace=1", false},
		{"an inherited rate is kept", "memprofilerate=8192", false, "memprofilerate=8192", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, set := childGODEBUG(tt.inherited, tt.enablePprof)
			if got != tt.want || set != tt.wantSet {
				t.Fatalf("childGODEBUG(%q, %v) = %q, %v; want %q, %v", tt.inherited, tt.enablePprof, got, set, tt.want, tt.wantSet)
			}
		})
	}
	t.Setenv("GODEBUG", "gctrace=0")
	_, children := testStack(t, Config{ChildGOMAXPROCS: 1})
	for _, spec := range children {
		if !slices.Contains(spec.Env, "GODEBUG=gctrace=0,memprofilerate=0") {
			t.Fatalf("%s env %v: no GODEBUG=gctrace=0,memprofilerate=0", spec.Name, spec.Env)
		}
	}
}

// TestChildMemoryLimit: a limit reaches every child's command line as --memory-limit-mib but the watchhubs',
// 70% of it the consensus members'; none adds no flag.
func TestChildMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		name          string
		mib           int
		want, members []string
	}{
		{"none", 0, nil, nil},
		{"48 MiB", 48, []string{"--memory-limit-mib", "48"}, []string{"--memory-limit-mib", "33"}},
		{"20 MiB", 20, []string{"--memory-limit-mib", "20"}, []string{"--memory-limit-mib", "14"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, children := testStack(t, Config{ChildMemoryLimitMiB: tt.mib})
			for _, spec := range children {
				i := slices.Index(spec.Argv, "--memory-limit-mib")
				var got []string
				if i >= 0 {
					got = spec.Argv[i:min(i+2, len(spec.Argv))]
				}
				want := tt.want
				switch {
				case strings.HasPrefix(spec.Name, "watchhub"): // its heap grows with its watchers: no limit
					want = nil
				case strings.HasPrefix(spec.Name, "consensus"):
					want = tt.members
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s argv has %v, want %v", spec.Name, got, want)
				}
			}
		})
	}
}

// TestClientTLS: with a certificate every frontend serves https with etcd's TLS flags, and the members
// advertise those https URLs; without one nothing changes.
func TestClientTLS(t *testing.T) {
	files := tlsconfig.Files{CertFile: "/c.pem", KeyFile: "/k.pem", TrustedCAFile: "/ca.pem", ClientCertAuth: true}
	for _, tc := range []struct {
		name       string
		tls        tlsconfig.Files
		wantScheme string
		wantArgs   []string
	}{
		{"plain", tlsconfig.Files{}, "http://", nil},
		{"client certificates", files, "https://", []string{"--cert-file", "/c.pem", "--key-file", "/k.pem",
			"--trusted-ca-file", "/ca.pem", "--client-cert-auth"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, children := testStack(t, Config{ClientTLS: tc.tls})
			for _, spec := range children {
				switch {
				case strings.HasPrefix(spec.Name, "frontend-"):
					if u := flagValue(spec.Argv, "--listen-client-urls"); !strings.HasPrefix(u, tc.wantScheme) {
						t.Errorf("%s listens on %s, want %s", spec.Name, u, tc.wantScheme)
					}
					for _, arg := range tc.wantArgs {
						if !slices.Contains(spec.Argv, arg) {
							t.Errorf("%s args %v lack %s", spec.Name, spec.Argv, arg)
						}
					}
					if tc.wantArgs == nil && slices.Contains(spec.Argv, "--cert-file") {
						t.Errorf("%s has TLS flags: %v", spec.Name, spec.Argv)
					}
				case strings.HasPrefix(spec.Name, "consensus-"):
					if u := flagValue(spec.Argv, "--advertise-client-urls"); !strings.HasPrefix(u, tc.wantScheme) {
						t.Errorf("%s advertises %s, want %s", spec.Name, u, tc.wantScheme)
					}
				}
			}
			for _, u := range s.ClientEndpoints() {
				if !strings.HasPrefix(u, tc.wantScheme) {
					t.Errorf("client endpoint %s, want %s", u, tc.wantScheme)
				}
			}
		})
	}
}

// TestTraceChild: with Trace a `cairn trace` child comes first, on ports of its own, and every other child
// exports to its OTLP/gRPC port and depends on it; without it there is no such child and no OTLP environment.
func TestTraceChild(t *testing.T) {
	for _, traced := range []bool{false, true} {
		t.Run(strconv.FormatBool(traced), func(t *testing.T) {
			s, children := testStack(t, Config{Trace: traced, TraceForward: "grpc://127.0.0.1:14317", Env: []string{"A=b"}})
			hasTrace := children[0].Name == "trace"
			if hasTrace != traced || (s.TraceURL() != "") != traced {
				t.Fatalf("trace child first: %v, page %q; want %v", hasTrace, s.TraceURL(), traced)
			}
			if !traced {
				for _, spec := range children {
					if slices.ContainsFunc(spec.Env, func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") }) {
						t.Fatalf("%s env %v in an untraced stack", spec.Name, spec.Env)
					}
				}
				return
			}
			trace := children[0]
			grpcURL := "http://127.0.0.1:" + strconv.Itoa(trace.Ports["grpc"])
			if trace.Ports["grpc"] == 0 || trace.Ports["http"] == 0 || flagValue(trace.Argv, "--listen-otlp-grpc") != grpcURL ||
				flagValue(trace.Argv, "--forward-otlp") != "grpc://127.0.0.1:14317" {
				t.Fatalf("trace child ports %v argv %v", trace.Ports, trace.Argv)
			}
			if want := "http://127.0.0.1:" + strconv.Itoa(trace.Ports["http"]) + "/"; s.TraceURL() != want {
				t.Errorf("page %q, want %q", s.TraceURL(), want)
			}
			if slices.ContainsFunc(trace.Env, func(kv string) bool { return strings.HasPrefix(kv, "OTEL_") }) {
				t.Errorf("the trace child exports to itself: %v", trace.Env)
			}
			for _, spec := range children[1:] {
				tail := spec.Env[len(spec.Env)-4:]
				if !slices.Equal(tail, []string{"A=b", "OTEL_EXPORTER_OTLP_ENDPOINT=" + grpcURL, "OTEL_EXPORTER_OTLP_INSECURE=true",
					"OTEL_BSP_MAX_QUEUE_SIZE=65536"}) {
					t.Errorf("%s env %v, want Config.Env then the trace child's OTLP endpoint", spec.Name, spec.Env)
				}
				// It stops before the trace child, so that its last spans reach it.
				if !slices.Contains(spec.DependsOn, "trace") {
					t.Errorf("%s depends on %v, not on the trace child", spec.Name, spec.DependsOn)
				}
			}
		})
	}
}
