package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"sync"
	"time"
)

// errStopping is returned by launch once Stop has begun; it ends a supervise loop quietly.
var errStopping = errors.New("supervisor: stopping")

// Supervisor runs and restarts a set of child processes (Add and Remove change it while running). Create it
// with New; it is safe for concurrent use.
type Supervisor struct {
	cfg Config
	log *slog.Logger

	// runCtx is cancelled by Stop; it ends backoff sleeps, dependency waits and readiness polls.
	runCtx    context.Context
	cancelRun context.CancelFunc
	// loops counts running supervise loops (one per launched child); Stop waits for them.
	loops sync.WaitGroup
	// stackMu serialises stack file writes so a stale snapshot never overwrites a newer one.
	stackMu sync.Mutex

	mu       sync.Mutex // guards children, byName, started, stopping and every child's runtime fields
	children []*child
	byName   map[string]*child
	started  bool
	stopping bool
}

// child is one supervised process slot; its runtime fields are guarded by Supervisor.mu.
type child struct {
	spec ChildSpec
	// ready is closed once the child's readiness check has passed; dependents wait on it.
	ready chan struct{}

	proc   *exec.Cmd     // the current process, nil when none runs
	exited chan struct{} // closed once proc has been reaped
	// retired: Remove took the child out; its loop ends instead of relaunching it.
	retired   bool
	state     State
	isReady   bool
	restarts  int
	lastExit  string
	startedAt time.Time
}

// New checks cfg and returns a Supervisor that has launched nothing yet.
func New(cfg Config) (*Supervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	runCtx, cancelRun := context.WithCancel(context.Background())
	s := &Supervisor{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "supervisor"),
		byName:    make(map[string]*child, len(cfg.Children)),
		runCtx:    runCtx,
		cancelRun: cancelRun,
	}
	for _, spec := range cfg.Children {
		s.addLocked(spec)
	}
	return s, nil
}

// addLocked takes spec in as a child waiting to be launched.
func (s *Supervisor) addLocked(spec ChildSpec) *child {
	spec.Argv = slices.Clone(spec.Argv)
	spec.Env = slices.Clone(spec.Env)
	spec.Ports = maps.Clone(spec.Ports)
	spec.DependsOn = slices.Clone(spec.DependsOn)
	c := &child{spec: spec, ready: make(chan struct{}), state: StateWaiting}
	s.children = append(s.children, c)
	s.byName[spec.Name] = c
	return c
}

// Start launches every child, each after its dependencies are ready, and returns once all are running and
// ready. On failure it stops everything it launched and returns the first error; Start may be called once.
func (s *Supervisor) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started || s.stopping {
		s.mu.Unlock()
		return errors.New("supervisor: Start called twice or after Stop")
	}
	s.started = true
	children := slices.Clone(s.children)
	s.mu.Unlock()

	if err := s.bringUpAll(ctx, children); err != nil {
		if stopErr := s.Stop(context.Background()); stopErr != nil {
			s.log.Error("stop after failed start", "err", stopErr)
		}
		return err
	}
	s.writeStack()
	return nil
}

// bringUpAll brings every one of children up, each after its dependencies. At the first error it cancels the
// others and returns that error once all have given up.
func (s *Supervisor) bringUpAll(ctx context.Context, children []*child) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan error, len(children))
	for _, c := range children {
		go func() { results <- s.bringUp(ctx, c) }()
	}
	var first error
	for range children {
		if err := <-results; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

// bringUp waits for c's dependencies, launches it, starts its supervise loop and waits until it is ready.
func (s *Supervisor) bringUp(ctx context.Context, c *child) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.runCtx, cancel)()

	s.mu.Lock()
	deps := slices.Clone(c.spec.DependsOn)
	depsReady := make([]<-chan struct{}, len(deps))
	for i, dep := range deps {
		depsReady[i] = s.byName[dep].ready
	}
	s.mu.Unlock()
	for i, depReady := range depsReady {
		dep := deps[i]
		select {
		case <-depReady:
		case <-ctx.Done():
			return fmt.Errorf("supervisor: child %q waiting for %q: %w", c.spec.Name, dep, context.Cause(ctx))
		}
	}
	if err := s.launch(c); err != nil {
		return err
	}
	s.writeStack()
	if err := s.waitReady(ctx, c); err != nil {
		return err
	}
	s.mu.Lock()
	c.isReady = true
	s.mu.Unlock()
	close(c.ready)
	s.log.Info("child ready", "child", c.spec.Name)
	s.writeStack()
	return nil
}

