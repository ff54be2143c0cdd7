package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// clientChildRole makes the test binary run as one client process of a test (see runClientChild); the
// endpoints and arguments come in clientChildArgs (\x1f-separated: endpoints, then the role's own).
const (
	clientChildRole = "CAIRN_E2E_CLIENT_ROLE"
	clientChildArgs = "CAIRN_E2E_CLIENT_ARGS"
)

// runClientChild is a client process: "mutex" takes /e2e/lock five times, appending "enter PID" and "exit PID"
// to a file while it holds it; "campaign" campaigns for /e2e/election, prints "LEADER name" once elected and
// resigns when its stdin closes. It returns the exit code.
func runClientChild(role string) int {
	args := strings.Split(os.Getenv(clientChildArgs), "\x1f")
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(args[0], ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer session.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch role {
	case "mutex":
		err = holdMutex(ctx, session, args[1])
	case "campaign":
		err = campaign(ctx, session, args[1])
	default:
		err = fmt.Errorf("unknown client role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, role+":", err)
		return 1
	}
	return 0
}

func holdMutex(ctx context.Context, session *concurrency.Session, path string) error {
	m := concurrency.NewMutex(session, "/e2e/lock")
	for range 5 {
		if err := m.Lock(ctx); err != nil {
			return err
		}
		if err := appendLine(path, fmt.Sprintf("enter %d", os.Getpid())); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
		if err := appendLine(path, fmt.Sprintf("exit %d", os.Getpid())); err != nil {
			return err
		}
		if err := m.Unlock(ctx); err != nil {
			return err
		}
	}
	return nil
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func campaign(ctx context.Context, session *concurrency.Session, name string) error {
	e := concurrency.NewElection(session, "/e2e/election")
	if err := e.Campaign(ctx, name); err != nil {
		return err
	}
	fmt.Println("LEADER " + name)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes stdin
	return e.Resign(ctx)
}

// clientProcess is a running client child.
type clientProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	exited chan error
}

func startClientProcess(t *testing.T, role string, endpoints []string, args ...string) *clientProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clientChildRole+"="+role,
		clientChildArgs+"="+strings.Join(append([]string{strings.Join(endpoints, ",")}, args...), "\x1f"))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &clientProcess{cmd: cmd, stdin: stdin, lines: make(chan string, 16), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return p
}

// concurrencyAcrossProcesses: 8 client processes take one concurrency.Mutex five times each, never two at once;
// three processes campaign in one Election, a client of the test observes the leader, and when the leader
// resigns (its process exits) the next candidate leads.
func concurrencyAcrossProcesses(t *testing.T, endpoints []string) {
	lockFile := t.TempDir() + "/holders"
	var lockers []*clientProcess
	for range 8 {
		lockers = append(lockers, startClientProcess(t, "mutex", endpoints, lockFile))
	}
	for i, p := range lockers {
		select {
		case err := <-p.exited:
			if err != nil {
				t.Fatalf("mutex client %d: %v", i, err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("mutex client %d did not finish", i)
		}
	}
	raw, err := os.ReadFile(lockFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 80 {
		t.Fatalf("%d lines in the holders file, want 80", len(lines))
	}
	for i := 0; i < len(lines); i += 2 {
		enter, exit := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if enter[0] != "enter" || exit[0] != "exit" || enter[1] != exit[1] {
			t.Fatalf("two processes held the mutex at once: %q then %q", lines[i], lines[i+1])
		}
	}

	observer := newClient(t, endpoints)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	observerSession, err := concurrency.NewSession(observer)
	if err != nil {
		t.Fatal(err)
	}
	defer observerSession.Close()
	observed := concurrency.NewElection(observerSession, "/e2e/election").Observe(ctx)
	candidates := map[string]*clientProcess{}
	leaders := make(chan string, 3)
	for i := range 3 {
		name := fmt.Sprintf("candidate-%d", i)
		p := startClientProcess(t, "campaign", endpoints, name)
		candidates[name] = p
		go func() {
			for line := range p.lines {
				if leader, ok := strings.CutPrefix(line, "LEADER "); ok {
					leaders <- leader
				}
			}
		}()
	}
	first := <-leaders
	waitObservedLeader(t, observed, first)
	_ = candidates[first].stdin.Close() // resign
	second := <-leaders
	if second == first {
		t.Fatalf("%s led twice", first)
	}
	waitObservedLeader(t, observed, second)
	for _, p := range candidates {
		_ = p.stdin.Close()
	}
}

func waitObservedLeader(t *testing.T, observed <-chan *clientv3.GetResponse, leader string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case resp, ok := <-observed:
			if !ok {
				t.Fatalf("observe ended before %s led", leader)
			}
			if len(resp.Kvs) > 0 && string(resp.Kvs[0].Value) == leader {
				return
			}
		case <-timeout:
			t.Fatalf("the observer never saw %s lead", leader)
		}
	}
}

// TestConcurrencyAcrossProcessesOnCairnUp runs the Mutex and Election checks with client processes against
// `cairn up`. Both wait through Watch, so they need the watchhub.
func TestConcurrencyAcrossProcessesOnCairnUp(t *testing.T) {
	s := startUp(t, t.TempDir())
	concurrencyAcrossProcesses(t, s.endpoints)
}

// TestConcurrencyAcrossProcessesOfEtcd runs the same against a real etcd, to show the checks are etcd's
// behaviour (opt-in: CAIRN_LEASE_ETCDREF=1).
func TestConcurrencyAcrossProcessesOfEtcd(t *testing.T) {
	if os.Getenv("CAIRN_LEASE_ETCDREF") == "" {
		t.Skip("set CAIRN_LEASE_ETCDREF=1 to run it against the real etcd")
	}
	concurrencyAcrossProcesses(t, etcdreftest.StartCluster(t, 3).Endpoints())
}
