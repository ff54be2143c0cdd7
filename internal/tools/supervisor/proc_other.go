//go:build unix && !linux

package supervisor

import "syscall"

// childProcAttr puts the child in its own process group so signals reach its whole tree. Only Linux has
// Pdeathsig; elsewhere children outlive a supervisor killed with SIGKILL.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitExited is a no-op where waitid with WNOWAIT is not used; the caller's Wait does the waiting.
func waitExited(pid int) error { return nil }
