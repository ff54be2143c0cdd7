package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// ChildSpec describes one supervised child process.
type ChildSpec struct {
	// Name identifies the child in logs, the stack description and DependsOn; unique and non-empty.
	Name string
	// Argv is the program and its arguments; Argv[0] is looked up in PATH if it has no slash.
	Argv []string
	// Env holds extra "KEY=value" entries appended to the supervisor's own environment (later entries win).
	Env []string
	// Dir is the working directory; empty means the supervisor's.
	Dir string
	// LogFile receives the child's stdout and stderr, appended across restarts; its directory is created.
	LogFile string
	// Ports are the child's named ports (e.g. "client": 2379), for display only.
	Ports map[string]int
	// DependsOn names children that must pass their readiness check before this child is first launched.
	DependsOn []string
	// Ready, if set, is polled after the child is first launched until it returns nil; nil means the child is
	// ready as soon as it is launched.
	Ready ReadyCheck
	// FinalExitCodes are exit statuses that mean the child is done for good (a consensus member removed from
	// its cluster): it is not relaunched, its state becomes StateFinished and Config.OnFinished is told.
	FinalExitCodes []int
}

// Config configures a Supervisor. Zero durations take the defaults below.
type Config struct {
	// Children are the processes to run, launched in this order (subject to DependsOn).
	Children []ChildSpec
	// StackFile, if set, is rewritten with the JSON Stack on every launch, exit and stop.
	StackFile string
	// Meta is copied into the Stack as free-form facts about the whole stack (e.g. the client endpoint).
	Meta map[string]string
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL. Default 10s.
	StopTimeout time.Duration
	// ReadyTimeout bounds each child's readiness wait during Start. Default 60s.
	ReadyTimeout time.Duration
	// ReadyInterval is the pause between readiness polls. Default 100ms.
	ReadyInterval time.Duration
	// MinBackoff is the first restart delay. Default 100ms.
	MinBackoff time.Duration
	// MaxBackoff caps the restart delay. Default 5s.
	MaxBackoff time.Duration
	// StableAfter is how long a child must stay up for its backoff to reset. Default 10s.
	StableAfter time.Duration
	// Logger receives the supervisor's own events (launch, exit, restart). Default: slog.Default().
	Logger *slog.Logger
	// OnFinished, if set, is called (on the child's own goroutine, which the supervisor owns) when a child
	// exits with one of its FinalExitCodes. It may call Remove.
	OnFinished func(child string, exitCode int)
}

func (c Config) withDefaults() Config {
	setDefault := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	setDefault(&c.StopTimeout, 10*time.Second)
	setDefault(&c.ReadyTimeout, 60*time.Second)
	setDefault(&c.ReadyInterval, 100*time.Millisecond)
	setDefault(&c.MinBackoff, 100*time.Millisecond)
	setDefault(&c.MaxBackoff, 5*time.Second)
	setDefault(&c.StableAfter, 10*time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports the first problem in the config: no children, a child without a name, argv or log file,
// duplicate names, a dependency on an unknown child or on itself, or a dependency cycle.
func (c Config) Validate() error {
	if len(c.Children) == 0 {
		return errors.New("supervisor: no children")
	}
	return validateChildren(nil, c.Children)
}

// validateChildren checks children added to the existing ones (which are valid): names, argv, log files,
// dependencies on known children, no cycle.
func validateChildren(existing, children []ChildSpec) error {
	byName := make(map[string]ChildSpec, len(existing)+len(children))
	for _, child := range existing {
		byName[child.Name] = child
	}
	for i, child := range children {
		switch {
		case child.Name == "":
			return fmt.Errorf("supervisor: child %d: empty name", i)
		case len(child.Argv) == 0 || child.Argv[0] == "":
			return fmt.Errorf("supervisor: child %q: empty argv", child.Name)
		case child.LogFile == "":
			return fmt.Errorf("supervisor: child %q: empty log file", child.Name)
		}
		if _, dup := byName[child.Name]; dup {
			return fmt.Errorf("supervisor: duplicate child name %q", child.Name)
		}
		byName[child.Name] = child
	}
	for _, child := range children {
		for _, dep := range child.DependsOn {
			if _, ok := byName[dep]; !ok {
				return fmt.Errorf("supervisor: child %q depends on unknown child %q", child.Name, dep)
			}
		}
	}
	return checkAcyclic(byName)
}

// checkAcyclic fails if DependsOn edges form a cycle (a self-dependency included), which would block Start.
func checkAcyclic(byName map[string]ChildSpec) error {
	const (
		unvisited = iota
		visiting
		done
	)
	state := make(map[string]int, len(byName))
	var visit func(name string) error
	visit = func(name string) error {
		switch state[name] {
		case visiting:
			return fmt.Errorf("supervisor: dependency cycle through child %q", name)
		case done:
			return nil
		}
		state[name] = visiting
		for _, dep := range byName[name].DependsOn {
			if err := visit(dep); err != nil {
				return err
			}
		}
		state[name] = done
		return nil
	}
	for name := range byName {
		if err := visit(name); err != nil {
			return err
		}
	}
	return nil
}
