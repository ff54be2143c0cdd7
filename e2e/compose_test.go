package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// TestComposeStack does with deploy/compose what a user does, with podman and podman-compose: build the image,
// `up -d`, wait for health, find the bus closed to anonymous clients, use the published endpoints with
// etcdctl, scale the watchhubs from 2 to 4 and see watch streams spread over them, kill a storage and a
// frontend while writing, see that nothing acknowledged is lost and that the killed containers come back,
// enable auth and watch and grant a lease as root through the frontends, then `down -v` and find nothing
// left.
func TestComposeStack(t *testing.T) {
	requireContainerEngine(t)
	etcdctl := etcdreftest.Etcdctl(t)
	started := time.Now()
	image := fmt.Sprintf("localhost/cairn-e2e:%d", time.Now().UnixNano()%1_000_000_000)
	buildComposeImage(t, image)
	built := time.Now()
	t.Logf("image built in %v", built.Sub(started).Round(time.Second))

	s := startCompose(t, image, "docker-compose.yml", append([]string{"keys"}, composeServices...))
	all := composeReplicas()
	s.waitHealthy(t, 4*time.Minute, all)
	t.Logf("up to healthy in %v", time.Since(built).Round(time.Second))

	t.Run("NATS refuses anonymous clients", func(t *testing.T) { checkComposeBusLocked(t, s) })
	t.Run("etcdctl", func(t *testing.T) { checkComposeEtcdctl(t, etcdctl, s.endpoints) })
	t.Run("scale watchhubs 2 to 4", func(t *testing.T) {
		s.setEnv("CAIRN_WATCHHUBS", "4")
		s.compose(t, "up", "-d", "watchhub") // podman-compose 1.0 takes replicas from the file, not --scale
		all["watchhub"] = 4
		s.waitHealthy(t, 2*time.Minute, all)
		checkWatchStreamsSpread(t, s)
	})
	t.Run("kill a storage and a frontend while writing", func(t *testing.T) { checkComposeKill(t, s, all) })
	// Last: with auth enabled, the other checks' anonymous clients would be refused.
	t.Run("watch and lease after auth enable", func(t *testing.T) { checkComposeAuth(t, etcdctl, s) })
	t.Logf("whole test %v (before down)", time.Since(started).Round(time.Second))
}

// TestComposeStackTLS runs docker-compose.tls.yml: certificates made by the one-shot certs service, every link
// mutual TLS; etcdctl with the client certificate from the pki volume.
func TestComposeStackTLS(t *testing.T) {
	requireContainerEngine(t)
	etcdctl := etcdreftest.Etcdctl(t)
	image := fmt.Sprintf("localhost/cairn-e2e:tls%d", time.Now().UnixNano()%1_000_000_000)
	buildComposeImage(t, image)
	started := time.Now()
	s := startCompose(t, image, "docker-compose.tls.yml", append([]string{"certs"}, composeServices...))
	s.waitHealthy(t, 4*time.Minute, composeReplicas())
	t.Logf("up to healthy in %v", time.Since(started).Round(time.Second))

	pki := strings.TrimSpace(podman(t, time.Minute, nil, "volume", "inspect", s.project+"_pki", "--format", "{{.Mountpoint}}"))
	tlsFlags := []string{"--cacert", pki + "/ca.pem", "--cert", pki + "/client.pem", "--key", pki + "/client-key.pem"}
	var endpoints []string
	for _, endpoint := range s.endpoints {
		endpoints = append(endpoints, strings.Replace(endpoint, "http://", "https://", 1))
	}
	must := func(args ...string) string {
		t.Helper()
		res := runEtcdctl(t, etcdctl, endpoints, "", append(tlsFlags, args...)...)
		if res.ExitCode != 0 {
			t.Fatalf("etcdctl %s: exit %d\n%s%s", strings.Join(args, " "), res.ExitCode, res.Stdout, res.Stderr)
		}
		return res.Stdout
	}
	if out := must("member", "list"); strings.Count(out, "https://consensus-") != 3 {
		t.Errorf("member list: want 3 members on https peer URLs:\n%s", out)
	}
	must("put", "compose/tls", "sealed in transit")
	if out := must("get", "compose/tls", "--print-value-only"); out != "sealed in transit\n" {
		t.Errorf("get: %q", out)
	}
	if res := runEtcdctl(t, etcdctl, endpoints[:1], "", "--cacert", pki+"/ca.pem", "get", "compose/tls"); res.ExitCode != 0 {
		t.Errorf("etcdctl with the CA alone (the client ports ask for no certificate, as etcd without --client-cert-auth): exit %d %s",
			res.ExitCode, res.Stderr)
	}
}

