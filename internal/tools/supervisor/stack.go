package supervisor

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// State is where a child is in its life cycle.
type State string

// The states a child goes through.
const (
	// StateWaiting: not launched yet, waiting for its dependencies to be ready.
	StateWaiting State = "waiting"
	// StateRunning: the process is alive.
	StateRunning State = "running"
	// StateBackoff: the process exited and will be relaunched after a delay.
	StateBackoff State = "backoff"
	// StateStopped: stopped by Stop or Remove (or never launched because Start failed).
	StateStopped State = "stopped"
	// StateFinished: exited with one of its FinalExitCodes; not relaunched.
	StateFinished State = "finished"
)

// ChildStatus is one child's current state as reported by Children, Stack and the stack file.
type ChildStatus struct {
	Name string `json:"name"`
	// PID is the current process id (also its process group id), 0 when no process is running.
	PID   int   `json:"pid"`
	State State `json:"state"`
	// Ready is true once the child's readiness check has passed (or it has none and was launched).
	Ready bool `json:"ready"`
	// Restarts counts relaunches after the first launch.
	Restarts int `json:"restarts"`
	// LastExit describes the previous process's end ("exit status 1", "signal: killed"), empty if none.
	LastExit  string         `json:"last_exit,omitempty"`
	StartedAt time.Time      `json:"started_at,omitzero"`
	LogFile   string         `json:"log_file"`
	Ports     map[string]int `json:"ports,omitempty"`
	Argv      []string       `json:"argv"`
}

// Stack describes the whole supervised stack; it is what the stack file holds.
type Stack struct {
	Meta      map[string]string `json:"meta,omitempty"`
	Children  []ChildStatus     `json:"children"`
	UpdatedAt time.Time         `json:"updated_at"`
}

// Child returns the status of the named child.
func (s Stack) Child(name string) (ChildStatus, bool) {
	i := slices.IndexFunc(s.Children, func(c ChildStatus) bool { return c.Name == name })
	if i < 0 {
		return ChildStatus{}, false
	}
	return s.Children[i], true
}

// WriteText prints the stack as an aligned table: name, pid, state, restarts, ports, log file.
func (s Stack) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPID\tSTATE\tRESTARTS\tPORTS\tLOG")
	for _, c := range s.Children {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", c.Name, c.PID, c.State, c.Restarts, formatPorts(c.Ports), c.LogFile)
	}
	return tw.Flush()
}

func formatPorts(ports map[string]int) string {
	names := make([]string, 0, len(ports))
	for name := range ports {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s=%d", name, ports[name])
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

// ReadStack reads a stack file written by a Supervisor.
func ReadStack(path string) (Stack, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Stack{}, fmt.Errorf("supervisor: read stack file: %w", err)
	}
	var stack Stack
	if err := json.Unmarshal(raw, &stack); err != nil {
		return Stack{}, fmt.Errorf("supervisor: parse stack file %s: %w", path, err)
	}
	return stack, nil
}

// writeStackFile replaces path with the JSON stack atomically (write to a temp file, then rename), so a
// reader never sees a half-written file.
func writeStackFile(path string, stack Stack) error {
	raw, err := json.MarshalIndent(stack, "", "  ")
	if err != nil {
		return fmt.Errorf("supervisor: encode stack: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("supervisor: stack file dir: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("supervisor: stack file: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("supervisor: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("supervisor: close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("supervisor: replace stack file %s: %w", path, err)
	}
	return nil
}
