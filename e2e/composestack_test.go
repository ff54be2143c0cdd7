package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// composeDir is deploy/compose, seen from the e2e package.
const composeDir = "../deploy/compose"

// composeServices are the services of docker-compose.yml's default stack (no profile). They are named on
// `up` because podman-compose 1.0 (Debian 12's) ignores profiles.
var composeServices = []string{"nats", "consensus-1", "consensus-2", "consensus-3", "storage-1", "storage-2",
	"storage-3", "leasekeeper-1", "leasekeeper-2", "watchhub", "frontend-1", "frontend-2", "frontend-3"}

// composeHealthPorts are the ports of each kind of service's /health inside its container.
var composeHealthPorts = map[string]int{"nats": 8223, "consensus": 2381, "storage": 23791, "leasekeeper": 2396,
	"watchhub": 2398, "frontend": 2382}

// composeStack is deploy/compose/docker-compose.yml run by podman-compose under a project name of its own,
// on a network of its own, with the client ports on free ports of 127.0.0.1.
type composeStack struct {
	file      string // docker-compose.yml or docker-compose.tls.yml
	project   string
	env       []string // CAIRN_IMAGE, CAIRN_CLIENT_PORT_i, CAIRN_WATCHHUBS
	endpoints []string // http://127.0.0.1:PORT of frontend-1..3
}

// requireContainerEngine skips the test, saying why, where the compose stack cannot run: not root (rootless
// podman needs user namespaces these machines lack), podman or podman-compose missing, or podman unable to
// run (.ci/podman-setup.sh installs and configures both).
func requireContainerEngine(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("the compose stack takes minutes; skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("the compose stack needs root (rootful podman); run as root with podman installed (.ci/podman-setup.sh)")
	}
	for _, tool := range []string{"podman", "podman-compose"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on this machine (.ci/podman-setup.sh installs it): %v", tool, err)
		}
	}
	if out, err := exec.Command("podman", "info", "--format", "{{.Host.OCIRuntime.Name}}").CombinedOutput(); err != nil {
		t.Skipf("podman cannot run containers here (.ci/podman-setup.sh configures it): %v\n%s", err, out)
	}
}

// buildComposeImage builds the image of the stack from a static cairn built on this machine with
// deploy/compose/Dockerfile.prebuilt (the runtime stage of the user-facing Dockerfile), tagged uniquely and
// removed when the test ends. The binary is $CAIRN_COMPOSE_BINARY (.ci/run builds it) or built here.
func buildComposeImage(t *testing.T, tag string) {
	t.Helper()
	binDir := t.TempDir()
	if prebuilt := os.Getenv("CAIRN_COMPOSE_BINARY"); prebuilt != "" {
		if err := os.Link(prebuilt, filepath.Join(binDir, "cairn")); err != nil {
			copyFile(t, prebuilt, filepath.Join(binDir, "cairn"))
		}
	} else {
		build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(binDir, "cairn"), "github.com/cairn-kv/cairn/cmd/cairn")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building a static cairn: %v\n%s", err, out)
		}
	}
	// --layers=false: no cache image of the build stage is left behind.
	podman(t, 5*time.Minute, nil, "build", "-q", "--layers=false", "-f", filepath.Join(composeDir, "Dockerfile.prebuilt"), "-t", tag, binDir)
	t.Cleanup(func() { _, _ = runPodman(time.Minute, nil, "rmi", "-f", tag) })
}

// startCompose runs `podman-compose up -d` with services of deploy/compose/file and registers `down -v` and
// the check that nothing is left behind.
func startCompose(t *testing.T, image, file string, services []string) *composeStack {
	t.Helper()
	ports, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	s := &composeStack{file: file, project: fmt.Sprintf("cairne2e%d", time.Now().UnixNano()%1_000_000_000),
		env: []string{"CAIRN_IMAGE=" + image, "CAIRN_WATCHHUBS=2"}}
	for i, port := range ports {
		s.env = append(s.env, fmt.Sprintf("CAIRN_CLIENT_PORT_%d=%d", i+1, port))
		s.endpoints = append(s.endpoints, fmt.Sprintf("http://127.0.0.1:%d", port))
	}
	t.Cleanup(func() { s.down(t) })
	s.compose(t, append([]string{"up", "-d"}, services...)...)
	return s
}

