package localstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
	"github.com/cairn-kv/cairn/services/consensus"
)

// Config configures a local stack.
type Config struct {
	// Binary is the cairn executable every child runs (usually os.Executable()).
	Binary string
	// DataDir holds the layout, the stack file, the logs and every member's data; created if missing.
	DataDir string
	// Members is the number of members (consensus + storage). 0 means what DataDir's layout says, or 3 for a
	// new stack; a different number than the layout's is refused.
	Members int
	// Frontends is how many frontends run side by side. Default one per member: frontend i is named after
	// member i, which makes that member its home (Status, HashKV and Snapshot describe it, and member i
	// advertises it as its client URL), so each member has an endpoint of its own, as in etcd.
	Frontends int
	// Leasekeepers is how many leasekeepers run (the first to claim is active, the others stand by). Default 2.
	Leasekeepers int
	// Watchhubs is how many watchhubs run. Default 2.
	Watchhubs int
	// ClientPort is the first frontend's client port. Default 2379.
	ClientPort int
	// Host is the loopback address every service binds. Default 127.0.0.1.
	Host string
	// LogLevel is every child's --log-level. Default info.
	LogLevel string
	// EnablePprof serves /debug/pprof on the metrics port of every child whose subcommand has --enable-pprof.
	EnablePprof bool
	// TraceSampleRatio, when not empty, is every child's --trace-sample-ratio.
	TraceSampleRatio string
	// ClientTLS, when it names a certificate, makes every frontend serve https:// with it (etcd's
	// --cert-file, --key-file, --trusted-ca-file, --client-cert-auth).
	ClientTLS tlsconfig.Files
	// TLS runs every link with mutual TLS (raft peers on https, the internal links, NATS locked down) and the
	// client ports with TLS, on certificates of a CA kept in DataDir/pki (created on the first run). Chosen on
	// a stack's first run and kept: a stack started plain refuses it, one started with it keeps it.
	TLS bool
	// AuthToken is every frontend's --auth-token (empty: the frontends' default, simple); either kind of token
	// is accepted by every frontend.
	AuthToken string
	// ExtraArgs are appended to the command line of every instance of the named service (e.g. "consensus":
	// {"--heartbeat-interval", "50"}).
	ExtraArgs map[string][]string
	// Env holds extra "KEY=value" entries for every child (the children inherit this process's environment,
	// OTEL_EXPORTER_OTLP_ENDPOINT included).
	Env []string
	// ChildGOMAXPROCS is every child's GOMAXPROCS. 0 means the GOMAXPROCS environment variable when it is set
	// (the children inherit it), else max(1, cores/4): the stack's processes share this machine's cores, and a
	// Go runtime per process running (and spinning for work) on every core costs more than it gives — on 2
	// cores, 1 per child gave 10-15% more puts per second than Go's default.
	ChildGOMAXPROCS int
	// ChildMemoryLimitMiB is every child's --memory-limit-mib but the watchhubs' and the trace child's (0: none
	// given), of which a consensus member gets 70% (consensusMemoryPercent): a soft limit on each process's memory that the child raises while its live heap needs more
	// (internal/gctune). A GOMEMLIMIT environment variable, which the children inherit, overrides it.
	ChildMemoryLimitMiB int
	// ReadyTimeout bounds each child's wait to become healthy during Start. Default 60s.
	ReadyTimeout time.Duration
	// StopTimeout is how long a child may take to stop after SIGTERM before SIGKILL. Default 10s.
	StopTimeout time.Duration
	// Logger receives the supervisor's events. Default slog.Default().
	Logger *slog.Logger
	// FromSnapshot, when set, restores this snapshot file (Cairn's or etcd's) into every member of a new
	// DataDir before the first start (`cairn up --from-snapshot`).
	FromSnapshot string
	// BackupDir, when set, adds a `cairn backup` child that keeps BackupKeep (default 48) snapshots there, one
	// every BackupInterval (default 30m).
	BackupDir      string
	BackupInterval time.Duration
	BackupKeep     int
	// Trace, when set, adds a `cairn trace` child (OTLP receiver and the page of where the time went) and
	// makes every other child export its spans to it; TraceForward is its --forward-otlp.
	Trace        bool
	TraceForward string
}

