package mvcc

import (
	"encoding/base64"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// TestAuthPersistsInEtcdLayout: auth requests applied through the log are written to etcd's authUsers,
// authRoles and auth buckets, survive a reopen, and a request checked at an older auth revision, or checked
// anonymous by a frontend that had auth disabled, is refused.
func TestAuthPersistsInEtcdLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "storage.db")
	ts := openTestStore(t, Config{Path: path})
	hashed := base64.StdEncoding.EncodeToString([]byte("hash"))
	for _, req := range []*pb.InternalRaftRequest{
		{AuthUserAdd: &pb.AuthUserAddRequest{Name: "root", HashedPassword: hashed}},
		{AuthUserGrantRole: &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}},
		{AuthRoleAdd: &pb.AuthRoleAddRequest{Name: "reader"}},
		{AuthRoleGrantPermission: &pb.AuthRoleGrantPermissionRequest{Name: "reader",
			Perm: &authpb.Permission{Key: []byte("a"), RangeEnd: []byte("b")}}},
		{AuthEnable: &pb.AuthEnableRequest{}},
	} {
		if res := ts.apply(req); res.Err != nil {
			t.Fatalf("apply %v: %v", req, res.Err)
		}
	}
	for _, tt := range []struct {
		name    string
		header  *pb.RequestHeader
		wantErr error
	}{
		{"root at auth revision 4 of 5", &pb.RequestHeader{Username: "root", AuthRevision: 4}, rpctypes.ErrGRPCAuthOldRevision},
		{"root at the current auth revision", &pb.RequestHeader{Username: "root", AuthRevision: 5}, nil},
		// A frontend whose copy had auth disabled let it through anonymous, with its copy's fence.
		{"anonymous, checked with auth disabled", &pb.RequestHeader{AuthRevision: 5 << 1}, rpctypes.ErrGRPCAuthOldRevision},
		{"anonymous, unchecked (a service's own write)", nil, nil},
	} {
		res := ts.apply(&pb.InternalRaftRequest{Header: tt.header, Put: &pb.PutRequest{Key: []byte("k")}})
		if !errors.Is(res.Err, tt.wantErr) && !(tt.wantErr == nil && res.Err == nil) {
			t.Fatalf("put, %s: %v, want %v", tt.name, res.Err, tt.wantErr)
		}
	}
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}

	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *bolt.Tx) error {
		u := &authpb.User{}
		if err := proto.Unmarshal(tx.Bucket([]byte("authUsers")).Get([]byte("root")), u); err != nil {
			return err
		}
		if string(u.Password) != "hash" || len(u.Roles) != 1 || u.Roles[0] != "root" {
			t.Errorf("stored root user = %v", u)
		}
		if got := tx.Bucket([]byte("auth")).Get([]byte("authEnabled")); len(got) != 1 || got[0] != 1 {
			t.Errorf("authEnabled = %v, want [1]", got)
		}
		return nil
	})
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}

	reopened := openTestStore(t, Config{Path: path})
	auth := reopened.Auth()
	if !auth.Enabled || auth.Revision != 5 || len(auth.Roles["reader"].KeyPermission) != 1 {
		t.Fatalf("reopened auth = enabled %v revision %d roles %v", auth.Enabled, auth.Revision, auth.Roles)
	}
}
