package frontend_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/coreos/go-semver/semver"
	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

func TestClusterMembership(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	ctx := ctxFor(t)
	cli := c.Client(t, c.Endpoints()[0])
	list, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 3 || list.Header.ClusterId != c.Members()[0].Node().ClusterID() {
		t.Fatalf("member list %v", list)
	}
	for _, m := range list.Members {
		var found *clustertest.Member
		for _, tm := range c.Members() {
			if tm.ID() == m.ID {
				found = tm
			}
		}
		if found == nil || m.Name != found.Name || len(m.ClientURLs) != 1 || m.ClientURLs[0] != found.ClientURL || m.IsLearner {
			t.Errorf("member %v does not match the cluster's %v", m, found)
		}
	}
	c.Consensus.WaitHealthy(15 * time.Second)
	add, err := cli.MemberAddAsLearner(ctx, []string{"http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !add.Member.IsLearner || len(add.Members) != 4 {
		t.Fatalf("member add: %v", add)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"add a member's peer URL", func() error { _, err := cli.MemberAdd(ctx, list.Members[0].PeerURLs); return err },
			rpctypes.ErrGRPCPeerURLExist},
		{"update the learner's peer URL", func() error {
			_, err := cli.MemberUpdate(ctx, add.Member.ID, []string{"http://127.0.0.1:2"})
			return err
		}, nil},
		{"promote a learner that never started", func() error { _, err := cli.MemberPromote(ctx, add.Member.ID); return err },
			rpctypes.ErrGRPCLearnerNotReady},
		{"remove the learner", func() error { _, err := cli.MemberRemove(ctx, add.Member.ID); return err }, nil},
		{"remove it again", func() error { _, err := cli.MemberRemove(ctx, add.Member.ID); return err },
			rpctypes.ErrGRPCMemberNotFound},
		// As in etcd, the leader checks that the member's log is in sync before it checks that it is a learner,
		// so a voter lagging under load answers ErrGRPCLearnerNotReady first: wait for it to catch up.
		{"promote a voter", func() error {
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				_, err := cli.MemberPromote(ctx, list.Members[0].ID)
				if !errors.Is(rpctypes.Error(err), rpctypes.ErrMemberLearnerNotReady) || time.Now().After(deadline) {
					return err
				}
			}
		}, rpctypes.ErrGRPCMemberNotLearner},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.name, tc.call(), tc.want) })
	}
	list, err = cli.MemberList(ctx)
	if err != nil || len(list.Members) != 3 {
		t.Fatalf("member list after remove: %v %v", list, err)
	}
}