// withDefaults fills in the zero fields.
func (c Config) withDefaults() Config {
	if c.ClientPort == 0 {
		c.ClientPort = 2379
	}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 60 * time.Second
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// childEnv is the environment every child gets on top of this process's: GOMAXPROCS (see ChildGOMAXPROCS),
// GODEBUG (see childGODEBUG) and Env.
func (c Config) childEnv() []string {
	var env []string
	procs := c.ChildGOMAXPROCS
	if _, set := os.LookupEnv("GOMAXPROCS"); procs != 0 || !set {
		if procs == 0 {
			procs = max(1, runtime.NumCPU()/4)
		}
		env = append(env, "GOMAXPROCS="+strconv.Itoa(procs))
	}
	if godebug, set := childGODEBUG(os.Getenv("GODEBUG"), c.EnablePprof); set {
		env = append(env, "GODEBUG="+godebug)
	}
	return append(env, c.Env...)
}

// childGODEBUG is the GODEBUG a child runs with, given this process's, and whether it differs. Without
// --enable-pprof no child serves a heap profile, so none samples one (memprofilerate=0): a Go process's first
// sample maps the profile's bucket table, 1.4 MiB that counts against the child's soft memory limit
// (ChildMemoryLimitMiB) though few of its pages are touched — at 20 MiB a fourteenth of the room a child
// collects in. A memprofilerate already in GODEBUG is kept.
func childGODEBUG(inherited string, enablePprof bool) (string, bool) {
	if enablePprof || strings.Contains(inherited, "memprofilerate=") {
		return inherited, false
	}
	if inherited == "" {
		return "memprofilerate=0", true
	}
	return inherited + ",memprofilerate=0", true
}

// Validate reports what makes the configuration unusable.
func (c Config) Validate() error {
	var errs []error
	if c.ChildGOMAXPROCS < 0 {
		errs = append(errs, fmt.Errorf("localstack: negative child GOMAXPROCS %d", c.ChildGOMAXPROCS))
	}
	if c.ChildMemoryLimitMiB < 0 {
		errs = append(errs, fmt.Errorf("localstack: negative child memory limit %d MiB", c.ChildMemoryLimitMiB))
	}
	if c.Binary == "" {
		errs = append(errs, errors.New("localstack: no cairn binary"))
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("localstack: no data dir"))
	}
	if c.Members < 0 || c.Frontends < 0 || c.Leasekeepers < 0 || c.Watchhubs < 0 {
		errs = append(errs, fmt.Errorf("localstack: negative member (%d), frontend (%d), leasekeeper (%d) or watchhub (%d) count",
			c.Members, c.Frontends, c.Leasekeepers, c.Watchhubs))
	}
	if c.ClientPort < 0 || c.ClientPort > 65535 {
		errs = append(errs, fmt.Errorf("localstack: client port %d out of range", c.ClientPort))
	}
	for name := range c.ExtraArgs {
		if !knownService(name) {
			errs = append(errs, fmt.Errorf("localstack: extra args for unknown service %q", name))
		}
	}
	return errors.Join(errs...)
}

func knownService(name string) bool {
	for _, s := range services() {
		if s.name == name {
			return true
		}
	}
	return false
}

// Stack is a running (or runnable) local stack.
type Stack struct {
	cfg  Config
	plan *plan
	sup  *supervisor.Supervisor
	// changeMu serialises membership changes (they rewrite the layout and change the supervised children).
	changeMu sync.Mutex
	control  *control
}

// New checks cfg; nothing runs until Start.
func New(cfg Config) (*Stack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("localstack: data dir: %w", err)
	}
	cfg.DataDir = dir
	return &Stack{cfg: cfg}, nil
}

// Start lays the stack out (or reloads its layout), starts every child in dependency order and returns once
// all are healthy. On failure nothing is left running.
func (s *Stack) Start(ctx context.Context) error {
	if s.sup != nil {
		return errors.New("localstack: already started")
	}
	if s.cfg.FromSnapshot != "" {
		if err := s.checkFromSnapshot(); err != nil {
			return err
		}
	}
	children, err := s.Plan()
	if err != nil {
		return err
	}
	if err := s.checkPortsFree(); err != nil {
		return err
	}
	if err := os.MkdirAll(s.cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("localstack: %w", err)
	}
	if s.cfg.FromSnapshot != "" {
		if err := s.restoreMembers(ctx); err != nil {
			return err
		}
	}
	if err := s.plan.layout.save(s.cfg.DataDir); err != nil {
		return err
	}
	if s.plan.tls() {
		if err := s.issueCertificates(); err != nil {
			return err
		}
	}
	if err := s.createStackKeys(); err != nil {
		return err
	}
	sup, err := supervisor.New(supervisor.Config{
		Children:     children,
		StackFile:    s.StackFile(),
		Meta:         s.meta(),
		ReadyTimeout: s.cfg.ReadyTimeout,
		StopTimeout:  s.cfg.StopTimeout,
		Logger:       s.cfg.Logger,
		OnFinished:   s.memberGone,
	})
	if err != nil {
		return err
	}
	if err := sup.Start(ctx); err != nil {
		return fmt.Errorf("localstack: start in %s (see the logs in %s): %w", s.cfg.DataDir, s.logDir(), err)
	}
	s.changeMu.Lock()
	s.sup = sup
	s.changeMu.Unlock()
	if s.control, err = s.startControl(); err != nil {
		// The stack runs without it (a data dir path too long for a unix socket, say); only
		// `cairn up member add/remove` need it.
		s.cfg.Logger.Warn("no control socket: cairn up member add/remove will not reach this stack", "err", err)
	}
	return nil
}