// waitReady polls c's readiness check until it passes, ReadyTimeout runs out, or ctx ends.
func (s *Supervisor) waitReady(ctx context.Context, c *child) error {
	if c.spec.Ready == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	for {
		lastErr := c.spec.Ready(ctx)
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("supervisor: child %q not ready within %s: %w", c.spec.Name, s.cfg.ReadyTimeout, lastErr)
		case <-time.After(s.cfg.ReadyInterval):
		}
	}
}

// Stop terminates every child, dependents before their dependencies: SIGTERM to its process group, SIGKILL
// after StopTimeout (or at once when ctx ends), and returns when all children and their supervise loops are
// gone. Calling it again is a no-op.
func (s *Supervisor) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		s.loops.Wait()
		return nil
	}
	s.stopping = true
	s.cancelRun()
	children := slices.Clone(s.children)
	// Dependents go first: a child is terminated once every child that depends on it is gone, so e.g. a
	// frontend never outlives the storage it forwards to.
	gone := make(map[string]chan struct{}, len(children))
	dependents := make(map[string][]string, len(children))
	for _, c := range children {
		if c.proc == nil && c.state != StateFinished {
			c.state = StateStopped
		}
		gone[c.spec.Name] = make(chan struct{})
		for _, dep := range c.spec.DependsOn {
			dependents[dep] = append(dependents[dep], c.spec.Name)
		}
	}
	s.mu.Unlock()

	var wg sync.WaitGroup
	for _, c := range children {
		wg.Go(func() {
			defer close(gone[c.spec.Name])
			for _, dependent := range dependents[c.spec.Name] {
				if g, ok := gone[dependent]; ok {
					<-g
				}
			}
			s.terminate(ctx, c)
		})
	}
	wg.Wait()
	s.loops.Wait()
	s.writeStack()
	s.log.Info("supervisor stopped", "children", len(children))
	return nil
}

// Children returns every child's current status, in configuration order.
func (s *Supervisor) Children() []ChildStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	statuses := make([]ChildStatus, len(s.children))
	for i, c := range s.children {
		statuses[i] = c.statusLocked()
	}
	return statuses
}

// Child returns the named child's current status.
func (s *Supervisor) Child(name string) (ChildStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.byName[name]
	if !ok {
		return ChildStatus{}, false
	}
	return c.statusLocked(), true
}

// Stack returns the current description of the whole stack, as written to Config.StackFile.
func (s *Supervisor) Stack() Stack {
	s.mu.Lock()
	meta := maps.Clone(s.cfg.Meta)
	s.mu.Unlock()
	return Stack{Meta: meta, Children: s.Children(), UpdatedAt: time.Now().UTC()}
}

// writeStack rewrites the stack file, if configured. Failures are logged, not fatal: the file is a report.
func (s *Supervisor) writeStack() {
	if s.cfg.StackFile == "" {
		return
	}
	s.stackMu.Lock()
	defer s.stackMu.Unlock()
	if err := writeStackFile(s.cfg.StackFile, s.Stack()); err != nil {
		s.log.Error("write stack file", "file", s.cfg.StackFile, "err", err)
	}
}

func (c *child) statusLocked() ChildStatus {
	status := ChildStatus{
		Name:      c.spec.Name,
		State:     c.state,
		Ready:     c.isReady,
		Restarts:  c.restarts,
		LastExit:  c.lastExit,
		StartedAt: c.startedAt,
		LogFile:   c.spec.LogFile,
		Ports:     maps.Clone(c.spec.Ports),
		Argv:      slices.Clone(c.spec.Argv),
	}
	if c.proc != nil {
		status.PID = c.proc.Process.Pid
	}
	return status
}