func TestMaintenance(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	ctx := ctxFor(t)
	cli := c.Client(t)
	for i := range 20 {
		if _, err := cli.Put(ctx, fmt.Sprintf("maint/%02d", i), "value"); err != nil {
			t.Fatal(err)
		}
	}
	last, err := cli.Put(ctx, "maint/last", "x")
	if err != nil {
		t.Fatal(err)
	}
	leader := c.Leader(10 * time.Second)

	t.Run("status speaks for each home member", func(t *testing.T) {
		for i, fe := range c.Frontends() {
			st, err := cli.Status(ctx, fe.URL)
			if err != nil {
				t.Fatal(err)
			}
			v, err := semver.NewVersion(st.Version)
			if err != nil || v.LessThan(*semver.New("3.5.13")) {
				t.Errorf("version %q must parse as semver >= 3.5.13", st.Version)
			}
			home := c.Members()[i]
			if st.Header.MemberId != home.ID() || st.Leader != leader.ID() || st.RaftTerm == 0 || st.RaftIndex == 0 ||
				st.RaftAppliedIndex == 0 || st.DbSize <= 0 || st.DbSizeInUse <= 0 || st.DbSizeInUse > st.DbSize ||
				st.DbSizeQuota != 2<<30 || st.IsLearner || len(st.Errors) != 0 || st.Header.ClusterId == 0 ||
				st.StorageVersion != "3.7.0" {
				t.Errorf("status through %s: %+v", fe.Name, st)
			}
		}
	})

	t.Run("hashkv agrees on every member", func(t *testing.T) {
		// Followers apply a moment after the leader acknowledged; etcd too answers a future revision until then.
		for _, m := range c.Members() {
			waittest.Until(t, 10*time.Second, 5*time.Millisecond, "every member applied the last write", func() bool {
				st, err := m.Storage().Status(ctx)
				return err == nil && st.Revision >= last.Header.Revision
			})
		}
		var hashes []uint32
		for i, fe := range c.Frontends() {
			resp, err := cli.HashKV(ctx, fe.URL, last.Header.Revision)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Header.MemberId != c.Members()[i].ID() || resp.HashRevision != last.Header.Revision {
				t.Errorf("hashkv through %s: %v", fe.Name, resp)
			}
			hashes = append(hashes, resp.Hash)
		}
		if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
			t.Fatalf("hashes differ: %v", hashes)
		}
		_, err := cli.HashKV(ctx, c.Endpoints()[0], 1<<40)
		wantStatus(t, "hashkv of a future revision", err, rpctypes.ErrGRPCFutureRev)
	})

	t.Run("hash speaks for each home member and agrees on every member", func(t *testing.T) {
		before := backendHashes(t, c, last.Header.Revision)
		put, err := cli.Put(ctx, "maint/hash", "moves it")
		if err != nil {
			t.Fatal(err)
		}
		if after := backendHashes(t, c, put.Header.Revision); after == before {
			t.Fatalf("a put left the hash at %d", before)
		}
	})

	t.Run("snapshot is the database followed by its sha256", func(t *testing.T) {
		one := c.Client(t, c.Endpoints()[2])
		rc, err := one.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		if len(data)%512 != sha256.Size {
			t.Fatalf("snapshot of %d bytes: etcdctl wants a multiple of 512 plus a 32-byte sha256", len(data))
		}
		db, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
		if got := sha256.Sum256(db); !bytes.Equal(got[:], sum) {
			t.Fatal("trailing sha256 does not match the database")
		}
		path := filepath.Join(t.TempDir(), "snap.db")
		if err := writeFile(path, db); err != nil {
			t.Fatal(err)
		}
		bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("snapshot is not a bbolt database: %v", err)
		}
		_ = bdb.Close()
	})

	t.Run("alarms", func(t *testing.T) {
		resp, err := cli.AlarmList(ctx)
		if err != nil || len(resp.Alarms) != 0 || resp.Header.ClusterId == 0 {
			t.Fatalf("alarm list: %v %v", resp, err)
		}
		if _, err := cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: leader.ID(), Alarm: pb.AlarmType_NOSPACE}); err != nil {
			t.Fatalf("disarming an alarm that is not raised: %v", err)
		}
	})

	t.Run("defragment shrinks the home member's database", func(t *testing.T) {
		if _, err := cli.Delete(ctx, "maint/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Defragment(ctx, c.Endpoints()[0])
		if err != nil || resp.Header != nil {
			t.Fatalf("defragment: %v %v (etcd answers without a header)", resp, err)
		}
		if got, err := cli.Get(ctx, "maint/last", clientv3.WithSerializable()); err != nil || len(got.Kvs) != 0 {
			t.Fatalf("read after defragment: %v %v", got, err)
		}
		if _, err := cli.Put(ctx, "maint/after", "y"); err != nil {
			t.Fatalf("write after defragment: %v", err)
		}
	})

	t.Run("downgrade answers as etcd when none is possible", func(t *testing.T) {
		m := pb.NewMaintenanceClient(rawConn(t, c.Endpoints()[0]))
		for _, tc := range []struct {
			req  *pb.DowngradeRequest
			want error
		}{
			{&pb.DowngradeRequest{Action: pb.DowngradeRequest_VALIDATE, Version: "3.6"}, rpctypes.ErrGRPCInvalidDowngradeTargetVersion},
			{&pb.DowngradeRequest{Action: pb.DowngradeRequest_ENABLE, Version: "3.6.0"}, rpctypes.ErrGRPCInvalidDowngradeTargetVersion},
			{&pb.DowngradeRequest{Action: pb.DowngradeRequest_VALIDATE, Version: "bogus"}, rpctypes.ErrGRPCWrongDowngradeVersionFormat},
			{&pb.DowngradeRequest{Action: 7}, status.Error(codes.Unknown, "etcdserver: unknown method")},
			{&pb.DowngradeRequest{Action: pb.DowngradeRequest_CANCEL}, nil},
		} {
			resp, err := m.Downgrade(ctx, tc.req)
			wantStatus(t, tc.req.String(), err, tc.want)
			if err == nil && resp.Version != "3.7" {
				t.Errorf("cancel answered version %q, want etcd's cluster version 3.7", resp.Version)
			}
		}
	})

	t.Run("move leader from any frontend", func(t *testing.T) {
		var target *clustertest.Member
		for _, m := range c.Members() {
			if m != leader {
				target = m
				break
			}
		}
		var notLeaderFE string
		for i, fe := range c.Frontends() {
			if c.Members()[i] != leader && c.Members()[i] != target {
				notLeaderFE = fe.URL
			}
		}
		before, err := c.Client(t, notLeaderFE).Put(ctx, "maint/term", "before")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client(t, notLeaderFE).MoveLeader(ctx, target.ID()); err != nil {
			t.Fatal(err)
		}
		// Headers carry the new term at once, as etcd's do (not a status probe's term from before the move).
		after, err := c.Client(t, notLeaderFE).Put(ctx, "maint/term", "after")
		if err != nil {
			t.Fatal(err)
		}
		read, err := c.Client(t, notLeaderFE).Get(ctx, "maint/term", clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		st, err := c.Client(t, notLeaderFE).Status(ctx, notLeaderFE)
		if err != nil {
			t.Fatal(err)
		}
		if after.Header.RaftTerm <= before.Header.RaftTerm || after.Header.RaftTerm != st.RaftTerm || read.Header.RaftTerm != st.RaftTerm {
			t.Fatalf("raft_term before the move %d, of the put after it %d, of a read %d; the member's term is %d",
				before.Header.RaftTerm, after.Header.RaftTerm, read.Header.RaftTerm, st.RaftTerm)
		}
		if got := c.Leader(10 * time.Second); got != target {
			t.Fatalf("leader is %s, want %s", got.Name, target.Name)
		}
		_, err = c.Client(t, notLeaderFE).MoveLeader(ctx, 12345)
		wantStatus(t, "move leader to a stranger", err, rpctypes.ErrGRPCBadLeaderTransferee)
	})
}

// TestAuthDisabledAnswers: a new cluster answers as a new etcd, with authentication disabled at auth
// revision 1; AuthEnable needs the root user first.
func TestAuthDisabledAnswers(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1})
	ctx := ctxFor(t)
	auth := pb.NewAuthClient(rawConn(t, c.Endpoints()[0]))
	st, err := auth.AuthStatus(ctx, &pb.AuthStatusRequest{})
	if err != nil || st.Enabled || st.AuthRevision != 1 || st.Header.ClusterId == 0 || st.Header.MemberId == 0 {
		t.Fatalf("auth status: %v %v", st, err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error
	}{
		{"authenticate", func() error {
			_, err := auth.Authenticate(ctx, &pb.AuthenticateRequest{Name: "root", Password: "x"})
			return err
		}, rpctypes.ErrGRPCAuthNotEnabled},
		{"auth disable", func() error { _, err := auth.AuthDisable(ctx, &pb.AuthDisableRequest{}); return err }, nil},
		{"auth enable", func() error { _, err := auth.AuthEnable(ctx, &pb.AuthEnableRequest{}); return err },
			rpctypes.ErrGRPCRootUserNotExist},
		{"user add", func() error { _, err := auth.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "u"}); return err }, nil},
		{"user add again", func() error { _, err := auth.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "u"}); return err },
			rpctypes.ErrGRPCUserAlreadyExist},
		{"role list", func() error { _, err := auth.RoleList(ctx, &pb.AuthRoleListRequest{}); return err }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStatus(t, tc.name, tc.call(), tc.want) })
	}
}

