package frontend_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/frontend"
)

// authScript is an etcdctl session over users, roles, permissions, auth enable/disable and permission denied
// on every kind of call; each step's output and exit status make one transcript line.
var authScript = []authStep{
	ctl("auth", "status"),
	ctl("auth", "enable"),
	ctl("user", "add", "root:rootpw", "--interactive=false"),
	ctl("user", "add", "root:again", "--interactive=false"),
	ctl("auth", "enable"),
	ctl("user", "grant-role", "root", "root", "--user=root:rootpw"),
	ctl("user", "grant-role", "nobody", "root", "--user=root:rootpw"),
	ctl("role", "add", "r1", "--user=root:rootpw"),
	ctl("role", "add", "r1", "--user=root:rootpw"),
	ctl("role", "grant-permission", "r1", "read", "foo", "--user=root:rootpw"),
	ctl("role", "grant-permission", "r1", "--prefix=true", "readwrite", "app/", "--user=root:rootpw"),
	ctl("role", "grant-permission", "r1", "--from-key", "read", "z", "--user=root:rootpw"),
	ctl("role", "grant-permission", "nope", "read", "foo", "--user=root:rootpw"),
	ctl("role", "get", "r1", "--user=root:rootpw"),
	ctl("role", "get", "root", "--user=root:rootpw"),
	ctl("role", "list", "--user=root:rootpw"),
	ctl("user", "add", "alice:alicepw", "--interactive=false", "--user=root:rootpw"),
	ctl("user", "add", "nopass", "--no-password", "--user=root:rootpw"),
	ctl("user", "grant-role", "alice", "r1", "--user=root:rootpw"),
	ctl("user", "grant-role", "alice", "nope", "--user=root:rootpw"),
	ctl("user", "get", "alice", "--user=root:rootpw"),
	ctl("user", "list", "--user=root:rootpw"),
	ctl("put", "foo", "before", "--user=root:rootpw"),
	ctl("auth", "enable"),
	ctl("auth", "disable"),
	ctl("auth", "disable", "--user=alice:alicepw"),
	ctl("auth", "enable", "--user=root:rootpw"),
	ctl("get", "foo"),
	ctl("watch", "foo"),
	ctl("get", "foo", "--user=alice:wrong"),
	ctl("get", "foo", "--user=nobody:x"),
	ctl("get", "foo", "--user=nopass:x"),
	ctl("get", "foo", "--user=alice:alicepw"),
	ctl("put", "foo", "x", "--user=alice:alicepw"),
	ctl("put", "app/a", "1", "--user=alice:alicepw"),
	ctl("get", "app/", "--prefix", "--user=alice:alicepw"),
	ctl("get", "", "--from-key", "--user=alice:alicepw"),
	ctl("get", "zz", "--user=alice:alicepw"),
	ctl("del", "foo", "--user=alice:alicepw"),
	ctl("del", "app/a", "--user=alice:alicepw"),
	ctlIn("value(\"foo\") = \"before\"\n\nput other v\n\n\n", "txn", "--interactive=false", "--user=alice:alicepw"),
	ctlIn("value(\"foo\") = \"before\"\n\nput app/b v\n\n\n", "txn", "--interactive=false", "--user=alice:alicepw"),
	ctl("compaction", "1", "--user=alice:alicepw"),
	ctl("compaction", "1", "--user=root:rootpw"),
	ctl("member", "add", "m9", "--peer-urls=http://127.0.0.1:1", "--user=alice:alicepw"),
	ctl("alarm", "disarm", "--user=alice:alicepw"),
	ctl("alarm", "list", "--user=alice:alicepw"),
	ctl("lease", "list", "--user=alice:alicepw"),
	// Leases: any user may grant; keep-alive and revoke need write, timetolive --keys read, on every key of
	// the lease (etcd's checkLeaseRenew, checkLeasePuts, checkLeaseTimeToLive); list needs root.
	ctl("lease", "grant", "60"),
	ctl("lease", "grant", "60", "--user=alice:alicepw"),
	ctl("put", "app/l", "v", "--lease={lease}", "--user=alice:alicepw"),
	ctl("lease", "timetolive", "{lease}"),
	ctl("lease", "keep-alive", "--once", "{lease}"),
	ctl("lease", "revoke", "{lease}"),
	ctl("lease", "list"),
	ctl("lease", "timetolive", "{lease}", "--keys", "--user=alice:alicepw"),
	ctl("lease", "keep-alive", "--once", "{lease}", "--user=alice:alicepw"),
	call("client/v3 KeepAliveOnce as alice", keepAliveOnceAs("alice", "alicepw")),
	ctl("lease", "list", "--user=alice:alicepw"),
	ctl("put", "foo", "leased", "--lease={lease}", "--user=root:rootpw"),
	ctl("lease", "timetolive", "{lease}", "--user=alice:alicepw"),
	ctl("lease", "timetolive", "{lease}", "--keys", "--user=alice:alicepw"),
	ctl("lease", "keep-alive", "--once", "{lease}", "--user=alice:alicepw"),
	call("client/v3 KeepAliveOnce as alice", keepAliveOnceAs("alice", "alicepw")),
	ctl("lease", "revoke", "{lease}", "--user=alice:alicepw"),
	ctl("lease", "timetolive", "{lease}", "--keys", "--user=root:rootpw"),
	ctl("lease", "keep-alive", "--once", "{lease}", "--user=root:rootpw"),
	call("client/v3 KeepAliveOnce as root", keepAliveOnceAs("root", "rootpw")),
	ctl("lease", "list", "--user=root:rootpw"),
	ctl("lease", "revoke", "{lease}", "--user=root:rootpw"),
	ctl("lease", "timetolive", "{lease}", "--user=alice:alicepw"),
	ctl("lease", "keep-alive", "--once", "{lease}", "--user=alice:alicepw"),
	ctl("lease", "revoke", "{lease}", "--user=alice:alicepw"),
	ctl("get", "foo", "--user=alice:alicepw"),
	ctl("put", "foo", "before", "--user=root:rootpw"),
	ctl("lease", "grant", "60", "--user=root:rootpw"),
	ctl("put", "secret", "v", "--lease={lease}", "--user=root:rootpw"),
	ctl("lease", "timetolive", "{lease}", "--user=alice:alicepw"),
	ctl("lease", "timetolive", "{lease}", "--keys", "--user=alice:alicepw"),
	ctl("lease", "list", "--user=alice:alicepw"),
	ctl("lease", "revoke", "{lease}", "--user=root:rootpw"),
	// Maintenance is root's alone.
	ctl("snapshot", "save", "snap.db", "--user=alice:alicepw"),
	ctl("move-leader", "1", "--user=alice:alicepw"),
	ctl("endpoint", "hashkv", "--user=alice:alicepw"),
	ctl("defrag", "--user=alice:alicepw"),
	ctl("downgrade", "validate", "3.6", "--user=alice:alicepw"),
	ctl("downgrade", "enable", "3.6", "--user=alice:alicepw"),
	ctl("downgrade", "cancel", "--user=alice:alicepw"),
	ctl("alarm", "list", "--user=alice:alicepw"),
	ctl("watch", "other", "--user=alice:alicepw"),
	ctl("user", "list", "--user=alice:alicepw"),
	ctl("user", "get", "alice", "--user=alice:alicepw"),
	ctl("role", "get", "r1", "--user=alice:alicepw"),
	ctl("user", "revoke-role", "root", "root", "--user=root:rootpw"),
	ctl("user", "delete", "root", "--user=root:rootpw"),
	ctl("role", "delete", "root", "--user=root:rootpw"),
	ctl("role", "revoke-permission", "r1", "foo", "--user=root:rootpw"),
	ctl("role", "revoke-permission", "r1", "foo", "--user=root:rootpw"),
	ctl("get", "foo", "--user=alice:alicepw"),
	ctlIn("newpw\n", "user", "passwd", "alice", "--interactive=false", "--user=root:rootpw"),
	ctl("get", "foo", "--user=alice:alicepw"),
	ctl("get", "foo", "--user=alice:newpw"),
	ctl("user", "delete", "bob", "--user=root:rootpw"),
	ctl("role", "delete", "nope", "--user=root:rootpw"),
	ctl("user", "revoke-role", "alice", "root", "--user=root:rootpw"),
	ctl("role", "delete", "r1", "--user=root:rootpw"),
	ctl("user", "get", "alice", "--user=root:rootpw"),
	call("a simple token unused past --auth-token-ttl", expiredToken),
	call("a forged token on Range, Watch and LeaseKeepAlive", forgedToken),
	ctl("auth", "disable", "--user=root:rootpw"),
	ctl("get", "foo"),
}

