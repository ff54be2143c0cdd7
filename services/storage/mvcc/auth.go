package mvcc

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/authstate"
)

// The auth store is kept as etcd keeps it, so a snapshot carries it as etcd's do: users (marshalled
// authpb.User by name) in authUsers, roles (authpb.Role by name) in authRoles, and in auth the enabled flag
// (one byte) and the auth revision (8 bytes, big-endian).
var (
	bucketAuth      = []byte("auth")
	bucketAuthUsers = []byte("authUsers")
	bucketAuthRoles = []byte("authRoles")

	authEnabledKey  = []byte("authEnabled")
	authRevisionKey = []byte("authRevision")
)

func (s *Store) restoreAuth(tx *bolt.Tx) error {
	st := authstate.New()
	meta := tx.Bucket(bucketAuth)
	if v := meta.Get(authEnabledKey); len(v) == 1 {
		st.Enabled = v[0] == 1
	}
	if v := meta.Get(authRevisionKey); len(v) == 8 {
		st.Revision = max(binary.BigEndian.Uint64(v), authstate.InitialRevision)
	}
	err := tx.Bucket(bucketAuthUsers).ForEach(func(k, v []byte) error {
		u := &authpb.User{}
		if err := proto.Unmarshal(v, u); err != nil {
			return fmt.Errorf("decode auth user %q: %w", k, err)
		}
		st.Users[string(k)] = u
		return nil
	})
	if err != nil {
		return err
	}
	err = tx.Bucket(bucketAuthRoles).ForEach(func(k, v []byte) error {
		r := &authpb.Role{}
		if err := proto.Unmarshal(v, r); err != nil {
			return fmt.Errorf("decode auth role %q: %w", k, err)
		}
		st.Roles[string(k)] = r
		return nil
	})
	s.auth = st
	return err
}

// applyAuth applies one auth request (authstate.Apply) and writes what it changed. It runs with batchMu and mu
// held.
func (s *Store) applyAuth(req *pb.InternalRaftRequest) (*Result, error) {
	resp, change, refused := s.auth.Apply(req)
	if refused != nil {
		return &Result{Err: refused}, nil
	}
	if err := s.writeAuthChange(change); err != nil {
		return nil, err
	}
	return &Result{Response: resp, AuthRevision: s.auth.Revision}, nil
}

func (s *Store) writeAuthChange(change authstate.Change) error {
	put := func(bucket []byte, name string, msg proto.Message) error {
		b := s.wtx.Bucket(bucket)
		if msg == nil || !msg.ProtoReflect().IsValid() { // a deleted record
			return b.Delete([]byte(name))
		}
		data, err := proto.Marshal(msg)
		if err != nil {
			return err
		}
		return b.Put([]byte(name), data)
	}
	for name, u := range change.Users {
		if err := put(bucketAuthUsers, name, u); err != nil {
			return fmt.Errorf("write auth user %q: %w", name, err)
		}
	}
	for name, r := range change.Roles {
		if err := put(bucketAuthRoles, name, r); err != nil {
			return fmt.Errorf("write auth role %q: %w", name, err)
		}
	}
	if !change.Meta {
		return nil
	}
	meta := s.wtx.Bucket(bucketAuth)
	enabled := []byte{0}
	if s.auth.Enabled {
		enabled[0] = 1
	}
	if err := meta.Put(authEnabledKey, enabled); err != nil {
		return fmt.Errorf("write auth enabled: %w", err)
	}
	if err := meta.Put(authRevisionKey, binary.BigEndian.AppendUint64(nil, s.auth.Revision)); err != nil {
		return fmt.Errorf("write auth revision: %w", err)
	}
	return nil
}

// Auth returns a copy of the auth store as of the last applied entry.
func (s *Store) Auth() *authstate.State {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.auth.Clone()
}

// AuthRevision returns the auth store's revision.
func (s *Store) AuthRevision() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.auth.Revision
}

// AuthReadFence returns the auth store's read fence (authstate.State.ReadFence).
func (s *Store) AuthReadFence() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.auth.ReadFence()
}

// AuthEnabled reports whether authentication is enabled.
func (s *Store) AuthEnabled() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.auth.Enabled
}

// authRefusal is etcd's check at apply time of a request made by an authenticated user: with authentication
// enabled, a request whose header carries an auth revision older than the store's was checked against
// permissions that may have changed since, and is refused with ErrAuthOldRevision (the client authenticates
// again and retries). An anonymous request whose header carries an auth revision was let through by a
// frontend whose copy of the store had authentication disabled: with authentication enabled it is refused the
// same way, and the frontend checks it again against a fresh copy.
func (s *Store) authRefusal(req *pb.InternalRaftRequest) error {
	h := req.Header
	if !s.auth.Enabled || h == nil || req.Authenticate != nil {
		return nil
	}
	if h.Username == "" {
		if h.AuthRevision != 0 {
			return rpctypes.ErrGRPCAuthOldRevision
		}
		return nil
	}
	if h.AuthRevision < s.auth.Revision {
		return rpctypes.ErrGRPCAuthOldRevision
	}
	return nil
}
