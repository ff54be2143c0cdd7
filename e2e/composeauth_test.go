package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/relayauth"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// checkComposeBusLocked: the compose stack's NATS lets in only the role nkeys the keys service made, so an
// anonymous client on the stack's network is refused for its credentials (not for want of a route: the
// storages' seed from the keys volume connects at the same address).
func checkComposeBusLocked(t *testing.T, s *composeStack) {
	containers := s.containers(t, "nats")
	if len(containers) != 1 {
		t.Fatalf("nats containers: %v", containers)
	}
	url := fmt.Sprintf("nats://%s:4222", s.ip(t, containers[0]))
	connect := func(opts ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(url, append([]nats.Option{nats.MaxReconnects(0), nats.Timeout(5 * time.Second)}, opts...)...)
	}
	if nc, err := connect(); err == nil {
		nc.Close()
		t.Error("an anonymous client connected to the compose stack's bus")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("anonymous client: %v, want %v", err, nats.ErrAuthorization)
	}
	keys := strings.TrimSpace(podman(t, time.Minute, nil, "volume", "inspect", s.project+"_keys", "--format", "{{.Mountpoint}}"))
	seed := eventbus.SeedFile(filepath.Join(keys, "nats"), eventbus.RoleStorage)
	nc, err := connect(eventbus.NkeySeedFile(seed))
	if err != nil {
		t.Fatalf("with the storages' nkey (%s): %v", seed, err)
	}
	nc.Close()
}

// checkComposeAuth enables auth with a root user, waits until a watchhub and a leasekeeper refuse a client
// that reaches them directly, then watches and grants a lease as root through the frontends: those prove
// themselves to the hubs and keepers with the keys service's relay secret (--relay-secret-file).
func checkComposeAuth(t *testing.T, etcdctl string, s *composeStack) {
	root := []string{"--user", "root:rootpw"}
	must := func(args ...string) string {
		t.Helper()
		res := runEtcdctl(t, etcdctl, s.endpoints, "", args...)
		if res.ExitCode != 0 {
			t.Fatalf("etcdctl %s: exit %d\n%s%s", strings.Join(args, " "), res.ExitCode, res.Stdout, res.Stderr)
		}
		return res.Stdout
	}
	must("user", "add", "root:rootpw", "--interactive=false")
	must("user", "grant-role", "root", "root")
	must("auth", "enable")
	if res := runEtcdctl(t, etcdctl, s.endpoints, "", "put", "compose/anonymous", "x"); res.ExitCode == 0 {
		t.Error("an anonymous put succeeded with auth enabled")
	}

	// The hubs and keepers learn that auth is on from storage's status, which they poll: until they refuse a
	// direct client, a relayed call would be served with or without the secret.
	hub := pb.NewWatchClient(dialContainer(t, s, "watchhub", 2397))
	keeper := pb.NewLeaseClient(dialContainer(t, s, "leasekeeper-1", 2395))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waittest.Until(t, 30*time.Second, 200*time.Millisecond, "a hub refusing a direct watch", func() bool {
		stream, err := hub.Watch(ctx)
		if err == nil {
			err = stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
				CreateRequest: &pb.WatchCreateRequest{Key: []byte("compose/direct")}}})
		}
		if err == nil || errors.Is(err, io.EOF) { // io.EOF: the hub ended the stream; Recv gives its status
			_, err = stream.Recv()
		}
		return errors.Is(err, relayauth.ErrDirectClient)
	})
	waittest.Until(t, 30*time.Second, 200*time.Millisecond, "a keeper refusing a direct lease grant", func() bool {
		_, err := keeper.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
		return errors.Is(err, relayauth.ErrDirectClient)
	})

	checkEtcdctlWatch(t, etcdctl, s.endpoints, root...)
	grant := must(append([]string{"lease", "grant", "60"}, root...)...)
	id := regexp.MustCompile(`lease ([0-9a-f]+) granted`).FindStringSubmatch(grant)
	if id == nil {
		t.Fatalf("lease grant as root: %q", grant)
	}
	must(append([]string{"lease", "keep-alive", "--once", id[1]}, root...)...)
	must(append([]string{"lease", "revoke", id[1]}, root...)...)
}

// dialContainer is a plain gRPC connection to port of the first container of service, on its address in the
// stack's network.
func dialContainer(t *testing.T, s *composeStack, service string, port int) *grpc.ClientConn {
	t.Helper()
	containers := s.containers(t, service)
	if len(containers) == 0 {
		t.Fatalf("no running %s container", service)
	}
	conn, err := grpc.NewClient(fmt.Sprintf("%s:%d", s.ip(t, containers[0]), port),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