// Plan lays the stack out (DataDir's layout, or a new one) and returns the child processes Start runs; it
// writes nothing.
func (s *Stack) Plan() ([]supervisor.ChildSpec, error) {
	l, err := loadLayout(s.cfg.DataDir, s.cfg.Members)
	if err != nil {
		return nil, err
	}
	switch {
	case l.fresh:
		l.TLS = s.cfg.TLS
	case s.cfg.TLS && !l.TLS:
		return nil, fmt.Errorf("localstack: %s holds a plain stack (its raft peer URLs, recorded in the WAL, are http://); "+
			"run `cairn up --tls` with a new --data-dir, or this one without --tls", s.cfg.DataDir)
	}
	s.plan = &plan{cfg: s.cfg, layout: l}
	if err := l.assignPorts(s.wantedPorts(), map[string]map[string]int{"frontend-1": {"client": s.cfg.ClientPort}}); err != nil {
		return nil, err
	}
	return s.children(), nil
}

// wantedPorts lists every child's named ports.
func (s *Stack) wantedPorts() map[string][]string {
	want := map[string][]string{}
	s.eachInstance(func(svc service, i int, name string) { want[name] = svc.ports })
	return want
}

func (s *Stack) eachInstance(f func(svc service, i int, name string)) {
	for _, svc := range services() {
		for i := 1; i <= svc.count(s.plan); i++ {
			if !s.plan.runs(svc, i) {
				continue
			}
			name := s.plan.child(svc.name, i)
			if svc.single {
				name = svc.name
			}
			f(svc, i, name)
		}
	}
}

// children describes every child process for the supervisor.
func (s *Stack) children() []supervisor.ChildSpec {
	var specs []supervisor.ChildSpec
	s.eachInstance(func(svc service, i int, name string) {
		argv := append([]string{s.cfg.Binary, svc.name}, svc.args(s.plan, i)...)
		argv = append(argv, "--listen-metrics-urls", s.plan.url(name, "metrics"), "--log-level", s.cfg.LogLevel)
		argv = append(argv, s.plan.tlsArgs(svc, name)...)
		argv = append(argv, s.plan.keyArgs(svc)...)
		if s.cfg.EnablePprof && svc.pprof {
			argv = append(argv, "--enable-pprof")
		}
		if s.cfg.TraceSampleRatio != "" {
			argv = append(argv, "--trace-sample-ratio", s.cfg.TraceSampleRatio)
		}
		if s.cfg.ChildMemoryLimitMiB > 0 && !svc.ownMemory {
			argv = append(argv, "--memory-limit-mib", strconv.Itoa(svc.memoryLimitMiB(s.cfg.ChildMemoryLimitMiB)))
		}
		argv = append(argv, s.cfg.ExtraArgs[svc.name]...)
		var deps []string
		if svc.dependsOn != nil {
			deps = svc.dependsOn(s.plan, i)
		}
		deps = append(deps, s.plan.traceDeps(svc)...)
		var final []int
		if svc.name == "consensus" {
			final = []int{consensus.ExitCodeRemoved} // removed from the cluster: restarting it would not help
		}
		specs = append(specs, supervisor.ChildSpec{
			Name:      name,
			Argv:      argv,
			Env:       slices.Concat(s.cfg.childEnv(), s.plan.traceEnv(svc)),
			LogFile:   filepath.Join(s.logDir(), name+".log"),
			Ports:     s.plan.layout.Ports[name],
			DependsOn: deps,
			Ready:     supervisor.HTTPReady(s.plan.url(name, "metrics") + "/health"),

			FinalExitCodes: final,
		})
	})
	return specs
}

func (s *Stack) meta() map[string]string {
	return map[string]string{
		"client_endpoints": strings.Join(s.ClientEndpoints(), ","),
		"data_dir":         s.cfg.DataDir,
		"members":          strconv.Itoa(len(s.plan.layout.active())),
		"layout_file":      filepath.Join(s.cfg.DataDir, layoutFile),
	}
}

func (s *Stack) logDir() string { return filepath.Join(s.cfg.DataDir, "logs") }

// StackFile is DataDir/stack.json, the supervisor's description of the running processes.
func (s *Stack) StackFile() string { return filepath.Join(s.cfg.DataDir, "stack.json") }

// ClientEndpoints are the frontends' client URLs, what etcd clients use; empty before Start.
func (s *Stack) ClientEndpoints() []string {
	if s.plan == nil {
		return nil
	}
	var urls []string
	for i := 1; i <= s.plan.frontends(); i++ {
		if s.plan.runs(frontendService(), i) {
			urls = append(urls, s.plan.clientURL(i))
		}
	}
	return urls
}

// Status describes every child (pid, state, restarts, ports, log file), as stack.json does.
func (s *Stack) Status() supervisor.Stack {
	if s.sup == nil {
		return supervisor.Stack{}
	}
	return s.sup.Stack()
}

// Stop stops every child, dependents first, and waits until all have exited.
func (s *Stack) Stop(ctx context.Context) error {
	if s.sup == nil {
		return nil
	}
	s.control.stop()
	return s.sup.Stop(ctx)
}