// composeReplicas is how many containers each service of the default stack has.
func composeReplicas() map[string]int {
	replicas := map[string]int{}
	for _, service := range composeServices {
		replicas[service] = 1
	}
	replicas["watchhub"] = 2
	return replicas
}

// checkComposeEtcdctl runs etcdctl against the published endpoints: put, get, txn, watch, lease, member list,
// endpoint status and snapshot save.
func checkComposeEtcdctl(t *testing.T, etcdctl string, endpoints []string) {
	must := func(stdin string, args ...string) string {
		t.Helper()
		res := runEtcdctl(t, etcdctl, endpoints, stdin, args...)
		if res.ExitCode != 0 {
			t.Fatalf("etcdctl %s: exit %d\n%s%s", strings.Join(args, " "), res.ExitCode, res.Stdout, res.Stderr)
		}
		return res.Stdout
	}
	if out := must("", "member", "list"); strings.Count(out, "started") != 3 {
		t.Errorf("member list: want 3 started members:\n%s", out)
	}
	for i, endpoint := range endpoints {
		if out := must("", "put", fmt.Sprintf("compose/%d", i), "via "+endpoint); out != "OK\n" {
			t.Errorf("put through %s: %q", endpoint, out)
		}
	}
	if out := must("", "get", "--prefix", "compose/", "--print-value-only"); strings.Count(out, "via http://127.0.0.1:") != 3 {
		t.Errorf("get --prefix: want the 3 puts:\n%s", out)
	}
	if out := must("value(\"compose/0\") = \"via "+endpoints[0]+"\"\n\nput compose/txn yes\n\nput compose/txn no\n\n", "txn"); !strings.HasPrefix(out, "SUCCESS") {
		t.Errorf("txn: %q", out)
	}
	if out := must("", "get", "compose/txn", "--print-value-only"); out != "yes\n" {
		t.Errorf("txn's put: %q", out)
	}
	t.Run("watch", func(t *testing.T) { checkEtcdctlWatch(t, etcdctl, endpoints) })

	grant := must("", "lease", "grant", "60")
	id := regexp.MustCompile(`lease ([0-9a-f]+) granted`).FindStringSubmatch(grant)
	if id == nil {
		t.Fatalf("lease grant: %q", grant)
	}
	must("", "put", "compose/leased", "x", "--lease", id[1])
	if out := must("", "lease", "timetolive", id[1], "--keys"); !strings.Contains(out, "compose/leased") {
		t.Errorf("lease timetolive --keys: %q", out)
	}
	must("", "lease", "revoke", id[1])
	if out := must("", "get", "compose/leased"); out != "" {
		t.Errorf("the revoked lease's key is still there: %q", out)
	}
	if out := must("", "endpoint", "status", "-w", "table"); strings.Count(out, "127.0.0.1") != 3 || !strings.Contains(out, "true") {
		t.Errorf("endpoint status: want 3 endpoints, one leader:\n%s", out)
	}
	checkSnapshotSave(t, etcdctl, endpoints[:1])
}

// checkEtcdctlWatch runs `etcdctl watch` through one endpoint and puts through another, both with the
// etcdctl flags in auth (--user).
func checkEtcdctlWatch(t *testing.T, etcdctl string, endpoints []string, auth ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch := exec.CommandContext(ctx, etcdctl, append([]string{"--endpoints", endpoints[1], "watch", "compose/watched"}, auth...)...)
	out := &syncBuffer{}
	watch.Stdout, watch.Stderr = out, out
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()
	waittest.Until(t, 20*time.Second, 200*time.Millisecond, "etcdctl watch sees a put", func() bool {
		runEtcdctl(t, etcdctl, endpoints[2:], "", append([]string{"put", "compose/watched", "seen"}, auth...)...)
		return strings.Contains(out.String(), "PUT\ncompose/watched\nseen\n")
	})
}