// authTokenTTL is both servers' --auth-token-ttl in the transcript, short so that a token's expiry is seen.
const authTokenTTL = 2

// authStep is one step of a transcript: an etcdctl command (stdin, args), or a call made with client/v3 or raw
// gRPC where etcdctl cannot show the behaviour (it re-authenticates by itself).
type authStep struct {
	stdin string
	args  []string
	name  string
	call  func(ctx context.Context, run *transcriptRun) string
}

func ctl(args ...string) authStep { return authStep{args: args} }

func ctlIn(stdin string, args ...string) authStep { return authStep{stdin: stdin, args: args} }

func call(name string, do func(ctx context.Context, run *transcriptRun) string) authStep {
	return authStep{name: name, call: do}
}

// transcriptRun is what the steps of one transcript share.
type transcriptRun struct {
	t        *testing.T
	endpoint string
	dir      string // etcdctl's working directory, so files it names (snapshot save) print the same
	lease    string // the hex ID of the lease the last "lease grant" step granted; "{lease}" in args
}

var (
	// transcriptNoise are the parts of an answer that differ between any two runs (lease and member IDs).
	transcriptNoise = regexp.MustCompile(`[0-9a-f]{16}`)
	// remainingNoise is a lease's remaining TTL, which depends on when the step ran.
	remainingNoise = regexp.MustCompile(`remaining\(-?[0-9]+s\)`)
	// endpointNoise and tookNoise are the server's address and how long a call took (defrag).
	endpointNoise = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+`)
	tookNoise     = regexp.MustCompile(`took [0-9.]+[µmn]?s`)
	leaseGranted  = regexp.MustCompile(`lease ([0-9a-f]+) granted`)
	// attachedKeys lists a lease's keys, in the order of a Go map in etcd (lease.Lease.Keys).
	attachedKeys = regexp.MustCompile(`attached keys\(\[([^\]]*)\]\)`)
)

// authTranscript runs authScript with etcdctl against endpoint.
func authTranscript(t *testing.T, etcdctl, endpoint string) []string {
	t.Helper()
	run := &transcriptRun{t: t, endpoint: endpoint, dir: t.TempDir()}
	var lines []string
	for _, step := range authScript {
		if step.call != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			text := step.call(ctx, run)
			cancel()
			lines = append(lines, fmt.Sprintf("%s => %q", step.name, transcriptNoise.ReplaceAllString(text, "<id>")))
			continue
		}
		// A watch that is not refused runs until it is killed: it gets 3 s, then reads "still running". Every
		// other step ends by itself, after an etcdctl start and a raft round, which take seconds when loaded.
		limit := 30 * time.Second
		if step.args[0] == "watch" {
			limit = 3 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		args := make([]string, len(step.args))
		for i, arg := range step.args {
			args[i] = strings.ReplaceAll(arg, "{lease}", run.lease)
		}
		cmd := exec.CommandContext(ctx, etcdctl, append(args, "--endpoints="+endpoint, "--dial-timeout=2s")...)
		cmd.Stdin, cmd.Dir = strings.NewReader(step.stdin), run.dir
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		outcome := "ok"
		var exit *exec.ExitError
		switch {
		case timedOut:
			outcome = "still running" // a watch that was not refused
		case errors.As(err, &exit):
			outcome = fmt.Sprintf("exit %d", exit.ExitCode())
		case err != nil:
			t.Fatalf("etcdctl %v: %v", step.args, err)
		}
		if m := leaseGranted.FindSubmatch(out); m != nil {
			run.lease = string(m[1])
		}
		var kept []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if !strings.HasPrefix(line, `{"level":`) { // client/v3's retry logs: timestamps and addresses
				kept = append(kept, line)
			}
		}
		text := transcriptNoise.ReplaceAllString(strings.Join(kept, "\n"), "<id>")
		text = remainingNoise.ReplaceAllString(text, "remaining(<s>)")
		text = endpointNoise.ReplaceAllString(text, "<endpoint>")
		text = tookNoise.ReplaceAllString(text, "took <d>")
		text = attachedKeys.ReplaceAllStringFunc(text, func(keys string) string {
			names := strings.Fields(attachedKeys.FindStringSubmatch(keys)[1])
			slices.Sort(names)
			return "attached keys([" + strings.Join(names, " ") + "])"
		})
		lines = append(lines, fmt.Sprintf("etcdctl %s => %s: %q", strings.Join(step.args, " "), outcome, text))
	}
	return lines
}

// keepAliveOnceAs renews the last granted lease with client/v3 as user: etcd's LeaseRenew answers on the
// keep-alive stream, where a refusal ends the stream with the error.
func keepAliveOnceAs(user, password string) func(ctx context.Context, run *transcriptRun) string {
	return func(ctx context.Context, run *transcriptRun) string {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{run.endpoint}, DialTimeout: 2 * time.Second,
			Logger: zap.NewNop(), Username: user, Password: password})
		if err != nil {
			return fmt.Sprintf("client: %v", err)
		}
		defer cli.Close()
		id, err := strconv.ParseInt(run.lease, 16, 64)
		if err != nil {
			run.t.Fatalf("lease ID %q: %v", run.lease, err)
		}
		resp, err := cli.KeepAliveOnce(ctx, clientv3.LeaseID(id))
		var etcdErr rpctypes.EtcdError
		if errors.As(err, &etcdErr) {
			return fmt.Sprintf("error %v (%v)", err, etcdErr.Code())
		}
		if err != nil {
			return fmt.Sprintf("error %v", err)
		}
		return fmt.Sprintf("lease %016x TTL %d", int64(resp.ID), resp.TTL)
	}
}

// expiredToken uses root's simple token once, leaves it unused past --auth-token-ttl and uses it again, with
// raw gRPC (client/v3 would fetch a new token by itself).
func expiredToken(ctx context.Context, run *transcriptRun) string {
	conn := rawConn(run.t, run.endpoint)
	login, err := pb.NewAuthClient(conn).Authenticate(ctx, &pb.AuthenticateRequest{Name: "root", Password: "rootpw"})
	if err != nil {
		return fmt.Sprintf("authenticate: %v", err)
	}
	kv := pb.NewKVClient(conn)
	withToken := metadata.AppendToOutgoingContext(ctx, "token", login.Token)
	_, fresh := kv.Range(withToken, &pb.RangeRequest{Key: []byte("foo")})
	var unused error
	// Each use renews the token, so look less often than its TTL (etcd drops expired tokens once a second).
	waittest.Until(run.t, 15*time.Second, authTokenTTL*time.Second+1500*time.Millisecond,
		"the token expires", func() bool {
			_, unused = kv.Range(withToken, &pb.RangeRequest{Key: []byte("foo")})
			return unused != nil
		})
	return fmt.Sprintf("fresh token: %v; unused past its TTL: %v", fresh, unused)
}

// forgedToken sends a token the server never issued on a unary call, a watch create and a keep-alive, with
// raw gRPC: each kind of call reads the token in its own place.
func forgedToken(ctx context.Context, run *transcriptRun) string {
	conn := rawConn(run.t, run.endpoint)
	forged := metadata.AppendToOutgoingContext(ctx, "token", "forged.1")
	_, rangeErr := pb.NewKVClient(conn).Range(forged, &pb.RangeRequest{Key: []byte("foo")})

	watched := func() string {
		stream, err := pb.NewWatchClient(conn).Watch(forged)
		if err != nil {
			return err.Error()
		}
		create := &pb.WatchCreateRequest{Key: []byte("foo")}
		if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
			return err.Error()
		}
		resp, err := stream.Recv()
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("created %v canceled %v reason %q", resp.Created, resp.Canceled, resp.CancelReason)
	}()

	keptAlive := func() string {
		stream, err := pb.NewLeaseClient(conn).LeaseKeepAlive(forged)
		if err != nil {
			return err.Error()
		}
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: 1}); err != nil {
			return err.Error()
		}
		resp, err := stream.Recv()
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("TTL %d", resp.TTL)
	}()
	return fmt.Sprintf("range: %v; watch: %s; keep-alive: %s", rangeErr, watched, keptAlive)
}

// TestAuthEtcdctlMatchesEtcd runs the same etcdctl session against real etcd v3.7.3 and against Cairn and
// compares every answer (the text etcdctl prints and its exit status).
func TestAuthEtcdctlMatchesEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real etcd and a Cairn cluster")
	}
	etcdctl := etcdreftest.Etcdctl(t)
	ref := etcdreftest.StartCluster(t, 1, fmt.Sprintf("--auth-token-ttl=%d", authTokenTTL), "--bcrypt-cost=4")
	want := authTranscript(t, etcdctl, ref.Endpoints()[0])

	c := clustertest.Start(t, clustertest.Options{Members: 1, Leasekeepers: 1, Watchhubs: 1,
		ConfigureFrontend: func(cfg *frontend.Config) { cfg.BcryptCost, cfg.AuthTokenTTL = 4, authTokenTTL }})
	c.ActiveLeasekeeper(10 * time.Second)
	got := authTranscript(t, etcdctl, c.Endpoints()[0])
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("step %d:\n etcd:  %s\n cairn: %s", i, want[i], got[i])
		} else if testing.Verbose() {
			t.Logf("step %d: %s", i, want[i])
		}
	}
}
