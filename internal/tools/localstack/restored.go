package localstack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cairn-kv/cairn/services/storage/restore"
)

// restoredLayout is the layout of a data dir whose members `cairn snapshot restore` wrote (DATA-DIR/member-i,
// each with its restore.json) and which has no layout.json yet: the member count and token of the restore,
// and each consensus member's peer port from its restored peer URLs (they are in its WAL). ok is false when
// dir holds no restored member.
func restoredLayout(dir string) (l *layout, ok bool, err error) {
	l = &layout{Ports: map[string]map[string]int{}}
	for i := 1; ; i++ {
		m, err := restore.ReadManifest(filepath.Join(dir, memberName(i)))
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("localstack: %w", err)
		}
		if m.Name != memberName(i) || len(m.PeerURLs) != 1 {
			return nil, false, fmt.Errorf("localstack: %s was restored as member %q with peer URLs %v; `cairn up` needs "+
				"member-i restored with --name member-i and one peer URL", filepath.Join(dir, memberName(i)), m.Name, m.PeerURLs)
		}
		u, err := url.Parse(m.PeerURLs[0])
		if err != nil {
			return nil, false, fmt.Errorf("localstack: restored peer URL of %s: %w", m.Name, err)
		}
		port, err := strconv.Atoi(u.Port())
		if err != nil {
			return nil, false, fmt.Errorf("localstack: restored peer URL %s of %s has no port", m.PeerURLs[0], m.Name)
		}
		l.Members, l.Token = i, m.InitialClusterToken
		l.Ports[fmt.Sprintf("consensus-%d", i)] = map[string]int{"peer": port}
	}
	return l, l.Members > 0, nil
}

// restoreMembers restores the snapshot cfg.FromSnapshot into every member's data dir of a new stack, with the
// layout's peer URLs and token, as an operator would run `cairn snapshot restore` once per member.
func (s *Stack) restoreMembers(ctx context.Context) error {
	snapshot, err := filepath.Abs(s.cfg.FromSnapshot)
	if err != nil {
		return fmt.Errorf("localstack: --from-snapshot: %w", err)
	}
	for i := 1; i <= s.plan.layout.Members; i++ {
		dir := filepath.Join(s.cfg.DataDir, memberName(i))
		if m, err := restore.ReadManifest(dir); err == nil && m.Snapshot == snapshot {
			continue // restored by an earlier run that stopped before writing the layout
		}
		self := s.plan.url(s.plan.child("consensus", i), "peer")
		_, err := restore.Restore(ctx, restore.Config{
			SnapshotPath: snapshot, DataDir: dir, Name: memberName(i), InitialCluster: s.plan.initialCluster(),
			InitialClusterToken: s.plan.layout.Token, PeerURLs: []string{self}, Logger: s.cfg.Logger,
		})
		if err != nil {
			return fmt.Errorf("localstack: restore %s from %s: %w", memberName(i), snapshot, err)
		}
	}
	return nil
}

// checkFromSnapshot refuses --from-snapshot on a data dir that already holds a stack.
func (s *Stack) checkFromSnapshot() error {
	if _, err := os.Stat(filepath.Join(s.cfg.DataDir, layoutFile)); err == nil {
		return fmt.Errorf("localstack: --from-snapshot needs a new data dir, and %s already holds a stack "+
			"(start it without --from-snapshot, or choose another --data-dir)", s.cfg.DataDir)
	}
	return nil
}
