package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// cairnBinary is the binary under test, built once by TestMain.
var cairnBinary string

func TestMain(m *testing.M) {
	if role := os.Getenv(clientChildRole); role != "" {
		os.Exit(runClientChild(role)) // a client process of a test, not a test run
	}
	dir, err := os.MkdirTemp("", "cairn-e2e-bin-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cairnBinary = filepath.Join(dir, "cairn")
	build := exec.Command("go", "build", "-o", cairnBinary, "github.com/cairn-kv/cairn/cmd/cairn")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building cairn:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// upStack is a running `cairn up`.
type upStack struct {
	t      testing.TB
	dir    string
	cmd    *exec.Cmd
	output *syncBuffer
	// supervisorLog is cairn up's own log (launches, exits, restarts).
	supervisorLog *syncBuffer
	exited        chan struct{}
	endpoints     []string
	// clientTLS are the client certificate, key and CA of a stack started with --tls (zero otherwise).
	clientTLS tlsconfig.Files
}

// startUp runs `cairn up` with args (plus --data-dir dir and a free --client-port) and waits until it reports
// every child ready. It is stopped (SIGTERM, and a clean exit is checked) when the test ends.
func startUp(t testing.TB, dir string, args ...string) *upStack {
	t.Helper()
	ports, err := supervisor.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"up", "--data-dir", dir, "--client-port", fmt.Sprint(ports[0])}, args...)
	s := &upStack{t: t, dir: dir, cmd: exec.Command(cairnBinary, args...), output: &syncBuffer{}, supervisorLog: &syncBuffer{}, exited: make(chan struct{})}
	s.cmd.Stdout = s.output
	s.cmd.Stderr = s.supervisorLog
	if testing.Verbose() {
		s.cmd.Stderr = io.MultiWriter(s.supervisorLog, &prefixWriter{w: os.Stderr, prefix: "cairn up: "})
	}
	if slices.Contains(args, "--tls") {
		pki := filepath.Join(dir, "pki")
		s.clientTLS = tlsconfig.Files{CertFile: filepath.Join(pki, "client.pem"), KeyFile: filepath.Join(pki, "client-key.pem"),
			TrustedCAFile: tlsconfig.CAFile(pki)}
	}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { s.stop(t) })
	s.waitUp(t)
	return s
}

// upBannerEnd is the last line of what cairn up prints once it is up ("cairn is up", then the TLS, trace and
// process lines): a test that reads any of them waits for this one.
const upBannerEnd = "Ctrl-C stops every process"

// waitUp waits for cairn up's whole banner (upBannerEnd) and reads the client endpoints from stack.json.
func (s *upStack) waitUp(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(s.outputText(), upBannerEnd) {
		select {
		case <-s.exited:
			s.dumpLogs(t)
			t.Fatalf("cairn up exited before it was up: %v\n%s", s.cmd.ProcessState, s.outputText())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.dumpLogs(t)
			t.Fatalf("cairn up not up after 2 minutes:\n%s", s.outputText())
		}
	}
	stack := s.stack(t)
	s.endpoints = strings.Split(stack.Meta["client_endpoints"], ",")
	for _, child := range stack.Children {
		if child.State != supervisor.StateRunning || !child.Ready || child.PID == 0 {
			t.Fatalf("after cairn up: %+v", child)
		}
	}
}

func (s *upStack) outputText() string { return s.output.String() }

// stack reads DIR/stack.json.
func (s *upStack) stack(t testing.TB) supervisor.Stack {
	t.Helper()
	stack, err := supervisor.ReadStack(filepath.Join(s.dir, "stack.json"))
	if err != nil {
		t.Fatal(err)
	}
	return stack
}

// child is one process of the stack as stack.json describes it now.
func (s *upStack) child(t testing.TB, name string) supervisor.ChildStatus {
	t.Helper()
	child, ok := s.stack(t).Child(name)
	if !ok {
		t.Fatalf("stack.json has no child %q", name)
	}
	return child
}

// metric reads an unlabelled series from a child's /metrics; false when the child does not answer or has no
// such series.
func (s *upStack) metric(t testing.TB, child, series string) (float64, bool) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", s.child(t, child).Ports["metrics"]))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(body)) {
		if value, found := strings.CutPrefix(strings.TrimSpace(line), series+" "); found {
			v, err := strconv.ParseFloat(value, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// stop sends SIGTERM to cairn up and checks that it and every child exit cleanly.
func (s *upStack) stop(t testing.TB) {
	select {
	case <-s.exited:
		return
	default:
	}
	var pids []int
	if stack, err := supervisor.ReadStack(filepath.Join(s.dir, "stack.json")); err == nil {
		for _, child := range stack.Children {
			pids = append(pids, child.PID)
		}
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
		t.Errorf("cairn up did not stop within a minute of SIGTERM")
	}
	if !s.cmd.ProcessState.Success() {
		t.Errorf("cairn up exited with %v after SIGTERM:\n%s", s.cmd.ProcessState, s.outputText())
	}
	for _, pid := range pids {
		if pid != 0 && syscall.Kill(pid, 0) == nil {
			t.Errorf("child pid %d still running after cairn up stopped", pid)
		}
	}
	if t.Failed() {
		s.dumpLogs(t)
	}
}

// dumpLogs writes cairn up's log and the end of every child's log to the test log.
func (s *upStack) dumpLogs(t testing.TB) {
	t.Logf("--- cairn up:\n%s", tail(s.supervisorLog.String()))
	logs, _ := filepath.Glob(filepath.Join(s.dir, "logs", "*.log"))
	for _, path := range logs {
		raw, _ := os.ReadFile(path)
		if len(raw) > 4000 {
			raw = raw[len(raw)-4000:]
		}
		t.Logf("--- end of %s:\n%s", path, raw)
	}
}

// client is a client/v3 client of the given endpoints (all of the stack's when none are given).
func (s *upStack) client(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = s.endpoints
	}
	if s.clientTLS.Empty() {
		return newClient(t, endpoints)
	}
	cfg, err := s.clientTLS.ClientConfig(tlsconfig.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	return newClientTLS(t, endpoints, cfg)
}

func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	return newClientTLS(t, endpoints, nil)
}

func newClientTLS(t testing.TB, endpoints []string, tlsConfig *tls.Config) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), TLS: tlsConfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// etcdctlResult is what one etcdctl run printed.
type etcdctlResult struct {
	Stdout, Stderr string
	ExitCode       int
}

// etcdctl runs the real etcdctl against endpoints of s (with its client certificate when it runs TLS).
func (s *upStack) etcdctl(t testing.TB, etcdctl string, endpoints []string, stdin string, args ...string) etcdctlResult {
	t.Helper()
	if !s.clientTLS.Empty() {
		args = append([]string{"--cacert", s.clientTLS.TrustedCAFile, "--cert", s.clientTLS.CertFile, "--key", s.clientTLS.KeyFile}, args...)
	}
	return runEtcdctl(t, etcdctl, endpoints, stdin, args...)
}

// runEtcdctl runs the real etcdctl against endpoints with args and stdin.
func runEtcdctl(t testing.TB, etcdctl string, endpoints []string, stdin string, args ...string) etcdctlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, etcdctl, append([]string{"--endpoints", strings.Join(endpoints, ","), "--command-timeout", "10s"}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("etcdctl %v: %v", args, err)
	}
	return etcdctlResult{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: code}
}

// prefixWriter prefixes every line, so the stack's own log stands apart in verbose test output.
type prefixWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i])
		p.buf = p.buf[i+1:]
	}
}

// syncBuffer is a bytes.Buffer safe to read while a process writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