// backendHashes waits for every member to apply rev, asks each frontend for Maintenance.Hash (client/v3 has no
// Hash call) and checks it against its home member's storage asked directly, the header against the member,
// and that every member has the same hash, which it returns.
func backendHashes(t *testing.T, c *clustertest.Cluster, rev int64) uint32 {
	t.Helper()
	ctx := ctxFor(t)
	for _, m := range c.Members() {
		waittest.Until(t, 10*time.Second, 5*time.Millisecond, "every member applied revision "+fmt.Sprint(rev), func() bool {
			st, err := m.Storage().Status(ctx)
			return err == nil && st.Revision >= rev
		})
	}
	var hashes []uint32
	for i, fe := range c.Frontends() {
		home := c.Members()[i]
		resp, err := pb.NewMaintenanceClient(rawConn(t, fe.URL)).Hash(ctx, &pb.HashRequest{})
		if err != nil {
			t.Fatalf("hash through %s: %v", fe.Name, err)
		}
		h := resp.Header
		if h.GetMemberId() != home.ID() || h.GetClusterId() != home.Node().ClusterID() || h.GetClusterId() == 0 ||
			h.GetRaftTerm() == 0 || h.GetRevision() != rev {
			t.Errorf("hash through %s: header %v, want member %x, cluster %x, a raft term, revision %d",
				fe.Name, h, home.ID(), home.Node().ClusterID(), rev)
		}
		direct, err := storageclient.Dial(home.StorageURL)
		if err != nil {
			t.Fatal(err)
		}
		want, err := direct.BackendHash(ctx)
		_ = direct.Close()
		if err != nil {
			t.Fatalf("hash of %s's storage: %v", home.Name, err)
		}
		if resp.Hash != want.Hash {
			t.Errorf("hash through %s %d, its storage answers %d", fe.Name, resp.Hash, want.Hash)
		}
		hashes = append(hashes, resp.Hash)
	}
	for _, h := range hashes[1:] {
		if h != hashes[0] {
			t.Fatalf("members' hashes differ: %v", hashes)
		}
	}
	return hashes[0]
}
