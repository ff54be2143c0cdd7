package supervisor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the supervised child: with childModeEnv set, TestMain runs one of the modes
// below instead of the tests. Each mode models a kind of real service.
const (
	childModeEnv   = "SUPERVISOR_TEST_CHILD"
	childAddrEnv   = "SUPERVISOR_TEST_ADDR"   // http-after: address to serve /health on
	childDelayEnv  = "SUPERVISOR_TEST_DELAY"  // http-after: startup time before listening
	childProbeEnv  = "SUPERVISOR_TEST_PROBE"  // probe: URL to GET at startup
	childMarkerEnv = "SUPERVISOR_TEST_MARKER" // probe, grandchild: file to write the result to
	childReadyEnv  = "SUPERVISOR_TEST_READY"  // every mode: file created once SIGTERM handling is set up
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

func runChild(mode string) int {
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	if mode != "grandchild" {
		os.WriteFile(os.Getenv(childReadyEnv), nil, 0o644)
	}
	switch mode {
	case "exit-7": // a service that is done for good (a removed consensus member) and says so by its status
		return 7
	case "sleep": // a well-behaved service: runs until SIGTERM
	case "ignore-term": // a stuck service: only SIGKILL ends it
		for range terms {
		}
	case "http-after": // a service that takes a while before it serves /health
		delay, _ := time.ParseDuration(os.Getenv(childDelayEnv))
		time.Sleep(delay)
		listener, err := net.Listen("tcp", os.Getenv(childAddrEnv))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		go http.Serve(listener, mux)
	case "probe": // a service that needs its dependency up when it starts
		probeDependency()
	case "probe-on-term": // a service that still needs its dependency while it shuts down
		<-terms
		probeDependency()
		return 0
	case "grandchild": // a service that forks a helper which ignores SIGTERM and is not cleaned up by it
		helper := exec.Command(os.Args[0])
		helperReady := os.Getenv(childReadyEnv) + ".helper"
		helper.Env = append(os.Environ(), childModeEnv+"=ignore-term", childReadyEnv+"="+helperReady)
		if err := helper.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		for deadline := time.Now().Add(10 * time.Second); !fileExists(helperReady); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				return 4
			}
		}
		os.WriteFile(os.Getenv(childMarkerEnv), []byte(strconv.Itoa(helper.Process.Pid)), 0o644)
		os.WriteFile(os.Getenv(childReadyEnv), nil, 0o644)
	default:
		fmt.Fprintln(os.Stderr, "unknown child mode", mode)
		return 2
	}
	<-terms
	return 0
}

// probeDependency GETs the probe URL and writes "ok" or the failure to the marker file.
func probeDependency() {
	result := "ok"
	resp, err := http.Get(os.Getenv(childProbeEnv))
	if err != nil {
		result = "fail: " + err.Error()
	} else {
		resp.Body.Close()
	}
	os.WriteFile(os.Getenv(childMarkerEnv), []byte(result), 0o644)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// childSpec returns a spec that re-executes the test binary in the given mode; the child is ready once it
// handles SIGTERM, so a test's Stop exercises the child's own signal handling.
func childSpec(t *testing.T, name, mode string, env ...string) ChildSpec {
	t.Helper()
	dir := t.TempDir()
	readyFile := filepath.Join(dir, name+".ready")
	return ChildSpec{
		Name:    name,
		Argv:    []string{os.Args[0], "-test.run=^$"},
		Env:     append([]string{childModeEnv + "=" + mode, childReadyEnv + "=" + readyFile}, env...),
		LogFile: filepath.Join(dir, name+".log"),
		Ready: func(context.Context) error {
			if !fileExists(readyFile) {
				return errors.New("child has not set up its signal handling yet")
			}
			return nil
		},
	}
}

// alive reports whether pid is a live process (a zombie counts as dead).
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func startSupervisor(t *testing.T, cfg Config) *Supervisor {
	t.Helper()
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 20 * time.Millisecond
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 2 * time.Second
	}
	sup, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sup.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { sup.Stop(context.Background()) })
	return sup
}
