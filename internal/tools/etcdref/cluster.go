package etcdref

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// Config configures a reference etcd cluster.
type Config struct {
	// Members is the cluster size. Default 3.
	Members int
	// Dir holds each member's data directory and log file. Empty: a fresh temp directory that Stop removes.
	// A given Dir is kept after Stop, but must not hold member data already: every Start picks new ports, and
	// a member's stored peer URLs would no longer match.
	Dir string
	// Binaries to run. Zero: Start calls Build.
	Binaries Binaries
	// StartTimeout bounds the wait for every member to report healthy. Default 60s.
	StartTimeout time.Duration
	// ExtraArgs are appended to every member's command line (e.g. "--quota-backend-bytes=8589934592").
	ExtraArgs []string
	// StopTimeout is how long Stop lets a member shut down after SIGTERM before SIGKILL. A member whose peers
	// are gone can spend several seconds trying to reach them; etcd is crash-safe, so the default is short. 2s.
	StopTimeout time.Duration
	// StackFile, if set, receives the supervisor's JSON description of the members (pids, ports, logs).
	StackFile string
	// Logger receives build and supervisor events. Default: slog.Default().
	Logger *slog.Logger
}

// Validate reports a config that cannot describe a cluster.
func (c Config) Validate() error {
	if c.Members < 0 {
		return fmt.Errorf("etcdref: negative member count %d", c.Members)
	}
	if c.StartTimeout < 0 || c.StopTimeout < 0 {
		return fmt.Errorf("etcdref: negative start (%s) or stop (%s) timeout", c.StartTimeout, c.StopTimeout)
	}
	return nil
}

// Member describes one running etcd member.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:PORT, the gRPC and HTTP client endpoint
	PeerURL   string
	DataDir   string
	LogFile   string
}

// Cluster is a reference etcd cluster on loopback.
type Cluster struct {
	cfg     Config
	members []Member
	sup     *supervisor.Supervisor
	ownDir  bool // Dir was created by Start and is removed by Stop
}

// New checks cfg and fills in defaults; nothing runs until Start.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Cluster{cfg: cfg}, nil
}

// Start builds the binaries if needed, launches every member and waits until all are healthy. On failure
// nothing is left running.
func (c *Cluster) Start(ctx context.Context) error {
	if c.sup != nil {
		return errors.New("etcdref: cluster already started")
	}
	if c.cfg.Binaries.Etcd == "" {
		bins, err := Build(ctx, c.cfg.Logger)
		if err != nil {
			return err
		}
		c.cfg.Binaries = bins
	}
	if c.cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "cairn-etcdref-*")
		if err != nil {
			return fmt.Errorf("etcdref: cluster dir: %w", err)
		}
		c.cfg.Dir, c.ownDir = dir, true
	}
	specs, err := c.memberSpecs()
	if err != nil {
		return err
	}
	for _, m := range c.members {
		if _, err := os.Stat(m.DataDir); err == nil {
			return fmt.Errorf("etcdref: %s already holds member data; start a reference cluster in an empty dir", m.DataDir)
		}
	}
	sup, err := supervisor.New(supervisor.Config{
		Children:     specs,
		StackFile:    c.cfg.StackFile,
		Meta:         map[string]string{"endpoints": strings.Join(c.Endpoints(), ","), "etcd_version": Version},
		ReadyTimeout: c.cfg.StartTimeout,
		StopTimeout:  c.cfg.StopTimeout,
		Logger:       c.cfg.Logger,
	})
	if err != nil {
		return err
	}
	if err := sup.Start(ctx); err != nil {
		c.removeOwnDir()
		return fmt.Errorf("etcdref: start %d-member cluster in %s: %w", c.cfg.Members, c.cfg.Dir, err)
	}
	c.sup = sup
	return nil
}

// memberSpecs allocates two ports per member and describes each member as a supervised child.
func (c *Cluster) memberSpecs() ([]supervisor.ChildSpec, error) {
	ports, err := supervisor.FreePorts(2 * c.cfg.Members)
	if err != nil {
		return nil, fmt.Errorf("etcdref: %w", err)
	}
	token := make([]byte, 6)
	_, _ = rand.Read(token)
	c.members = make([]Member, c.cfg.Members)
	initialCluster := make([]string, c.cfg.Members)
	for i := range c.members {
		name := fmt.Sprintf("etcd-%d", i)
		c.members[i] = Member{
			Name:      name,
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			DataDir:   filepath.Join(c.cfg.Dir, name),
			LogFile:   filepath.Join(c.cfg.Dir, name+".log"),
		}
		initialCluster[i] = name + "=" + c.members[i].PeerURL
	}
	specs := make([]supervisor.ChildSpec, len(c.members))
	for i, m := range c.members {
		argv := []string{c.cfg.Binaries.Etcd,
			"--name", m.Name,
			"--data-dir", m.DataDir,
			"--listen-client-urls", m.ClientURL,
			"--advertise-client-urls", m.ClientURL,
			"--listen-peer-urls", m.PeerURL,
			"--initial-advertise-peer-urls", m.PeerURL,
			"--initial-cluster", strings.Join(initialCluster, ","),
			"--initial-cluster-token", "etcdref-" + hex.EncodeToString(token),
			"--initial-cluster-state", "new",
		}
		specs[i] = supervisor.ChildSpec{
			Name:    m.Name,
			Argv:    append(argv, c.cfg.ExtraArgs...),
			LogFile: m.LogFile,
			Ports:   map[string]int{"client": ports[2*i], "peer": ports[2*i+1]},
			Ready:   supervisor.HTTPReady(m.ClientURL + "/health"),
		}
	}
	return specs, nil
}

// Endpoints returns every member's client URL, in member order.
func (c *Cluster) Endpoints() []string {
	endpoints := make([]string, len(c.members))
	for i, m := range c.members {
		endpoints[i] = m.ClientURL
	}
	return endpoints
}

// Members describes the members, in order; empty before Start.
func (c *Cluster) Members() []Member { return append([]Member(nil), c.members...) }

// Binaries returns the etcd and etcdctl paths the cluster runs.
func (c *Cluster) Binaries() Binaries { return c.cfg.Binaries }

// Supervisor exposes the member processes (pids, restarts, the stack); nil before Start.
func (c *Cluster) Supervisor() *supervisor.Supervisor { return c.sup }

// Stop terminates every member and, if Start created the directory, removes the members' data.
func (c *Cluster) Stop(ctx context.Context) error {
	if c.sup == nil {
		return nil
	}
	err := c.sup.Stop(ctx)
	c.removeOwnDir()
	return err
}

func (c *Cluster) removeOwnDir() {
	if c.ownDir {
		if err := os.RemoveAll(c.cfg.Dir); err != nil {
			c.cfg.Logger.Warn("remove etcd cluster dir", "dir", c.cfg.Dir, "err", err)
		}
	}
}
