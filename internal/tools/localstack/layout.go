package localstack

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// layoutFile is where a stack keeps what must not change between runs.
const layoutFile = "layout.json"

// layout is what the first run of a stack decided and every later run reuses: raft peer URLs are recorded in
// the WAL, and the other services find each other by these ports.
type layout struct {
	// Members is the highest member number: the stack's members are member-1..member-<Members> less Removed.
	Members int    `json:"members"`
	Token   string `json:"initial_cluster_token"`
	// Removed are the numbers of members removed from the cluster (`cairn up member remove`, or etcdctl
	// member remove); their processes no longer run, their data stays until the number is added again.
	Removed []int `json:"removed,omitempty"`
	// Joined are the numbers of members added to the running cluster (`cairn up member add`): their consensus
	// process starts with --initial-cluster-state existing (ignored once it has a WAL).
	Joined []int `json:"joined,omitempty"`
	// TLS: every link of the stack is mutual TLS (chosen on the first run; the peer URLs in the WAL are https).
	TLS bool `json:"tls,omitempty"`
	// fresh: no layout was found, this is the first run.
	fresh bool
	// Ports maps a child's name to its named ports.
	Ports map[string]map[string]int `json:"ports"`
}

// loadLayout reads dir's layout, or starts a new one for members (0: 3) when dir has none. A layout made for
// another member count is refused: changing membership is etcdctl member add/remove's job.
func loadLayout(dir string, members int) (*layout, error) {
	raw, err := os.ReadFile(filepath.Join(dir, layoutFile))
	if errors.Is(err, fs.ErrNotExist) {
		if l, ok, err := restoredLayout(dir); err != nil || ok {
			if err == nil && members != 0 && members != l.Members {
				err = fmt.Errorf("localstack: %s holds %d restored members, not %d", dir, l.Members, members)
			}
			return l, err
		}
		if members == 0 {
			members = 3
		}
		token := make([]byte, 6)
		_, _ = rand.Read(token)
		return &layout{Members: members, Token: "cairn-" + hex.EncodeToString(token), Ports: map[string]map[string]int{}, fresh: true}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("localstack: read layout: %w", err)
	}
	var l layout
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("localstack: parse %s: %w", filepath.Join(dir, layoutFile), err)
	}
	if l.Ports == nil {
		l.Ports = map[string]map[string]int{}
	}
	if active := len(l.active()); members != 0 && members != active {
		return nil, fmt.Errorf("localstack: %s holds a %d-member stack, not %d (use another --data-dir, or change membership with `cairn up member add/remove`)",
			dir, active, members)
	}
	return &l, nil
}

// active are the numbers of the stack's members, in order.
func (l *layout) active() []int {
	var numbers []int
	for i := 1; i <= l.Members; i++ {
		if !slices.Contains(l.Removed, i) {
			numbers = append(numbers, i)
		}
	}
	return numbers
}

// isActive reports whether member i is one of the stack's members.
func (l *layout) isActive(i int) bool {
	return i >= 1 && i <= l.Members && !slices.Contains(l.Removed, i)
}

// assignPorts gives every named port in want a number: the one the layout already has, fixed[child][port] if
// given (which overrides the layout), or a free loopback port that no other child of the layout uses.
func (l *layout) assignPorts(want map[string][]string, fixed map[string]map[string]int) error {
	taken := map[int]bool{}
	for _, ports := range fixed {
		for _, port := range ports {
			taken[port] = true
		}
	}
	type slot struct{ child, port string }
	var missing []slot
	for _, child := range slices.Sorted(maps.Keys(want)) {
		if l.Ports[child] == nil {
			l.Ports[child] = map[string]int{}
		}
		for _, port := range want[child] {
			if number, ok := fixed[child][port]; ok {
				l.Ports[child][port] = number
			} else if number, ok := l.Ports[child][port]; ok {
				taken[number] = true
			} else {
				missing = append(missing, slot{child, port})
			}
		}
	}
	for len(missing) > 0 {
		free, err := supervisor.FreePorts(len(missing))
		if err != nil {
			return fmt.Errorf("localstack: %w", err)
		}
		for _, number := range free {
			if taken[number] || len(missing) == 0 {
				continue
			}
			taken[number] = true
			l.Ports[missing[0].child][missing[0].port] = number
			missing = missing[1:]
		}
	}
	return nil
}

// save writes the layout to dir atomically.
func (l *layout) save(dir string) error {
	raw, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("localstack: encode layout: %w", err)
	}
	tmp := filepath.Join(dir, layoutFile+".tmp")
	if err := os.WriteFile(tmp, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("localstack: write layout: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, layoutFile)); err != nil {
		return fmt.Errorf("localstack: write layout: %w", err)
	}
	return nil
}