// checkWatchStreamsSpread opens watch streams through the frontends and waits until each of the 4 hubs
// serves some (etcd_debugging_mvcc_watch_stream_total on each hub's /metrics).
func checkWatchStreamsSpread(t *testing.T, s *composeStack) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := 0
	open := func(n int) { // n more streams, one client each, over the three frontends
		for range n {
			client := newClient(t, s.endpoints[opened%3:opened%3+1])
			client.Watch(clientv3.WithRequireLeader(ctx), fmt.Sprintf("compose/spread/%d", opened))
			opened++
		}
	}
	open(16)
	hubs := s.containers(t, "watchhub")
	streams := map[string]float64{}
	waittest.Until(t, time.Minute, time.Second, "watch streams on each of the 4 hubs", func() bool {
		// A frontend looks the hubs' name up again every 5 s, so streams opened before it saw the new hubs stay
		// where they are: keep opening a few (at most 4 a second, 240 in all) until every hub serves some.
		defer open(4)
		for _, hub := range hubs {
			streams[hub] = s.metric(t, hub, composeHealthPorts["watchhub"], "etcd_debugging_mvcc_watch_stream_total")
			if streams[hub] < 1 {
				return false
			}
		}
		return true
	})
	t.Logf("watch streams per hub: %v", streams)
}

// checkComposeKill writes through frontend-2 and frontend-3 while a storage and frontend-1 are killed, checks
// that writes continue, that every acknowledged one is there afterwards, and that the killed ones come back.
func checkComposeKill(t *testing.T, s *composeStack, all map[string]int) {
	client := newClient(t, s.endpoints[1:])
	var (
		mu    sync.Mutex
		acked []string
		stop  = make(chan struct{})
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("compose/kill/%05d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := client.Put(ctx, key, key)
			cancel()
			if err == nil {
				mu.Lock()
				acked = append(acked, key)
				mu.Unlock()
			}
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	waittest.Until(t, 30*time.Second, 100*time.Millisecond, "writes before the kill", func() bool { return count() >= 20 })
	// storage-2 crashes (its process killed from the host: the restart policy must bring it back); frontend-1
	// is `podman kill`ed, which podman 4.3 counts as stopped by the user (no restart, unlike Docker): the test
	// starts it again as an operator would.
	crashed, killed := s.project+"_storage-2_1", s.project+"_frontend-1_1"
	pid := strings.TrimSpace(podman(t, time.Minute, nil, "inspect", "-f", "{{.State.Pid}}", crashed))
	if out, err := exec.Command("kill", "-9", pid).CombinedOutput(); err != nil {
		t.Fatalf("kill -9 %s (%s): %v %s", pid, crashed, err, out)
	}
	podman(t, time.Minute, nil, "kill", killed)
	before := count()
	waittest.Until(t, time.Minute, 100*time.Millisecond, "writes continuing after the kill", func() bool { return count() >= before+50 })
	close(stop)
	<-done

	waittest.Until(t, time.Minute, time.Second, "the crashed storage restarted by its restart policy", func() bool {
		return strings.TrimSpace(podman(t, time.Minute, nil, "inspect", "-f", "{{.State.Restarting}} {{.State.Status}}", crashed)) == "false running"
	})
	if state := strings.TrimSpace(podman(t, time.Minute, nil, "inspect", "-f", "{{.State.Status}}", killed)); state != "running" {
		t.Logf("%s is %s after podman kill; podman start", killed, state)
		podman(t, time.Minute, nil, "start", killed)
	}
	s.waitHealthy(t, 2*time.Minute, all)

	// Everything acknowledged is there, read through the frontend that was killed.
	check := newClient(t, s.endpoints[:1])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := check.Get(ctx, "compose/kill/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = true
	}
	for _, key := range acked {
		if !have[key] {
			t.Errorf("acknowledged write %s is lost", key)
		}
	}
	t.Logf("%d writes acknowledged, %d of them before the kills, all there", len(acked), before)
}
