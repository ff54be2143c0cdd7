package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// launch starts a new process for c and, on its first launch, the supervise loop that owns it. It refuses
// once Stop has begun, so no process is started that Stop would not see.
func (s *Supervisor) launch(c *child) error {
	logFile, err := openLog(c.spec.LogFile)
	if err != nil {
		return fmt.Errorf("supervisor: child %q: %w", c.spec.Name, err)
	}
	defer logFile.Close() // the child holds its own descriptor

	s.mu.Lock()
	argv, env := c.spec.Argv, c.spec.Env // Respec replaces them, never changes them in place
	s.mu.Unlock()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = c.spec.Dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = childProcAttr()

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping || c.retired {
		return errStopping
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("supervisor: launch child %q (%s): %w", c.spec.Name, argv[0], err)
	}
	firstLaunch := c.startedAt.IsZero()
	if !firstLaunch {
		c.restarts++
	}
	c.proc = cmd
	c.exited = make(chan struct{})
	c.state = StateRunning
	c.startedAt = time.Now().UTC()
	pid := cmd.Process.Pid
	fmt.Fprintf(logFile, "--- supervisor: launched %s pid %d restart %d at %s: %s\n",
		c.spec.Name, pid, c.restarts, c.startedAt.Format(time.RFC3339Nano), strings.Join(argv, " "))
	s.log.Info("child launched", "child", c.spec.Name, "pid", pid, "restarts", c.restarts, "log_file", c.spec.LogFile)
	if firstLaunch {
		s.loops.Add(1) // under mu with stopping false, so never concurrent with Stop's Wait on an idle group
		go s.superviseLoop(c)
	}
	return nil
}

func openLog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log file: %w", err)
	}
	return f, nil
}

// superviseLoop owns c's processes: it reaps each one and relaunches it after a backoff until Stop, Remove,
// or an exit with one of the child's FinalExitCodes.
func (s *Supervisor) superviseLoop(c *child) {
	defer s.loops.Done()
	delays := &backoff.ExponentialBackOff{
		InitialInterval:     s.cfg.MinBackoff,
		RandomizationFactor: 0.2,
		Multiplier:          2,
		MaxInterval:         s.cfg.MaxBackoff,
	}
	delays.Reset()
	for {
		uptime, final := s.reap(c)
		if final {
			return
		}
		if uptime >= s.cfg.StableAfter {
			delays.Reset()
		}
		for {
			select {
			case <-s.runCtx.Done():
				return
			case <-time.After(delays.NextBackOff()):
			}
			err := s.launch(c)
			if err == nil {
				s.writeStack()
				break
			}
			if errors.Is(err, errStopping) {
				return
			}
			s.log.Error("relaunch failed", "child", c.spec.Name, "err", err)
		}
	}
}

// reap waits for c's current process to exit, kills whatever is left of its process group, records the exit
// and returns how long the process ran and whether it ended for good (Stop, Remove, or a final exit status,
// which it reports to Config.OnFinished). The group is killed before the leader is reaped: while the leader is
// an unreaped zombie its pid, which is the group id, cannot be reused by an unrelated process.
func (s *Supervisor) reap(c *child) (uptime time.Duration, final bool) {
	s.mu.Lock()
	cmd, exited, startedAt := c.proc, c.exited, c.startedAt
	s.mu.Unlock()
	pid := cmd.Process.Pid

	if err := waitExited(pid); err != nil {
		s.log.Warn("wait for child exit", "child", c.spec.Name, "pid", pid, "err", err)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL) // leftovers of the group; ESRCH when none
	waitErr := cmd.Wait()
	lastExit := "exit status 0"
	if waitErr != nil {
		lastExit = waitErr.Error()
	}
	exitCode := cmd.ProcessState.ExitCode()
	finished := exitCode >= 0 && slices.Contains(c.spec.FinalExitCodes, exitCode)

	s.mu.Lock()
	c.proc = nil
	c.lastExit = lastExit
	stopped := s.stopping || c.retired
	switch {
	case stopped:
		c.state = StateStopped
	case finished:
		c.state = StateFinished
	default:
		c.state = StateBackoff
	}
	restarts := c.restarts
	s.mu.Unlock()
	close(exited)

	switch {
	case stopped:
		s.log.Info("child stopped", "child", c.spec.Name, "pid", pid, "exit", lastExit)
		return time.Since(startedAt), true
	case finished:
		s.log.Info("child finished; not restarting it", "child", c.spec.Name, "pid", pid, "exit", lastExit)
		s.writeStack()
		if s.cfg.OnFinished != nil {
			s.cfg.OnFinished(c.spec.Name, exitCode)
		}
		return time.Since(startedAt), true
	}
	s.log.Warn("child exited; restarting", "child", c.spec.Name, "pid", pid, "exit", lastExit, "restarts", restarts)
	s.writeStack()
	return time.Since(startedAt), false
}

// terminate sends SIGTERM to c's process group and escalates to SIGKILL after StopTimeout or when ctx ends;
// it returns once c's supervise loop has reaped the process.
func (s *Supervisor) terminate(ctx context.Context, c *child) {
	s.mu.Lock()
	cmd, exited := c.proc, c.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	timer := time.NewTimer(s.cfg.StopTimeout)
	defer timer.Stop()
	select {
	case <-exited:
		return
	case <-timer.C:
		s.log.Warn("child ignored SIGTERM; killing", "child", c.spec.Name, "pid", pid, "timeout", s.cfg.StopTimeout)
	case <-ctx.Done():
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
}
