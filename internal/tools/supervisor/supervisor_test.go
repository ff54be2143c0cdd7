package supervisor

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

func TestConfigValidate(t *testing.T) {
	ok := func(name string, deps ...string) ChildSpec {
		return ChildSpec{Name: name, Argv: []string{"/bin/true"}, LogFile: "/tmp/x.log", DependsOn: deps}
	}
	tests := []struct {
		name     string
		children []ChildSpec
		wantErr  string
	}{
		{"valid chain", []ChildSpec{ok("a"), ok("b", "a"), ok("c", "a", "b")}, ""},
		{"no children", nil, "no children"},
		{"empty name", []ChildSpec{ok("")}, "empty name"},
		{"empty argv", []ChildSpec{{Name: "a", LogFile: "/tmp/a.log"}}, "empty argv"},
		{"no log file", []ChildSpec{{Name: "a", Argv: []string{"/bin/true"}}}, "empty log file"},
		{"duplicate", []ChildSpec{ok("a"), ok("a")}, "duplicate"},
		{"unknown dependency", []ChildSpec{ok("a", "zz")}, "unknown child"},
		{"self dependency", []ChildSpec{ok("a", "a")}, "cycle"},
		{"cycle", []ChildSpec{ok("a", "c"), ok("b", "a"), ok("c", "b")}, "cycle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Config{Children: tt.children}.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestStartReportsChildrenInStackFile(t *testing.T) {
	stackFile := filepath.Join(t.TempDir(), "stack.json")
	a := childSpec(t, "a", "sleep")
	a.Ports = map[string]int{"client": 1234}
	sup := startSupervisor(t, Config{
		Children:  []ChildSpec{a, childSpec(t, "b", "sleep")},
		StackFile: stackFile,
		Meta:      map[string]string{"endpoint": "http://127.0.0.1:1234"},
	})

	stack, err := ReadStack(stackFile)
	if err != nil {
		t.Fatal(err)
	}
	if stack.Meta["endpoint"] != "http://127.0.0.1:1234" {
		t.Errorf("meta = %v", stack.Meta)
	}
	for _, name := range []string{"a", "b"} {
		fromFile, ok := stack.Child(name)
		live, _ := sup.Child(name)
		if !ok || fromFile.PID == 0 || fromFile.PID != live.PID || !alive(fromFile.PID) {
			t.Fatalf("child %s: file %+v, live %+v", name, fromFile, live)
		}
		if fromFile.State != StateRunning || !fromFile.Ready || fromFile.Restarts != 0 {
			t.Errorf("child %s: state %s ready %v restarts %d", name, fromFile.State, fromFile.Ready, fromFile.Restarts)
		}
		if pgid, _ := syscall.Getpgid(fromFile.PID); pgid != fromFile.PID {
			t.Errorf("child %s: pgid %d, want its own group %d", name, pgid, fromFile.PID)
		}
	}
	if a, _ := stack.Child("a"); a.Ports["client"] != 1234 || a.LogFile == "" {
		t.Errorf("child a: ports %v log %q", a.Ports, a.LogFile)
	}
	var text strings.Builder
	stack.WriteText(&text)
	if !strings.Contains(text.String(), "client=1234") {
		t.Errorf("WriteText misses ports:\n%s", text.String())
	}
}

func TestKilledChildIsRestarted(t *testing.T) {
	stackFile := filepath.Join(t.TempDir(), "stack.json")
	sup := startSupervisor(t, Config{
		Children:  []ChildSpec{childSpec(t, "victim", "sleep"), childSpec(t, "bystander", "sleep")},
		StackFile: stackFile,
	})
	before, _ := sup.Child("victim")
	bystander, _ := sup.Child("bystander")

	for round := 1; round <= 2; round++ {
		old, _ := sup.Child("victim")
		if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var now ChildStatus
		waittest.Until(t, 10*time.Second, 20*time.Millisecond, "victim relaunched", func() bool {
			now, _ = sup.Child("victim")
			return now.State == StateRunning && now.PID != old.PID && now.PID != 0
		})
		if now.Restarts != round || !alive(now.PID) || alive(old.PID) {
			t.Fatalf("round %d: restarts %d, new pid %d alive %v, old pid %d alive %v",
				round, now.Restarts, now.PID, alive(now.PID), old.PID, alive(old.PID))
		}
		if !strings.Contains(now.LastExit, "killed") {
			t.Errorf("last exit = %q, want a kill", now.LastExit)
		}
		waittest.Until(t, 5*time.Second, 20*time.Millisecond, "stack file shows the new pid", func() bool {
			stack, err := ReadStack(stackFile)
			fromFile, _ := stack.Child("victim")
			return err == nil && fromFile.PID == now.PID && fromFile.Restarts == round
		})
	}
	if still, _ := sup.Child("bystander"); still.PID != bystander.PID || still.Restarts != 0 {
		t.Errorf("bystander disturbed: %+v -> %+v", bystander, still)
	}
	logText, _ := os.ReadFile(before.LogFile)
	if got := strings.Count(string(logText), "--- supervisor: launched victim"); got != 3 {
		t.Errorf("log file has %d launch headers, want 3:\n%s", got, logText)
	}
}

func TestStopLeavesNoProcesses(t *testing.T) {
	tests := []struct {
		name string
		mode string
	}{
		{"exits on SIGTERM", "sleep"},
		{"ignores SIGTERM", "ignore-term"},
		{"forks a helper that ignores SIGTERM", "grandchild"},
	}
	const stopTimeout = 300 * time.Millisecond
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			marker := filepath.Join(t.TempDir(), "grandchild.pid")
			stackFile := filepath.Join(t.TempDir(), "stack.json")
			sup := startSupervisor(t, Config{
				Children:    []ChildSpec{childSpec(t, "svc", tt.mode, childMarkerEnv+"="+marker)},
				StackFile:   stackFile,
				StopTimeout: stopTimeout,
			})
			status, _ := sup.Child("svc")
			pids := []int{status.PID}
			if tt.mode == "grandchild" {
				waittest.Until(t, 5*time.Second, 20*time.Millisecond, "grandchild pid", func() bool {
					raw, err := os.ReadFile(marker)
					pid, _ := strconv.Atoi(string(raw))
					if err == nil && pid > 0 {
						pids = append(pids, pid)
						return true
					}
					return false
				})
			}
			stopStart := time.Now()
			if err := sup.Stop(context.Background()); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if took := time.Since(stopStart); tt.mode == "ignore-term" && took < stopTimeout {
				t.Errorf("Stop took %s: the child was not given StopTimeout after SIGTERM", took)
			}
			for _, pid := range pids {
				waittest.Until(t, 5*time.Second, 20*time.Millisecond, fmt.Sprintf("pid %d gone", pid), func() bool {
					return !alive(pid)
				})
			}
			stack, _ := ReadStack(stackFile)
			if svc, _ := stack.Child("svc"); svc.State != StateStopped || svc.PID != 0 {
				t.Errorf("stack after stop: %+v", svc)
			}
			if err := sup.Stop(context.Background()); err != nil {
				t.Errorf("second Stop: %v", err)
			}
		})
	}
}