// compose runs podman-compose on the project with args.
func (s *composeStack) compose(t *testing.T, args ...string) {
	t.Helper()
	argv := append([]string{"-p", s.project, "-f", filepath.Join(composeDir, s.file)}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman-compose", argv...)
	cmd.Env = append(os.Environ(), s.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("podman-compose %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// setEnv replaces one variable of the stack's environment (the next compose command sees it).
func (s *composeStack) setEnv(name, value string) {
	s.env = slices.DeleteFunc(s.env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
	s.env = append(s.env, name+"="+value)
}

// down removes the stack with its volumes and network (podman-compose 1.0 leaves the network), and fails the
// test if any container, volume or network of the project is left.
func (s *composeStack) down(t *testing.T) {
	if t.Failed() {
		s.dumpLogs(t)
	}
	s.compose(t, "down", "-v")
	_, _ = runPodman(time.Minute, nil, "network", "rm", s.project+"_default")
	left := map[string][]string{
		"containers": {"ps", "-a", "--filter", "label=io.podman.compose.project=" + s.project, "--format", "{{.Names}}"},
		"volumes":    {"volume", "ls", "--filter", "name=" + s.project + "_", "--format", "{{.Name}}"},
		"networks":   {"network", "ls", "--filter", "name=" + s.project + "_", "--format", "{{.Name}}"},
		"images":     {"images", "--filter", "dangling=true", "--filter", "label=io.buildah.version", "--format", "{{.ID}}"},
	}
	for what, args := range left {
		if out := strings.TrimSpace(podman(t, time.Minute, nil, args...)); out != "" {
			t.Errorf("left behind after down -v: %s %s", what, out)
		}
	}
}

// containers are the names of the project's running containers of service.
func (s *composeStack) containers(t *testing.T, service string) []string {
	t.Helper()
	out := podman(t, time.Minute, nil, "ps", "--filter", "label=io.podman.compose.project="+s.project,
		"--filter", "label=com.docker.compose.service="+service, "--format", "{{.Names}}")
	return strings.Fields(out)
}

// healthy reports whether container answers `cairn health` inside itself, the command of its health check
// (podman without systemd runs no health check timers, and podman-compose 1.0 wraps checks in a shell the
// image does not have, so the test runs it with podman exec).
func (s *composeStack) healthy(service, container string) bool {
	kind, _, _ := strings.Cut(service, "-")
	url := fmt.Sprintf("http://127.0.0.1:%d/health", composeHealthPorts[kind])
	_, err := runPodman(30*time.Second, nil, "exec", container, "/cairn", "health", "--url", url, "--timeout", "2s")
	return err == nil
}

// waitHealthy waits until every container of services (want of each) is up and healthy.
func (s *composeStack) waitHealthy(t *testing.T, timeout time.Duration, want map[string]int) {
	t.Helper()
	waittest.Until(t, timeout, time.Second, "every container of the compose stack healthy", func() bool {
		for service, n := range want {
			names := s.containers(t, service)
			if len(names) != n {
				return false
			}
			for _, name := range names {
				if !s.healthy(service, name) {
					return false
				}
			}
		}
		return true
	})
}

// ip is container's address on the project's network.
func (s *composeStack) ip(t *testing.T, container string) string {
	t.Helper()
	return strings.TrimSpace(podman(t, time.Minute, nil, "inspect", "-f",
		"{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", container))
}

// metric reads one unlabelled series from the /metrics of container on port.
func (s *composeStack) metric(t *testing.T, container string, port int, series string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s:%d/metrics", s.ip(t, container), port))
	if err != nil {
		t.Logf("metrics of %s: %v", container, err)
		return -1
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if value, ok := strings.CutPrefix(lines.Text(), series+" "); ok {
			v, _ := strconv.ParseFloat(value, 64)
			return v
		}
	}
	return -1
}

// dumpLogs logs the tail of every container's log, for a failed test.
func (s *composeStack) dumpLogs(t *testing.T) {
	out, _ := runPodman(time.Minute, nil, "ps", "-a", "--filter", "label=io.podman.compose.project="+s.project,
		"--format", "{{.Names}} {{.Status}}")
	t.Logf("containers:\n%s", out)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, _, _ := strings.Cut(line, " "); name != "" {
			logs, _ := runPodman(time.Minute, nil, "logs", "--tail", "15", name)
			t.Logf("%s:\n%s", name, logs)
		}
	}
}

// podman runs podman with args and returns its output, failing the test on an error.
func podman(t *testing.T, timeout time.Duration, stdin io.Reader, args ...string) string {
	t.Helper()
	out, err := runPodman(timeout, stdin, args...)
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// runPodman runs podman with args and returns its output.
func runPodman(timeout time.Duration, stdin io.Reader, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// copyFile copies an executable file.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o755); err != nil {
		t.Fatal(err)
	}
}