func TestDependentStartsAfterDependencyIsReady(t *testing.T) {
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	marker := filepath.Join(t.TempDir(), "probe")
	backend := childSpec(t, "backend", "http-after", childAddrEnv+"="+addr, childDelayEnv+"=500ms")
	backend.Ready = HTTPReady("http://" + addr + "/health")
	frontend := childSpec(t, "frontend", "probe", childProbeEnv+"=http://"+addr+"/health", childMarkerEnv+"="+marker)
	frontend.DependsOn = []string{"backend"}

	// frontend is listed first: order in the list must not matter, only DependsOn.
	sup := startSupervisor(t, Config{Children: []ChildSpec{frontend, backend}})

	for _, status := range sup.Children() {
		if status.State != StateRunning || !status.Ready {
			t.Errorf("after Start: %s state %s ready %v", status.Name, status.State, status.Ready)
		}
	}
	waittest.Until(t, 5*time.Second, 20*time.Millisecond, "frontend probe result", func() bool {
		raw, _ := os.ReadFile(marker)
		return len(raw) > 0
	})
	if raw, _ := os.ReadFile(marker); string(raw) != "ok" {
		t.Fatalf("frontend started before backend was ready: %s", raw)
	}
	b, _ := sup.Child("backend")
	f, _ := sup.Child("frontend")
	if !f.StartedAt.After(b.StartedAt) {
		t.Errorf("frontend started at %s, backend at %s", f.StartedAt, b.StartedAt)
	}
}

func TestStopStopsDependentsFirst(t *testing.T) {
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	marker := filepath.Join(t.TempDir(), "probe")
	backend := childSpec(t, "backend", "http-after", childAddrEnv+"="+addr, childDelayEnv+"=0s")
	backend.Ready = HTTPReady("http://" + addr + "/health")
	frontend := childSpec(t, "frontend", "probe-on-term", childProbeEnv+"=http://"+addr+"/health", childMarkerEnv+"="+marker)
	frontend.DependsOn = []string{"backend"}
	sup := startSupervisor(t, Config{Children: []ChildSpec{backend, frontend}})

	if err := sup.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if raw, _ := os.ReadFile(marker); string(raw) != "ok" {
		t.Fatalf("backend was stopped before the frontend that depends on it had exited: %q", raw)
	}
}

func TestStartFailsAndCleansUp(t *testing.T) {
	tests := []struct {
		name  string
		specs func(t *testing.T) []ChildSpec
		want  string
	}{
		{
			name: "readiness never passes",
			specs: func(t *testing.T) []ChildSpec {
				stuck := childSpec(t, "stuck", "sleep")
				stuck.Ready = TCPReady(closedAddr(t))
				return []ChildSpec{childSpec(t, "other", "sleep"), stuck}
			},
			want: "not ready",
		},
		{
			name: "program does not exist",
			specs: func(t *testing.T) []ChildSpec {
				missing := childSpec(t, "missing", "sleep")
				missing.Argv = []string{filepath.Join(t.TempDir(), "no-such-program")}
				return []ChildSpec{childSpec(t, "other", "sleep"), missing}
			},
			want: "launch child",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sup, err := New(Config{Children: tt.specs(t), ReadyTimeout: 500 * time.Millisecond, StopTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			err = sup.Start(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start = %v, want error containing %q", err, tt.want)
			}
			for _, status := range sup.Children() {
				if status.PID != 0 || status.State != StateStopped {
					t.Errorf("after failed Start: %+v", status)
				}
			}
		})
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := listener.Addr().String()
	listener.Close()
	return addr
}

func TestFreePortsAreDistinctAndBindable(t *testing.T) {
	ports, err := FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, port := range ports {
		if seen[port] || port < lowestPort || port >= ephemeralLow() {
			t.Fatalf("ports %v: duplicate, or %d outside [%d, %d)", ports, port, lowestPort, ephemeralLow())
		}
		seen[port] = true
		listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", port, err)
		}
		listener.Close()
	}
}
